"""The GPU memory rule a run's batch must satisfy, checked before anything is read or loaded.

The memory a training step needs per GPU grows linearly with the batch: the weights, gradients, optimizer state and
runtime do not depend on it, the activations and logits grow by the same amount per sequence (core/sizing.py and
core/config/lora_training.py, which estimate both at synth). train.py cannot import that code (it runs in the training
images, without the CDK app), so synth passes the job the three figures of its stage as hyperparameters
(--memory_fixed_gib, --memory_per_sequence_gib, --memory_usable_gib), and this module applies them to the batch the
run actually asks for: TrainBatchSize is a pipeline parameter, and a run may raise it past what the stage was sized
for. Without the figures (a local run) nothing is checked.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .errors import ConfigurationError

if TYPE_CHECKING:  # hyperparameters.py imports this module
    from .hyperparameters import Hyperparameters

MEMORY_FLAGS = ("memory_fixed_gib", "memory_per_sequence_gib", "memory_usable_gib")


def needed_gib(fixed_gib: float, per_sequence_gib: float, batch: int) -> float:
    return fixed_gib + per_sequence_gib * batch


def largest_fitting_batch(fixed_gib: float, per_sequence_gib: float, usable_gib: float, *, microbatches: int) -> int:
    """The largest batch, in whole groups of `microbatches` (SMP v1 splits each batch evenly), that fits; 0 if none."""
    sequences = math.floor((usable_gib - fixed_gib) / per_sequence_gib) if usable_gib >= fixed_gib else 0
    return sequences - sequences % microbatches


def memory_problem(hp: Hyperparameters, microbatches: int) -> str | None:
    """Why --train_batch_size does not fit the figures synth passed, or None (also when none were passed)."""
    fixed, per_sequence, usable = (getattr(hp, name) for name in MEMORY_FLAGS)
    if fixed is None:
        return None
    batch = hp.train_batch_size
    needed = needed_gib(fixed, per_sequence, batch)
    if needed <= usable:
        return None
    largest = largest_fitting_batch(fixed, per_sequence, usable, microbatches=microbatches)
    fix = (
        f"The largest batch that fits is {largest}: run with TrainBatchSize {largest} or less, and raise "
        "training.gradient_accumulation in the config for the same global batch"
        if largest
        else "No batch fits: lower training.sequence_length, or use more or larger GPUs, in the config"
    )
    return (
        f"--train_batch_size {batch} does not fit the GPUs this stage was sized for: estimated {fixed:.1f} + {batch} x "
        f"{per_sequence:.1f} = {needed:.1f} GiB per GPU of {usable:.1f} GiB usable (--memory_fixed_gib, "
        f"--memory_per_sequence_gib, --memory_usable_gib: synth's estimate for this stage). {fix}"
    )


def check_memory_flags(hp: Hyperparameters) -> None:
    """The three figures come together (synth passes all of them) or not at all (a local run)."""
    given = [name for name in MEMORY_FLAGS if getattr(hp, name) is not None]
    if given and len(given) != len(MEMORY_FLAGS):
        missing = ", ".join(f"--{name}" for name in MEMORY_FLAGS if name not in given)
        raise ConfigurationError(
            f"{missing} is missing: synth passes all three of {', '.join('--' + n for n in MEMORY_FLAGS)} (the "
            "stage's memory estimate), or none for a run that checks no memory; pass the missing ones or remove "
            f"{', '.join('--' + n for n in given)}"
        )
    for name in given:
        value = getattr(hp, name)
        if not value >= 0 or (name == "memory_per_sequence_gib" and value == 0):
            raise ConfigurationError(f"--{name} must be a positive number of GiB, got {value}")


def check_memory(hp: Hyperparameters, microbatches: int) -> None:
    problem = memory_problem(hp, microbatches)
    if problem:
        raise ConfigurationError(problem)
