"""Where an endpoint's inference-component copies go: what one copy reserves, and how many instances hold them, as
SageMaker places them (first fit). Read by the config's checks, the API-limit rules, the stacks and the plan."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core import sizing

if TYPE_CHECKING:
    from core.config.serving import ServingConfig


@dataclass(frozen=True)
class Copy:
    """What one copy of a component reserves on an instance."""

    component: str
    gpus: int  # NumberOfAcceleratorDevicesRequired: the copy's tensor parallel degree
    memory_mb: int  # MinMemoryRequiredInMb: host memory its ranks hold while loading (core/sizing.py)


def copy_of(name: str, serving: ServingConfig) -> Copy:
    """The reservation of one copy, from the component's effective serving config."""

    tp = serving.tensor_parallel_degree
    return Copy(name, tp, sizing.copy_memory_mb(serving.host_fit(), tp))


def instances_needed(copies: list[Copy], gpus: int, memory_mb: int) -> int | None:
    """Instances that hold `copies` (first fit, largest first, by GPUs then memory), or None when one copy alone does
    not fit an instance. Every copy's GPU count divides the instance's (serving.py), so by GPUs first fit is exact;
    memory makes it an estimate that can only overstate."""
    free: list[list[int]] = []
    for copy in sorted(copies, key=lambda c: (c.gpus, c.memory_mb), reverse=True):
        if copy.gpus > gpus or copy.memory_mb > memory_mb:
            return None
        for instance in free:
            if instance[0] >= copy.gpus and instance[1] >= copy.memory_mb:
                instance[0] -= copy.gpus
                instance[1] -= copy.memory_mb
                break
        else:
            free.append([gpus - copy.gpus, memory_mb - copy.memory_mb])
    return len(free)


def usable_memory_mb(serving: ServingConfig) -> int:
    """Host memory of one instance that components may reserve: sizing's usable fraction of its RAM."""

    return math.floor(serving.catalog_instance.host_memory_gib * sizing.USABLE_HOST_FRACTION * 1024)


def initial_instances(serving: ServingConfig) -> int:
    """The variant's InitialInstanceCount with components: enough to hold every component's initial copies, at least
    min_instances and one (SageMaker starts the endpoint with instances and places the copies on them)."""
    servings = serving.component_servings()
    copies = [copy_of(c.name, servings[c.name]) for c in serving.components for _ in range(c.initial_copies)]
    gpus, memory = serving.catalog_instance.gpu_count, usable_memory_mb(serving)
    return max(instances_needed(copies, gpus, memory) or 1, serving.autoscaling.min_instances, 1)


def concurrency_target(serving: ServingConfig, component: ServingConfig | None = None) -> float:
    """Concurrent requests per model container (classic) or per copy (a component's effective config) that scaling
    tracks: the config's, else what the engine runs at once, max_batch_size per model copy (a classic container runs
    every copy of its instance)."""
    explicit = serving.autoscaling.concurrent_requests_per_copy
    if explicit is not None:
        return explicit
    if component is not None:
        return component.max_batch_size
    return serving.max_batch_size * serving.fit().copies_per_instance
