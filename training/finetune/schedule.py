"""Learning rate as a pure function of the optimizer step: linear warmup, then constant, linear or cosine decay.

Stateless on purpose: a checkpoint stores the step count and the schedule resumes exactly from it.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class LearningRateSchedule:
    peak_lr: float
    min_lr: float
    warmup_steps: int
    decay_steps: int
    style: str  # constant | linear | cosine

    @classmethod
    def create(
        cls, *, peak_lr: float, min_lr: float, warmup_fraction: float, decay_steps: int, style: str
    ) -> LearningRateSchedule:
        # Same meaning as the reference's `warmup`: a fraction of the decay iterations.
        return cls(peak_lr, min_lr, int(warmup_fraction * decay_steps), decay_steps, style)

    def at(self, step: int) -> float:
        """The learning rate for optimizer step `step` (0-based)."""
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        if self.style == "constant":
            return self.peak_lr
        span = max(1, self.decay_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        factor = 1.0 - progress if self.style == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr + (self.peak_lr - self.min_lr) * factor
