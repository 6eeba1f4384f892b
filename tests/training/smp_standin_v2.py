"""The SMP v2 stand-in (`torch.sagemaker`); see smp_standins.py for what the stand-ins model and what they do not."""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from smp_standins import ApiMisuse
from torch import nn

SMP_V2_TRANSFORMABLE = {"gpt_neox", "llama", "mistral", "mixtral"}


class SmpV2:
    """The stand-in for `torch.sagemaker`; `modules()` returns what to place in sys.modules."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.initialized = False
        self.materialized = 0  # modules DelayedParamIniter's param_init_fn brought off the meta device
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

    def delayed_param_initer(
        self, model: nn.Module, init_method_using_config: Any = None, verbose: bool = False
    ) -> Any:
        """torch.sagemaker.delayed_param.DelayedParamIniter (AWS "SMP v2 reference"): its param_init_fn runs, per
        module, the given init method or, by default, SMP's own init for the Hugging Face models SMP v2 can
        tensor-parallelize; "for any other models, you need to create a custom parameter initialization function".
        Afterwards each module's own parameters and buffers must have left the meta device (what
        validate_params_and_buffers_inited asserts)."""
        if not self.initialized:
            raise ApiMisuse("DelayedParamIniter created before tsm.init()")
        stand_in = self
        parameters = list(model.parameters())
        self.record(
            "DelayedParamIniter",
            rank=dist.get_rank(),
            meta_parameters=sum(parameter.is_meta for parameter in parameters),
            parameters=len(parameters),
        )
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        plain_hf = type(model).__module__.startswith("transformers.") and model_type in SMP_V2_TRANSFORMABLE
        if init_method_using_config is None and not plain_hf:
            raise ApiMisuse(
                f"DelayedParamIniter has no default init for {type(model).__name__} ({model_type}): pass "
                "init_method_using_config"
            )

        class DelayedParamIniter:
            def get_param_init_fn(self) -> Any:
                def param_init_fn(module: nn.Module) -> None:
                    init_method_using_config(module)
                    left = [
                        name
                        for name, tensor in [
                            *module.named_parameters(recurse=False),
                            *module.named_buffers(recurse=False),
                        ]
                        if tensor.is_meta
                    ]
                    if left:
                        raise ApiMisuse(f"{type(module).__name__}: {', '.join(left)} still on the meta device")
                    stand_in.materialized += 1

                return param_init_fn

        return DelayedParamIniter()

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
        delayed_param = ModuleType("torch.sagemaker.delayed_param")
        delayed_param.DelayedParamIniter = self.delayed_param_initer  # type: ignore[attr-defined]
        package.delayed_param = delayed_param  # type: ignore[attr-defined]
        package.stand_in = self  # type: ignore[attr-defined]
        return {
            "torch.sagemaker": package,
            "torch.sagemaker.grad_norm": grad_norm,
            "torch.sagemaker.delayed_param": delayed_param,
        }
