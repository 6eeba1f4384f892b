"""Samples of repeated measurements, and ratios of measurements taken side by side.

Machines are noisy, so every figure is the median of several runs, reported with its run count and its spread
(the lowest and highest run). A ratio compares two things measured in alternation (A B A B ...): each pair gives
one ratio, and the figure is the median of those ratios, so slow drifts of the machine cancel within a pair.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """Repeated measurements of one quantity."""

    values: tuple[float, ...]
    unit: str = "s"

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"a sample needs at least one measurement (unit {self.unit!r}); got none")

    @classmethod
    def of(cls, values: Sequence[float], unit: str = "s") -> Sample:
        return cls(tuple(float(value) for value in values), unit)

    @property
    def runs(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def spread_percent(self) -> float:
        """(highest - lowest) / median, in percent: how much the runs disagree."""
        return 100.0 * (self.high - self.low) / self.median if self.median else 0.0

    def describe(self, digits: int = 2) -> str:
        """`24.31 s (3 runs, 23.90-24.80, spread 3.7%)`"""
        unit = f" {self.unit}" if self.unit else ""
        if self.runs == 1:
            return f"{self.median:.{digits}f}{unit} (1 run)"
        return (
            f"{self.median:.{digits}f}{unit} ({self.runs} runs, {self.low:.{digits}f}-{self.high:.{digits}f}, "
            f"spread {self.spread_percent:.1f}%)"
        )


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> Sample:
    """One ratio per side-by-side pair: numerators[i] / denominators[i]."""
    if len(numerators) != len(denominators):
        raise ValueError(
            f"paired ratios need as many numerators as denominators; got {len(numerators)} and {len(denominators)}"
        )
    if any(value <= 0 for value in denominators):
        raise ValueError(f"every denominator must be positive to form a ratio; got {list(denominators)}")
    return Sample.of([a / b for a, b in zip(numerators, denominators, strict=True)], unit="x")


def verdict(value: float, target: float, *, higher_is_worse: bool = True) -> str:
    """`meets` or `misses` a target (an upper bound unless higher_is_worse is False)."""
    ok = value <= target if higher_is_worse else value >= target
    return "meets" if ok else "misses"
