"""In-test STAND-INS for the SageMaker model parallelism libraries, which exist only inside AWS containers:
`smdistributed.modelparallel.torch` (SMP v1) and `torch.sagemaker` (SMP v2).

They are not the libraries. They implement just enough of the documented API (sagemaker-python-sdk v2.199.0
`smd_model_parallel_pytorch.rst` / `smd_model_parallel_common_api.rst`; the AWS SMP v2 guide and examples) to run
train.py's SMP code paths on one CPU process, and they raise `ApiMisuse` where the real library would fail or
silently misbehave:

SMP v1: smp.init() before anything else; the model built inside smp.model_creation(...); one DistributedModel;
the optimizer created from the DistributedModel's parameters (after wrapping) and then wrapped by
DistributedOptimizer; set_activation_checkpointing on modules of the wrapped model, after DistributedModel; the
DistributedModel called only inside an @smp.step function, and backward through model.backward(loss), never
loss.backward(); batches divisible into `microbatches`; save_checkpoint/resume_from_checkpoint called with the
documented signatures and objects; optimizer and model state loaded at the first step after a resume (as SMP
defers it until partitioning).

SMP v2: torch.distributed initialized before tsm.init(); tsm.transform() only after init, only on a model not
yet wrapped by FSDP, only for model types SMP v2 supports; grad_norm.clip_grad_norm_ on the FSDP-wrapped model.

What they do NOT prove: that partitioning, pipelining, tensor parallelism, fp16 loss scaling, sharding, NCCL
collectives or the real checkpoint file formats work, or that the real libraries accept every argument value.
Those run only in the containers on GPUs.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class ApiMisuse(AssertionError):
    """The script used the library in a way the real one forbids."""


def _ensure_process_group() -> None:
    """SMP v1 initializes torch.distributed itself (ddp=True); one gloo process stands in for the cluster."""
    if not dist.is_initialized():
        store = Path(tempfile.mkdtemp(prefix="smp-standin-")) / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


# --------------------------------------------------------------------------------------------------------------
# SMP v1
# --------------------------------------------------------------------------------------------------------------


# One process: every rank is 0 and every group has size 1.
TOPOLOGY = (
    "rank",
    "size",
    "local_rank",
    "local_size",
    *(f"{prefix}_{kind}" for prefix in ("dp", "rdp", "tp", "pp", "mp") for kind in ("rank", "size")),
)


class StepOutput:
    """One value per microbatch, as returned from an @smp.step function."""

    def __init__(self, outputs: list[torch.Tensor]) -> None:
        self.outputs = outputs

    def reduce_mean(self) -> torch.Tensor:
        return torch.stack([output.detach() for output in self.outputs]).mean()

    def reduce_sum(self) -> torch.Tensor:
        return torch.stack([output.detach() for output in self.outputs]).sum()

    def concat(self) -> torch.Tensor:
        return torch.cat(self.outputs)


class SmpV1:
    """The state and API of the stand-in; `module()` returns it as `smdistributed.modelparallel.torch`."""

    class CommGroup(enum.Enum):
        WORLD = 0
        MP_GROUP = 1
        DP_GROUP = 2

    class RankType(enum.Enum):
        WORLD_RANK = 0
        MP_RANK = 1
        DP_RANK = 2

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.config: dict[str, Any] | None = None
        self.created_inside: set[int] = set()
        self.creating = False
        self.model: Any = None
        self.optimizer: Any = None
        self.in_step = False
        self.in_backward = False
        self.pending_load: tuple[Path, str] | None = None
        self.steps = 0

    # --- bookkeeping ---
    def record(self, name: str, **details: Any) -> None:
        self.calls.append((name, details))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _require_init(self, what: str) -> None:
        if self.config is None:
            raise ApiMisuse(f"smp.{what} called before smp.init()")

    # --- init and topology (one process) ---
    def init(self, config: dict[str, Any] | None = None) -> None:
        if self.config is not None:
            raise ApiMisuse("smp.init() called twice")
        launcher = json.loads(os.environ.get("SM_HP_MP_PARAMETERS", "{}"))
        # "values set in the launcher override these" (reference script)
        self.config = {**(config or {}), **launcher}
        self.record("init", config=dict(self.config))
        _ensure_process_group()

    def _one(self, what: str) -> Any:
        def value() -> int:
            self._require_init(what)
            return 0 if what.endswith("rank") else 1

        return value

    def __getattr__(self, name: str) -> Any:
        topology = {f"{prefix}_{kind}" for prefix in ("dp", "rdp", "tp", "pp", "mp") for kind in ("rank", "size")} | {
            "rank",
            "size",
            "local_rank",
            "local_size",
        }
        if name in topology:
            return self._one(name)
        raise AttributeError(name)

    def _group(self) -> Any:
        self._require_init("get_*_process_group")
        return dist.group.WORLD

    get_dp_process_group = get_rdp_process_group = get_mp_process_group = get_world_process_group = _group

    def barrier(self) -> None:
        self._require_init("barrier")
        self.record("barrier")

    def broadcast(self, obj: Any, group: Any) -> None:
        self._require_init("broadcast")

    def recv_from(self, rank: int, rank_type: Any) -> Any:
        raise ApiMisuse("recv_from needs a sender; the stand-in runs one process")

    # --- model creation ---
    @contextlib.contextmanager
    def model_creation(self, tensor_parallelism: bool = False, dtype: Any = None, **tensor_parallel_config: Any):
        self._require_init("model_creation")
        self.record("model_creation", tensor_parallelism=tensor_parallelism, dtype=dtype)
        original_init = nn.Module.__init__
        created = self.created_inside

        def tracking_init(module: nn.Module, *args: Any, **kwargs: Any) -> None:
            original_init(module, *args, **kwargs)
            created.add(id(module))

        nn.Module.__init__ = tracking_init  # type: ignore[method-assign]
        self.creating = True
        try:
            yield
        finally:
            nn.Module.__init__ = original_init  # type: ignore[method-assign]
            self.creating = False

    def DistributedModel(self, module: nn.Module, trace_device: str = "gpu", **options: Any) -> DistributedModel:
        self._require_init("DistributedModel")
        if self.model is not None:
            raise ApiMisuse("only one model can be wrapped with smp.DistributedModel")
        if id(module) not in self.created_inside:
            raise ApiMisuse("the model must be created inside smp.model_creation() (or smp.tensor_parallelism())")
        if trace_device not in ("cpu", "gpu"):
            raise ApiMisuse(f"trace_device must be 'cpu' or 'gpu', got {trace_device!r}")
        self.record("DistributedModel", trace_device=trace_device, **options)
        self.model = DistributedModel(self, module)
        return self.model

    def set_activation_checkpointing(self, module: nn.Module, **options: Any) -> None:
        if self.model is None:
            raise ApiMisuse("set_activation_checkpointing must be called after smp.DistributedModel")
        if not any(module is candidate for candidate in self.model.module.modules()):
            raise ApiMisuse("set_activation_checkpointing takes a module of the wrapped model")
        self.record("set_activation_checkpointing", module=type(module).__name__, **options)

    def DistributedOptimizer(
        self,
        optimizer: torch.optim.Optimizer,
        static_loss_scale: Any = 1.0,
        dynamic_loss_scale: bool = False,
        **kw: Any,
    ) -> DistributedOptimizer:
        if self.model is None:
            raise ApiMisuse("smp.DistributedOptimizer must wrap an optimizer created after smp.DistributedModel")
        model_parameters = {id(parameter) for parameter in self.model.parameters()}
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                if id(parameter) not in model_parameters:
                    raise ApiMisuse("the optimizer holds parameters that are not the DistributedModel's")
        self.record(
            "DistributedOptimizer", static_loss_scale=static_loss_scale, dynamic_loss_scale=dynamic_loss_scale, **kw
        )
        self.optimizer = DistributedOptimizer(self, optimizer)
        return self.optimizer

    # --- the step ---
    def step(self, function: Any = None, **options: Any) -> Any:
        if function is None:  # used as @smp.step(...)
            return lambda inner: self.step(inner, **options)

        def run(*args: Any) -> Any:
            if self.model is None:
                raise ApiMisuse("an @smp.step function ran before smp.DistributedModel")
            self._load_pending()
            microbatches = int((self.config or {}).get("microbatches", 1))
            tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
            batch = tensors[0].shape[0]
            if batch % microbatches:
                raise ApiMisuse(f"batch of {batch} does not split into {microbatches} microbatches")
            size = batch // microbatches
            outputs = []
            self.in_step = True
            try:
                for index in range(microbatches):
                    sliced = [
                        arg[index * size : (index + 1) * size] if isinstance(arg, torch.Tensor) else arg for arg in args
                    ]
                    outputs.append(function(*sliced))
            finally:
                self.in_step = False
            self.steps += 1
            self.record("step", function=function.__name__, microbatches=microbatches)
            return StepOutput(outputs)

        run.__name__ = function.__name__
        return run

    # --- checkpoints ---
    def save_checkpoint(
        self,
        path: str,
        tag: str,
        partial: bool = True,
        model: Any = None,
        optimizer: Any = None,
        user_content: Any = None,
        translate_if_full: bool = True,
        num_kept_partial_checkpoints: int | None = None,
    ) -> None:
        self._require_init("save_checkpoint")
        if not isinstance(tag, str):
            raise ApiMisuse(f"checkpoint tag must be a str, got {type(tag).__name__}")
        if model is not None and not isinstance(model, DistributedModel):
            raise ApiMisuse("save_checkpoint takes the smp.DistributedModel as model")
        if optimizer is not None and not isinstance(optimizer, DistributedOptimizer):
            raise ApiMisuse("save_checkpoint takes the smp.DistributedOptimizer as optimizer")
        self.record("save_checkpoint", path=path, tag=tag, partial=partial, translate_if_full=translate_if_full)
        root = Path(path)
        if partial:
            folder = root / f"{tag}_partial"
            folder.mkdir(parents=True, exist_ok=True)
            if model is not None:
                torch.save(model.local_state_dict(), folder / "model_0_0.pt")
            if optimizer is not None:
                torch.save(optimizer.local_state_dict(), folder / "optimizer_0_0.pt")
            if user_content is not None:
                torch.save(user_content, folder / "user_content.pt")
            torch.save(dict(self.config or {}), folder / "smp_config.pt")
            with (root / "newest").open("a") as handle:
                handle.write(f"{tag}_partial\n")
        else:
            if optimizer is not None:
                raise ApiMisuse("full checkpoints do not hold the optimizer")
            root.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), root / tag)
            if user_content is not None:
                torch.save(user_content, root / f"user_content_{tag}")

    def resume_from_checkpoint(
        self,
        path: str,
        tag: str | None = None,
        partial: bool = True,
        strict: bool = True,
        load_optimizer: bool = True,
        load_sharded_optimizer_state: bool = True,
        translate_function: Any = None,
    ) -> Any:
        self._require_init("resume_from_checkpoint")
        root = Path(path)
        if tag is None:
            tag = (root / "newest").read_text().splitlines()[-1][: -len("_partial")]
        folder = root / f"{tag}_partial"
        if not folder.is_dir():
            raise ApiMisuse(f"checkpoint {folder} does not exist")
        self.record("resume_from_checkpoint", path=path, tag=tag, partial=partial)
        self.pending_load = (folder, tag)
        user_content = folder / "user_content.pt"
        return torch.load(user_content, weights_only=False) if user_content.is_file() else None

    def _load_pending(self) -> None:
        """SMP loads resumed state at the first step, after partitioning."""
        if self.pending_load is None:
            return
        folder, _ = self.pending_load
        self.model.module.load_state_dict(_strip(torch.load(folder / "model_0_0.pt")))
        if self.optimizer is not None:
            self.optimizer.optimizer.load_state_dict(torch.load(folder / "optimizer_0_0.pt"))
        self.pending_load = None
        self.record("deferred_load")

    def modules(self) -> dict[str, ModuleType]:
        """The module objects to place in sys.modules."""
        torch_module = ModuleType("smdistributed.modelparallel.torch")
        api = [
            "init", "barrier", "broadcast", "recv_from", "model_creation", "DistributedModel", "DistributedOptimizer",
            "set_activation_checkpointing", "step", "save_checkpoint", "resume_from_checkpoint", "CommGroup",
            "RankType", "get_dp_process_group", "get_rdp_process_group", "get_mp_process_group",
            "get_world_process_group",
        ]  # fmt: skip
        for name in api:
            setattr(torch_module, name, getattr(self, name))
        for name in TOPOLOGY:
            setattr(torch_module, name, self._one(name))
        torch_module.stand_in = self  # type: ignore[attr-defined]
        parent = ModuleType("smdistributed.modelparallel")
        parent.torch = torch_module  # type: ignore[attr-defined]
        parent.__version__ = "1.15.0-stand-in"  # type: ignore[attr-defined]
        root = ModuleType("smdistributed")
        root.modelparallel = parent  # type: ignore[attr-defined]
        return {
            "smdistributed": root,
            "smdistributed.modelparallel": parent,
            "smdistributed.modelparallel.torch": torch_module,
        }


def _strip(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name.removeprefix("module."): tensor for name, tensor in state_dict.items()}


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
        return False

    def local_state_dict(self) -> dict[str, torch.Tensor]:
        return self.state_dict()


class DistributedOptimizer:
    """With mp_parameters fp16, like SMP's FP16 optimizer: fp32 master weights, master-gradient clipping, and a
    skipped step (overflow=True) when a gradient is not finite."""

    def __init__(self, smp: SmpV1, optimizer: torch.optim.Optimizer) -> None:
        self._smp = smp
        self.overflow = False
        self.fp16 = bool((smp.config or {}).get("fp16"))
        self._pairs: list[tuple[nn.Parameter, nn.Parameter]] = []
        if self.fp16:
            groups = []
            for group in optimizer.param_groups:
                masters = []
                for parameter in group["params"]:
                    master = nn.Parameter(parameter.detach().float().clone())
                    self._pairs.append((parameter, master))
                    masters.append(master)
                groups.append({**{key: value for key, value in group.items() if key != "params"}, "params": masters})
            optimizer = type(optimizer)(groups)  # each group carries its own hyperparameters
        self.optimizer = optimizer
        self._master_grads_ready = False

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def _copy_grads_to_masters(self) -> None:
        if self.fp16 and not self._master_grads_ready:
            for parameter, master in self._pairs:
                master.grad = None if parameter.grad is None else parameter.grad.detach().float()
            self._master_grads_ready = True

    def clip_master_grads(self, max_norm: float) -> torch.Tensor:
        if not self.fp16:
            raise ApiMisuse("clip_master_grads exists only on the fp16 optimizer (mp_parameters fp16=true)")
        self._smp.record("clip_master_grads", max_norm=max_norm)
        self._copy_grads_to_masters()
        return torch.nn.utils.clip_grad_norm_([master for _, master in self._pairs], max_norm)

    def step(self) -> None:
        self._smp.record("optimizer.step")
        if not self.fp16:
            self.optimizer.step()
            return
        self._copy_grads_to_masters()
        grads = [master.grad for _, master in self._pairs if master.grad is not None]
        self.overflow = not all(bool(torch.isfinite(grad).all()) for grad in grads)
        if not self.overflow:
            self.optimizer.step()
            with torch.no_grad():
                for parameter, master in self._pairs:
                    parameter.copy_(master.to(parameter.dtype))
        self._master_grads_ready = False

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


# --------------------------------------------------------------------------------------------------------------
# SMP v2
# --------------------------------------------------------------------------------------------------------------

SMP_V2_TRANSFORMABLE = {"gpt_neox", "llama", "mistral", "mixtral"}


class SmpV2:
    """The stand-in for `torch.sagemaker`; `modules()` returns what to place in sys.modules."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.initialized = False
        self._state = ModuleType("torch.sagemaker.state")

    def record(self, name: str, **details: Any) -> None:
        self.calls.append((name, details))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    @property
    def state(self) -> Any:
        if not self.initialized:
            raise ApiMisuse("torch.sagemaker.state read before tsm.init()")
        return self._state

    def init(self, config: Any = None) -> None:
        if not dist.is_initialized():
            raise ApiMisuse("tsm.init() needs torch.distributed initialized first (dist.init_process_group)")
        if self.initialized:
            raise ApiMisuse("tsm.init() called twice")
        parameters = json.loads(os.environ.get("SM_HP_MP_PARAMETERS", "{}"))
        if isinstance(config, dict):
            parameters = {**config, **parameters}
        self._state.tensor_parallel_degree = int(parameters.get("tensor_parallel_degree", 1))
        self._state.hybrid_shard_degree = int(parameters.get("hybrid_shard_degree", 0))
        self._state.sm_activation_offloading = bool(parameters.get("sm_activation_offloading", False))
        self.initialized = True
        self.record("init", parameters=parameters)

    def transform(self, model: nn.Module, **options: Any) -> nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        if not self.initialized:
            raise ApiMisuse("tsm.transform() called before tsm.init()")
        if isinstance(model, FullyShardedDataParallel) or any(
            isinstance(module, FullyShardedDataParallel) for module in model.modules()
        ):
            raise ApiMisuse("tsm.transform() must run before the model is wrapped with FSDP")
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type not in SMP_V2_TRANSFORMABLE:
            raise ApiMisuse(f"SMP v2 cannot transform model type {model_type!r}")
        self.record("transform", model_type=model_type, **options)
        return model

    def clip_grad_norm_(self, model: nn.Module, max_norm: float, **options: Any) -> torch.Tensor:
        from torch.distributed.fsdp import FullyShardedDataParallel

        fsdp = (
            model if isinstance(model, FullyShardedDataParallel) else getattr(model, "_checkpoint_wrapped_module", None)
        )
        if not isinstance(fsdp, FullyShardedDataParallel):
            raise ApiMisuse("torch.sagemaker.grad_norm.clip_grad_norm_ takes the FSDP-wrapped model")
        self.record("clip_grad_norm_", max_norm=max_norm)
        return fsdp.clip_grad_norm_(max_norm)

    def modules(self) -> dict[str, ModuleType]:
        package = ModuleType("torch.sagemaker")
        package.init = self.init  # type: ignore[attr-defined]
        package.transform = self.transform  # type: ignore[attr-defined]
        stand_in = self

        class _Module(ModuleType):
            @property
            def state(self) -> Any:  # tsm.state is only readable after tsm.init()
                return stand_in.state

        package.__class__ = _Module
        grad_norm = ModuleType("torch.sagemaker.grad_norm")
        grad_norm.clip_grad_norm_ = self.clip_grad_norm_  # type: ignore[attr-defined]
        package.grad_norm = grad_norm  # type: ignore[attr-defined]
        package.stand_in = self  # type: ignore[attr-defined]
        return {"torch.sagemaker": package, "torch.sagemaker.grad_norm": grad_norm}
