"""SageMaker model parallelism v2 (`torch.sagemaker`): PyTorch FSDP with SMP's hybrid sharding and activation
offloading, for the current SMP containers (`smdistributed-modelparallel:<torch>-gpu-py3xx`, torch 2.x).

Thin on purpose, following the AWS SMP v2 examples (`shared-scripts/train_lib.py`):

    dist.init_process_group -> tsm.init() (config from the estimator's mp_parameters)
    -> build the HF model in fp32 -> tsm.transform(model) only for tensor parallelism (models SMP v2 supports;
    GPT-J is not one, which layout.check_model_for_layout rejects) -> FSDP(auto_wrap by transformer layer,
    sharding_strategy HYBRID_SHARD when hybrid_shard_degree >= 2, bf16 MixedPrecision) -> activation checkpointing
    -> offload_wrapper when sm_activation_offloading -> AdamW -> torch.sagemaker.grad_norm.clip_grad_norm_.

Checkpoints use FSDP full state dicts gathered to rank 0 (CPU-offloaded), which every rank reads back on resume.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import ConfigurationError
from ..layout import SMP_V2_MODULE
from ..modeling import find_transformer_layers
from .base import ModelBuilder, OptimizerFactory, TrainingBackend


class SmpV2Backend(TrainingBackend):
    name = "smp_v2"

    def setup(self) -> None:
        try:
            self.tsm = importlib.import_module(SMP_V2_MODULE)
        except ImportError as error:
            raise ConfigurationError(
                f"--backend smp_v2 needs {SMP_V2_MODULE} ({error}); it ships in the SMP v2 containers "
                "(smdistributed-modelparallel images). Use --backend torch elsewhere"
            ) from None
        cuda = torch.cuda.is_available()
        env = self.environ
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo")
        self.tsm.init()
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.local_world_size = int(env.get("LOCAL_WORLD_SIZE", str(self.world_size)))
        # Tensor-parallel peers read the same data (reference: dp_rank = rank // tp).
        tp = int(self.tsm.state.tensor_parallel_degree)
        self.data_rank, self.data_size = self.rank // tp, self.world_size // tp

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def create_model(self, build: ModelBuilder) -> nn.Module:
        # FSDP mixed precision casts on the fly; the parameters must stay fp32.
        return build(None)

    def prepare(self, model: nn.Module, make_optimizer: OptimizerFactory) -> tuple[Any, Any]:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
            offload_wrapper,
        )
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy

        num_layers = int(model.config.num_hidden_layers)
        self._hf_model = model
        if int(self.tsm.state.tensor_parallel_degree) > 1:
            model = self.tsm.transform(model)
            self._hf_model = model
        layer_class = type(next(iter(find_transformer_layers(model, num_layers).children())))
        mixed_precision = None
        if self.dtype is not None:
            mixed_precision = MixedPrecision(
                param_dtype=self.dtype, reduce_dtype=self.dtype, **self._mixed_precision_options()
            )
        fsdp = FullyShardedDataParallel(
            model,
            auto_wrap_policy=self._wrap_policy(model, layer_class),
            mixed_precision=mixed_precision,
            sharding_strategy=self._sharding_strategy(ShardingStrategy),
            use_orig_params=True,  # per-parameter weight-decay groups over the original parameter names
            device_id=self.device,  # this rank's GPU (a CPU device only where there is none, as in tests)
            **self._fsdp_options(),
        )
        self._fsdp = fsdp
        if self.hp.activation_checkpointing:
            apply_activation_checkpointing(
                fsdp,
                checkpoint_wrapper_fn=functools.partial(
                    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT
                ),
                check_fn=lambda module: isinstance(module, layer_class),
            )
        wrapped: nn.Module = fsdp
        if self.layout.activation_offloading:
            wrapped = offload_wrapper(fsdp)
        return wrapped, make_optimizer(fsdp)

    # --- what a subclass changes in the FSDP wrap (backends/lora_fsdp.py) ---
    def _wrap_policy(self, model: nn.Module, layer_class: type) -> Any:
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        return functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer_class})

    def _sharding_strategy(self, strategies: Any) -> Any:
        # SMP replaces HYBRID_SHARD's node-sized shard group with hybrid_shard_degree GPUs.
        return strategies.HYBRID_SHARD if self.layout.hybrid_shard_degree >= 2 else strategies.FULL_SHARD

    def _mixed_precision_options(self) -> dict[str, Any]:
        return {"buffer_dtype": self.dtype}

    def _fsdp_options(self) -> dict[str, Any]:
        return {}

    def hf_module(self, model: Any) -> nn.Module:
        return self._hf_model

    def train_micro_step(self, model: Any, input_ids: torch.Tensor, last_micro_step: bool) -> torch.Tensor:
        loss = model(**self._inputs(input_ids))["loss"]
        (loss / self.hp.gradient_accumulation).backward()
        return loss.detach().float()

    def optimizer_step(self, model: Any, optimizer: Any) -> tuple[float | None, bool]:
        clip_grad_norm_ = importlib.import_module(f"{SMP_V2_MODULE}.grad_norm").clip_grad_norm_
        max_norm = self.hp.grad_clip if self.hp.grad_clip > 0 else float("inf")
        norm = float(clip_grad_norm_(model, max_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm, True

    def eval_mean_loss(self, model: Any, input_ids: torch.Tensor) -> torch.Tensor:
        return model(**self._inputs(input_ids))["loss"].float()

    # Over the whole world: tensor-parallel peers contribute identical values, which cancel out in the means.
    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(tensor)
        return tensor

    def reduce_group_size(self) -> int:
        return self.world_size

    def barrier(self) -> None:
        dist.barrier()

    def broadcast_object(self, value: Any) -> Any:
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def _full_state_context(self, rank0_only: bool, offload_to_cpu: bool = True) -> Any:
        from torch.distributed.fsdp import (
            FullOptimStateDictConfig,
            FullStateDictConfig,
            FullyShardedDataParallel,
            StateDictType,
        )

        return FullyShardedDataParallel.state_dict_type(
            self._fsdp,
            StateDictType.FULL_STATE_DICT,
            FullStateDictConfig(offload_to_cpu=offload_to_cpu, rank0_only=rank0_only),
            FullOptimStateDictConfig(offload_to_cpu=offload_to_cpu, rank0_only=rank0_only),
        )

    def save_state(self, directory: Path, model: Any, optimizer: Any, trainer_state: dict[str, Any]) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel

        with self._full_state_context(rank0_only=True):
            model_state = self._fsdp.state_dict()
            optimizer_state = FullyShardedDataParallel.optim_state_dict(self._fsdp, optimizer)
        if self.is_main:
            torch.save(model_state, directory / "model.pt")
            torch.save(optimizer_state, directory / "optimizer.pt")

    def load_state(self, directory: Path, model: Any, optimizer: Any) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel

        with self._full_state_context(rank0_only=False):
            self._fsdp.load_state_dict(torch.load(directory / "model.pt", map_location="cpu"))
            saved = torch.load(directory / "optimizer.pt", map_location="cpu")
            # Keyword arguments: the positional order changed between torch 2.0 and 2.1.
            optimizer.load_state_dict(
                FullyShardedDataParallel.optim_state_dict_to_load(
                    model=self._fsdp, optim=optimizer, optim_state_dict=saved
                )
            )

    def full_state_dict(self, model: Any, scratch_dir: Path) -> dict[str, torch.Tensor] | None:
        with self._full_state_context(rank0_only=True):
            state = self._fsdp.state_dict()
        return state if self.is_main else None
