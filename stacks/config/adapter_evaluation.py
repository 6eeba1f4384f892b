"""Whether the Evaluate step of an adapter method holds the base model, on the GPUs of `evaluate_instance_type`.

evaluate.py applies the adapter to its base in the Evaluate processing job (training/finetune/placement.py):
- whole on one GPU, when it fits there (the base in bf16 as staged; a QLoRA adapter's base 4-bit, as it was trained);
- else, for method lora on an instance with several GPUs, spread over all of them with accelerate's big-model
  inference (transformers' device_map="auto": its balanced budgets, then infer_auto_device_map), which keeps each
  transformer layer whole on one GPU and, on the first GPU, room for the largest part of the model (the token
  embedding or a layer). A 4-bit QLoRA base is not spread: bitsandbytes places it on the GPU it quantizes on.
Processing jobs cannot run on p4d, p4de or p5.48xlarge (CreateProcessingJob's instance types), so a 70B-class base in
bf16 fits only spread over a multi-GPU g5, g6 or g6e.

Per GPU, capacity = USABLE_FRACTION x GPU memory - RUNTIME_OVERHEAD_GIB (evaluate.py keeps the same reserve of each
GPU's free memory). Spread over N GPUs, accelerate (the job's accelerate 1.15, which transformers 4.46 also calls)
first balances the budgets: every GPU but the last may hold at most weights / N + 1.25 x one layer
(get_balanced_memory), then fills the GPUs in order (infer_auto_device_map), keeping room for the largest part free on
the first; a GPU may leave unused up to the room of the part that did not fit it: a layer, or at two GPUs at most
the token embedding (first in order) or the LM head (last). So the spread fits when
    base weights + largest part + min(N - 1, 2) x largest part + max(N - 3, 0) x layer
        <= (N - 1) x min(capacity, weights / N + 1.25 x layer) + capacity
a bound a test checks against accelerate's own placement at the smallest capacity it accepts.
Host memory while loading: whole, from_pretrained reads the base into host memory first; spread, each weight goes
from its checkpoint shard to its GPU, one shard at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stacks import sizing
from stacks.catalog.instances import INSTANCE_TYPES, InstanceType

# accelerate's get_balanced_memory adds to each GPU's even share 1.25 x the larger of a no-split layer and the mean
# size of the final modules (the projections, norms and embeddings: smaller than a layer in these models).
BALANCE_BUFFER_LAYERS = 1.25
SHARD_GIB = 5e9 / 2**30  # transformers' save_pretrained max_shard_size default, "5GB": the staged checkpoint's files


def spread_need(weights: float, layer: float, largest: float, gpus: int) -> float:
    """The weights, with the room the GPUs may leave unused: the first keeps room for the largest part free, and a
    GPU the next part does not fit leaves up to that part's room: a layer, except where that part is the token
    embedding (only ever the first GPU's next part) or the LM head (one GPU's at most)."""
    boundaries = gpus - 1
    return weights + largest + min(boundaries, 2) * largest + max(boundaries - 2, 0) * layer


def spread_room(weights: float, layer: float, gpus: int, capacity: float) -> float:
    """What accelerate's balanced budgets let `gpus` GPUs of `capacity` each hold in all (any unit)."""
    balanced = min(capacity, weights / gpus + BALANCE_BUFFER_LAYERS * layer)
    return (gpus - 1) * balanced + capacity


@dataclass(frozen=True)
class EvaluateFit:
    instance: InstanceType
    weights_gib: float  # the base as evaluate.py loads it
    layer_gib: float  # one transformer layer
    largest_gib: float  # the largest part accelerate places whole: a layer, the token embedding or the LM head
    spreads: bool  # whether evaluate.py spreads this base over GPUs (bf16, not QLoRA's 4-bit)

    @property
    def capacity_gib(self) -> float:
        """What one GPU may hold of the model."""
        return self.instance.gpu.memory_gib * sizing.USABLE_FRACTION - sizing.RUNTIME_OVERHEAD_GIB

    @property
    def whole(self) -> bool:
        return self.weights_gib <= self.capacity_gib

    @property
    def spread_gib(self) -> float:
        return spread_need(self.weights_gib, self.layer_gib, self.largest_gib, self.instance.gpu_count)

    @property
    def spread_capacity_gib(self) -> float:
        return spread_room(self.weights_gib, self.layer_gib, self.instance.gpu_count, self.capacity_gib)

    @property
    def spread(self) -> bool:
        """Spread over every GPU (only where it does not fit one)."""
        return (
            not self.whole
            and self.spreads
            and self.instance.gpu_count > 1
            and self.spread_gib <= self.spread_capacity_gib
        )

    @property
    def fits(self) -> bool:
        return self.whole or self.spread

    @property
    def host_gib(self) -> float:
        """Host memory while the base loads."""
        return (SHARD_GIB if self.spread else self.weights_gib) + sizing.HOST_OVERHEAD_GIB

    def describe(self) -> str:
        gpu = self.instance.gpu
        one = (
            f"about {self.weights_gib + sizing.RUNTIME_OVERHEAD_GIB:.1f} GiB with the runtime, more than the "
            f"{gpu.memory_gib * sizing.USABLE_FRACTION:.1f} GiB usable of one {gpu.model} {gpu.memory_gib} GB"
        )
        if not self.spreads or self.instance.gpu_count == 1:
            return f"{one} of {self.instance.name}"
        return (
            f"{one}, and spread over the {self.instance.gpu_count} GPUs of {self.instance.name} (each layer whole on "
            f"one GPU, with room for the largest part, {self.largest_gib:.1f} GiB, on the first) it needs "
            f"{self.spread_gib:.1f} GiB of the {self.spread_capacity_gib:.1f} GiB accelerate's balanced budgets give"
        )


def evaluate_fit(training: Any, instance: InstanceType | None = None, method: str | None = None) -> EvaluateFit:
    """How the Evaluate step holds the stage's base, on `instance` (default: evaluate_instance_type), for the
    stage's training.method or `method`."""
    from stacks.config.adapters import base_weights_gib, embedding_parameters

    method = method or training.method
    model = training.catalog_model
    instance = instance or INSTANCE_TYPES[training.evaluate_instance_type]
    per_parameter = sizing.BYTES_PER_PARAMETER["bf16"] / sizing.GIB
    embedding = model.vocab_size * model.hidden_size * per_parameter
    layer = (model.parameters - embedding_parameters(model)) / model.layers * per_parameter
    return EvaluateFit(
        instance,
        base_weights_gib(model, method, "bf16"),
        layer,
        max(layer, embedding),
        method == "lora",
    )


def fitting_instances(training: Any, method: str | None = None) -> list[InstanceType]:
    """The instance types the Evaluate step would hold the base on (for training.method or `method`), cheapest first:
    offered by CreateProcessingJob, with a processing image the SDK knows, and the host memory to load it."""
    from stacks import api_limits
    from stacks.catalog import aws_limits, images

    offered = aws_limits.constraint("sagemaker:CreateProcessingJob:ProcessingResources.ClusterConfig.InstanceType")
    fitting = []
    for instance in INSTANCE_TYPES.values():
        fit = evaluate_fit(training, instance, method)
        if (
            fit.fits
            and fit.host_gib <= instance.host_memory_gib * sizing.USABLE_HOST_FRACTION
            and api_limits.violation(offered, instance.name) is None
            and images.processing_instance_problem(instance.name) is None
        ):
            fitting.append(instance)
    return sorted(fitting, key=lambda instance: instance.hourly_usd)


def check(training: Any) -> None:
    """ValueError, naming evaluate_instance_type, the sizes and the types that would do, when the base does not fit."""
    from stacks.config.adapters import base_weights_gib

    fit = evaluate_fit(training)
    if fit.fits:
        return
    holds = "on one GPU (a 4-bit base is not spread over GPUs)" if training.method == "qlora" else ""
    message = (
        f"evaluate_instance_type: the Evaluate step holds {training.model}'s base weights with the adapter"
        f"{' ' + holds if holds else ''}: {fit.describe()}; "
    )
    fitting = fitting_instances(training)
    if fitting:
        names = ", ".join(
            f"{t.name} ({'whole on one GPU' if evaluate_fit(training, t).whole else f'over its {t.gpu_count} GPUs'})"
            for t in fitting[:3]
        )
        raise ValueError(message + f"use an instance type that holds it, e.g. {names} (cheapest first)")
    message += (
        "no instance type a processing job runs on holds it (CreateProcessingJob offers no p4d, p4de or p5.48xlarge)"
    )
    if training.method == "lora":
        quantized = base_weights_gib(training.catalog_model, "qlora", "bf16") + sizing.RUNTIME_OVERHEAD_GIB
        message += f"; training.method qlora evaluates over the 4-bit base, about {quantized:.1f} GiB on one GPU"
    spread = fitting_instances(training, "lora") if training.method == "qlora" else []
    if spread:
        message += (
            f"; training.method lora evaluates over the bf16 base spread over GPUs, e.g. on {spread[0].name} "
            f"({spread[0].gpus})"
        )
    raise ValueError(message)
