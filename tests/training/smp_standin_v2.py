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
