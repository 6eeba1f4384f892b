"""Parallelism backends behind one interface (base.TrainingBackend). Each module imports its library lazily,
so choosing one never requires the others to be installed."""

from __future__ import annotations

from collections.abc import Mapping

from ..hyperparameters import Hyperparameters
from ..layout import ParallelLayout
from .base import TrainingBackend


def create_backend(
    name: str, hp: Hyperparameters, layout: ParallelLayout, precision: str, environ: Mapping[str, str]
) -> TrainingBackend:
    if hp.method != "full" and name == "smp_v2":
        from .lora_fsdp import LoraFsdpBackend

        return LoraFsdpBackend(hp, layout, precision, environ)
    if hp.method != "full":
        from .lora import LoraBackend

        return LoraBackend(hp, layout, precision, environ)
    if name == "smp_v1":
        from .smp_v1 import SmpV1Backend

        return SmpV1Backend(hp, layout, precision, environ)
    if name == "smp_v2":
        from .smp_v2 import SmpV2Backend

        return SmpV2Backend(hp, layout, precision, environ)
    from .torch_backend import TorchBackend

    return TorchBackend(hp, layout, precision, environ)
