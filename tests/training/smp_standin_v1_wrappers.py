"""The SMP v1 stand-in's DistributedModel and DistributedOptimizer (see smp_standins.py for what they model)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from smp_standins import SmpV1


class ApiMisuse(AssertionError):
    """The script used the library in a way the real one forbids."""


def _lacks_cpu_half_kernels(module: nn.Module) -> bool:
    """Whether `module` holds fp16 weights on the CPU of a torch without CPU fp16 kernels (torch 1.13, the SMP v1
    image: "LayerNormKernelImpl" not implemented for 'Half'). SMP runs fp16 on GPUs, which have them."""
    parameter = next(module.parameters(), None)
    if parameter is None or parameter.dtype != torch.float16 or parameter.device.type != "cpu":
        return False
    try:
        torch.nn.functional.layer_norm(torch.ones(1, 2, dtype=torch.float16), (2,))
    except RuntimeError:
        return True
    return False


def _forward_in_fp32(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
    """The forward pass computed on fp32 copies of the fp16 weights, as a GPU's fp16 kernels would with fp32
    accumulation: the copies are differentiable, so the gradients still land on the fp16 parameters in fp16."""
    copies = {name: tensor.float() for name, tensor in module.named_parameters()}
    func = getattr(torch, "func", None)
    if func is not None:
        return func.functional_call(module, copies, args, kwargs)
    from torch.nn.utils import stateless

    return stateless.functional_call(module, copies, args, kwargs)


class DistributedModel(nn.Module):
    def __init__(self, smp: SmpV1, module: nn.Module) -> None:
        super().__init__()
        self._smp = smp
        self.module = module
        for parameter in module.parameters():
            parameter.register_hook(self._check_gradient_source)

    def _check_gradient_source(self, grad: torch.Tensor) -> torch.Tensor:
        if not self._smp.in_backward:
            raise ApiMisuse(
                "gradients computed outside model.backward(): smp needs model.backward(loss), not loss.backward()"
            )
        return grad

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self._smp.in_step:
            raise ApiMisuse("the DistributedModel can only be called inside an @smp.step function")
        if _lacks_cpu_half_kernels(self.module):
            return _forward_in_fp32(self.module, args, kwargs)
        return self.module(*args, **kwargs)

    def backward(self, tensors: torch.Tensor, grad_tensors: Any = None) -> None:
        if not self._smp.in_step:
            raise ApiMisuse("model.backward can only be called inside an @smp.step function")
        microbatches = int((self._smp.config or {}).get("microbatches", 1))
        self._smp.in_backward = True
        try:
            # SMP averages gradients across microbatches (average_grads_across_microbatches=True).
            (tensors / microbatches).backward(grad_tensors)
        finally:
            self._smp.in_backward = False

    def get_module(self) -> nn.Module:
        return self.module

    def local_parameters(self) -> Any:
        return self.module.parameters()

    def is_distributed_parameter(self, parameter: nn.Parameter) -> bool:
        return False  # the stand-in holds every parameter whole

    def state_dict(self, *args: Any, cast_to_cpu: bool = True, gather_to_rank0: bool = True, **kwargs: Any) -> Any:
        """The whole model under the wrapped module's own names (SMP's wrappers forward state_dict; no prefix)."""
        if self._smp.in_step:
            raise ApiMisuse("model.state_dict() gathers across ranks: call it outside @smp.step functions")
        return {name: tensor.detach().cpu() for name, tensor in self.module.state_dict().items()}

    def local_state_dict(self) -> dict[str, Any]:
        tp, pp = self._smp._degrees()
        return {
            **self.state_dict(),
            "_smp_is_partial": True,
            "_smp_load_info": {"tensor_parallel_degree": tp, "pipeline_parallel_degree": pp},
        }

    def load_state_dict(  # type: ignore[override]
        self, state_dict: dict[str, Any], strict: bool = True, translate_function: Any = None, **_: Any
    ) -> None:
        """Deferred to the first step (after partitioning). A state dict without SMP's `_smp_is_partial` marker is
        a full Hugging Face one, translated with the registered (or given) translation first."""
        state_dict = dict(state_dict)
        marker = state_dict.pop("_smp_is_partial", None)
        state_dict.pop("_smp_load_info", None)
        if marker is None:
            if translate_function is not None:
                state_dict = translate_function(state_dict)
            else:
                for _, hf_to_smp in self._smp.translate_functions:
                    state_dict = hf_to_smp(state_dict)
        self._smp.record("load_state_dict", keys=len(state_dict), partial=bool(marker))
        self._smp.pending_model_loads.append((state_dict, strict))
        if self._smp.steps:
            self._smp._load_pending()


class DistributedOptimizer:
    """With mp_parameters fp16 or bf16, like SMP's Bit16_Optimizer (SMP 1.12.1 torch/fp16/fp16.py): fp32 master
    weights whose gradients are copied from the model's at the end of every @smp.step (update_master_grads, called
    from the model's step), so the optimizer steps from those copies and never reads the model's .grad. With fp16
    only, as in SMP: clip_master_grads, and a skipped step (overflow=True) when a gradient is not finite."""

    def __init__(self, smp: SmpV1, optimizer: torch.optim.Optimizer) -> None:
        self._smp = smp
        self.overflow = False
        config = smp.config or {}
        self.fp16 = bool(config.get("fp16"))
        self.bit16 = self.fp16 or bool(config.get("bf16"))
        self._pairs: list[tuple[nn.Parameter, nn.Parameter]] = []
        # Bit16_Optimizer's map from each master to whether its model parameter is a tensor-parallel slice.
        self.master_is_distributed: dict[nn.Parameter, bool] = {}
        if self.bit16:
            groups = []
            for group in optimizer.param_groups:
                masters = []
                for parameter in group["params"]:
                    master = nn.Parameter(parameter.detach().float().clone())
                    self._pairs.append((parameter, master))
                    self.master_is_distributed[master] = smp.model.is_distributed_parameter(parameter)
                    masters.append(master)
                groups.append({**{key: value for key, value in group.items() if key != "params"}, "params": masters})
            optimizer = type(optimizer)(groups)  # each group carries its own hyperparameters
        self.optimizer = optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def refresh_masters(self) -> None:
        with torch.no_grad():
            for parameter, master in self._pairs:
                master.copy_(parameter.float())

    def update_master_grads(self) -> None:
        """Called by the stand-in at the end of each @smp.step, as SMP's model step calls it."""
        for parameter, master in self._pairs:
            master.grad = None if parameter.grad is None else parameter.grad.detach().float()

    def _stepped_grad_norm(self) -> float:
        grads = [p.grad.detach().float() for group in self.param_groups for p in group["params"] if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack([grad.norm() for grad in grads]))) if grads else 0.0

    def clip_master_grads(self, max_norm: float) -> torch.Tensor:
        if not self.fp16:
            # SMP 1.12.1's DistributedOptimizer.clip_master_grads returns without clipping unless fp16.
            raise ApiMisuse("clip_master_grads clips only with the fp16 optimizer (mp_parameters fp16=true)")
        self._smp.record("clip_master_grads", max_norm=max_norm)
        return torch.nn.utils.clip_grad_norm_([master for _, master in self._pairs], max_norm)

    def step(self) -> None:
        # The norm of the gradients this step actually applies: what clipping must have bounded.
        self._smp.record("optimizer.step", master_grad_norm=self._stepped_grad_norm())
        if not self.bit16:
            self.optimizer.step()
            return
        grads = [master.grad for _, master in self._pairs if master.grad is not None]
        self.overflow = self.fp16 and not all(bool(torch.isfinite(grad).all()) for grad in grads)
        if not self.overflow:
            self.optimizer.step()
            with torch.no_grad():
                for parameter, master in self._pairs:
                    parameter.copy_(master.to(parameter.dtype))

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)
        for parameter, _ in self._pairs:
            parameter.grad = None

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def local_state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)
