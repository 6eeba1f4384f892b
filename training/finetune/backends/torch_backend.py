"""Plain PyTorch: one process, or DistributedDataParallel under torchrun (NCCL on GPUs, gloo on CPUs)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import ConfigurationError
from ..modeling import enable_hf_gradient_checkpointing
from .base import ModelBuilder, OptimizerFactory, TrainingBackend


def _grad_scaler() -> Any:
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()  # torch < 2.3


class TorchBackend(TrainingBackend):
    name = "torch"

    def setup(self) -> None:
        env = self.environ
        self.world_size = int(env.get("WORLD_SIZE", "1"))
        self.rank = int(env.get("RANK", "0"))
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.local_world_size = int(env.get("LOCAL_WORLD_SIZE", str(self.world_size)))
        self.data_rank, self.data_size = self.rank, self.world_size
        cuda = torch.cuda.is_available()
        if self.precision == "fp16" and not cuda:
            raise ConfigurationError("--fp16 needs a GPU (fp16 loss scaling is CUDA-only); use --bf16 or fp32 on CPU")
        if cuda:
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        if self.world_size > 1:
            # torchrun provides MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (the env:// rendezvous).
            dist.init_process_group(backend="nccl" if cuda else "gloo")
        self._scaler = _grad_scaler() if self.precision == "fp16" else None

    def shutdown(self) -> None:
        if self.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def create_model(self, build: ModelBuilder) -> nn.Module:
        # Master weights stay fp32; mixed precision comes from autocast in the step.
        return build(None).to(self.device)

    def prepare(self, model: nn.Module, make_optimizer: OptimizerFactory) -> tuple[Any, Any]:
        if self.hp.activation_checkpointing:
            enable_hf_gradient_checkpointing(model)
        optimizer = make_optimizer(model)
        if self.distributed:
            device_ids = [self.local_rank] if self.device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        return model, optimizer

    def hf_module(self, model: Any) -> nn.Module:
        return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model

    def _autocast(self) -> Any:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def train_micro_step(self, model: Any, input_ids: torch.Tensor, last_micro_step: bool) -> torch.Tensor:
        # Gradients are all-reduced only on the last micro-step of an accumulation window.
        sync = contextlib.nullcontext() if last_micro_step or not self.distributed else model.no_sync()
        with sync:
            with self._autocast():
                loss = model(**self._inputs(input_ids))["loss"]
            scaled = loss / self.hp.gradient_accumulation
            if self._scaler is not None:
                self._scaler.scale(scaled).backward()
            else:
                scaled.backward()
        return loss.detach().float()

    def optimizer_step(self, model: Any, optimizer: Any) -> tuple[float | None, bool]:
        stepped = True
        if self._scaler is not None:
            self._scaler.unscale_(optimizer)
        parameters = [parameter for parameter in model.parameters() if parameter.grad is not None]
        max_norm = self.hp.grad_clip if self.hp.grad_clip > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(parameters, max_norm))
        if self._scaler is not None:
            scale = self._scaler.get_scale()
            self._scaler.step(optimizer)
            self._scaler.update()
            stepped = self._scaler.get_scale() >= scale  # the scale drops exactly when the step was skipped
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm, stepped

    def eval_mean_loss(self, model: Any, input_ids: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            return model(**self._inputs(input_ids))["loss"].float()

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor

    def reduce_group_size(self) -> int:
        return self.world_size

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def broadcast_object(self, value: Any) -> Any:
        if not self.distributed:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def save_state(self, directory: Path, model: Any, optimizer: Any, trainer_state: dict[str, Any]) -> None:
        # DDP replicas are identical: the main process writes the one copy.
        if self.is_main:
            torch.save(self.hf_module(model).state_dict(), directory / "model.pt")
            torch.save(optimizer.state_dict(), directory / "optimizer.pt")
            if self._scaler is not None:
                torch.save(self._scaler.state_dict(), directory / "grad_scaler.pt")

    def load_state(self, directory: Path, model: Any, optimizer: Any) -> None:
        self.hf_module(model).load_state_dict(torch.load(directory / "model.pt", map_location="cpu"))
        optimizer.load_state_dict(torch.load(directory / "optimizer.pt", map_location="cpu"))
        if self._scaler is not None and (directory / "grad_scaler.pt").is_file():
            self._scaler.load_state_dict(torch.load(directory / "grad_scaler.pt", map_location="cpu"))

    def full_state_dict(self, model: Any, scratch_dir: Path) -> dict[str, torch.Tensor] | None:
        return self.hf_module(model).state_dict() if self.is_main else None
