"""What a parallelism backend provides to the shared training loop: setup, the step, and save/load.

Everything else (data order, schedule, evaluation, logging, checkpoint policy) lives in loop.py and is the same for
every backend. A backend knows its process topology: `rank`/`world_size` over all processes, `local_rank` within a
node, and `data_rank`/`data_size` over the replicas that read different data (tensor- and pipeline-parallel peers
read the same data).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from ..hyperparameters import Hyperparameters
from ..layout import ParallelLayout

PRECISION_DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}

# build(dtype, load_weights=True) -> HF model (without the pretrained weights when load_weights is False);
# make_optimizer(module) -> optimizer over that module's parameters; read_weights() -> the pretrained HF state dict
ModelBuilder = Callable[..., nn.Module]
OptimizerFactory = Callable[[nn.Module], torch.optim.Optimizer]
WeightsReader = Callable[[], dict[str, torch.Tensor]]


class TrainingBackend:
    name = "base"
    # SMP's step splits every batch into microbatches, so it cannot take a short last batch.
    requires_full_batches = False

    def __init__(self, hp: Hyperparameters, layout: ParallelLayout, precision: str, environ: Mapping[str, str]) -> None:
        self.hp = hp
        self.layout = layout
        self.precision = precision
        self.environ = environ
        self.rank = 0
        self.world_size = 1
        self.local_rank = 0
        self.local_world_size = 1
        self.data_rank = 0
        self.data_size = 1
        self.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0

    @property
    def node_rank(self) -> int:
        return self.rank // max(1, self.local_world_size)

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def dtype(self) -> torch.dtype | None:
        return PRECISION_DTYPES[self.precision]

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "world_size": self.world_size,
            "data_parallel_size": self.data_size,
            "nodes": self.num_nodes,
            "precision": self.precision,
            "device": str(self.device),
        }

    # --- lifecycle ---
    def setup(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release process groups; the default has none."""

    # --- model ---
    def create_model(self, build: ModelBuilder) -> nn.Module:
        raise NotImplementedError

    def prepare(self, model: nn.Module, make_optimizer: OptimizerFactory) -> tuple[Any, Any]:
        """Wrap the model for this backend, enable activation checkpointing, create the optimizer."""
        raise NotImplementedError

    def load_pretrained(self, model: Any, read_weights: WeightsReader) -> None:
        """Put the pretrained weights into a prepared model that is not resuming from a checkpoint. The default does
        nothing: the builder loaded them. A backend that replaces the HF model when wrapping loads them here."""

    def hf_module(self, model: Any) -> nn.Module | None:
        """The HF model inside the wrappers, whose save_pretrained writes the final model; None when the final model
        is written from the config and full_state_dict alone (the wrapped module is not an HF model, or its
        save_pretrained must not be used)."""
        raise NotImplementedError

    # --- steps ---
    def train_micro_step(self, model: Any, input_ids: torch.Tensor, last_micro_step: bool) -> torch.Tensor:
        """Forward and backward of one micro-batch (loss scaled by 1/gradient_accumulation); returns the mean loss."""
        raise NotImplementedError

    def optimizer_step(self, model: Any, optimizer: Any) -> tuple[float | None, bool]:
        """Clip, step, zero the gradients. Returns (gradient norm before clipping if known, whether it stepped:
        False when fp16 loss scaling found an overflow and skipped the update)."""
        raise NotImplementedError

    def eval_mean_loss(self, model: Any, input_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # --- collectives over the data-parallel replicas (or the whole world where duplicates cancel out) ---
    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def reduce_group_size(self) -> int:
        """How many processes contribute to all_reduce_sum (to turn sums of per-process means into means)."""
        return 1

    def barrier(self) -> None:
        """Wait for every process; a no-op for one process."""

    def synchronize(self) -> None:
        """Wait for this process's queued GPU work, so that a wall-clock interval covers the work issued in it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's value on every rank."""
        return value

    # --- checkpoints ---
    def save_state(self, directory: Path, model: Any, optimizer: Any, trainer_state: dict[str, Any]) -> None:
        """Write model and optimizer state into `directory` (called on every rank)."""
        raise NotImplementedError

    def load_state(self, directory: Path, model: Any, optimizer: Any) -> None:
        raise NotImplementedError

    def full_state_dict(self, model: Any, scratch_dir: Path) -> dict[str, torch.Tensor] | None:
        """The complete, gathered model state dict under Hugging Face names on the main rank (None elsewhere);
        called on every rank."""
        raise NotImplementedError

    # --- helpers for subclasses ---
    def _inputs(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        input_ids = input_ids.to(self.device)
        # Packed blocks have no padding; the mask is explicit because SMP's distributed transformer expects one.
        return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": input_ids}
