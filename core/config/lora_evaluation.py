"""Whether the Evaluate step of an adapter method holds the base model, on the GPUs of `evaluate_instance_type`.

evaluate.py applies the adapter to its base in the Evaluate processing job (training/finetune/placement.py):
- whole on one GPU, when it fits there (the base in the training precision, the dtype it was held in while the
  adapter trained, recorded in base_model.json; a QLoRA adapter's base 4-bit, as it was trained);
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
Host memory while loading (one process; training/finetune/backends/lora.py load_adapter_model): whole on one GPU,
from_pretrained (low_cpu_mem_usage, no device_map) builds the whole base in host memory and evaluate.py then moves
it to the GPU; spread, each weight goes from its checkpoint shard straight to its GPU, one shard at a time; a QLoRA
base is quantized onto its GPU shard by shard the same way. Sized as the training host check sizes a rank: the
weights held at the peak plus sizing.HOST_OVERHEAD_GIB, within sizing.USABLE_HOST_FRACTION of the instance's memory.
GPUs: Ampere or newer (bf16 arithmetic) for a base held in bf16 (training.precision bf16, and QLoRA's compute).
A T4 or V100 runs bf16 without an error (torch.cuda.is_bf16_supported counts emulation) but emulated,
at about a tenth of its fp16 speed (torch's bf16 GEMM measured at 2.2 TFLOPS on a T4, fp16 at 20.4:
MakazhanAlpamys/Soup#714), so the cheapest-first list would open with the slowest and, per evaluation, dearest
instance (for QLoRA a g4dn.xlarge, which its own bf16 check refuses). An fp16 or fp32 base runs natively there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import sizing
from core.api_limits import aws_tables, limit
from core.catalog import images
from core.catalog.instances import INSTANCE_TYPES, InstanceType
from core.config.lora_training import base_weights_gib, embedding_parameters

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
    spreads: bool  # whether evaluate.py spreads this base over GPUs (not QLoRA's 4-bit)
    stored_gib: float  # the base unquantized, in `precision`, as from_pretrained builds it in host memory
    precision: str  # what evaluate.py computes in: the training precision (QLoRA: bf16)

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
    def host(self) -> sizing.HostFit:
        """Host memory while the base loads (the module's rule)."""
        if self.spread or not self.spreads:
            weights = min(self.stored_gib, SHARD_GIB)
            loading = (
                "each weight goes from its checkpoint shard to its GPU"
                if self.spread
                else "the 4-bit base is quantized onto the GPU"
            ) + ", one checkpoint shard at a time"
        else:
            weights = self.stored_gib
            loading = (
                f"from_pretrained builds the whole {self.precision} base in host memory, then evaluate.py moves it to "
                "the GPU"
            )
        capacity = self.instance.host_memory_gib * sizing.USABLE_HOST_FRACTION
        return sizing.HostFit(weights, sizing.HOST_OVERHEAD_GIB, 1, capacity, loading)

    @property
    def runs(self) -> bool:
        """Whether the Evaluate step holds the base here: GPUs with the arithmetic it computes in, the base on them,
        and its load in host memory."""
        return (self.instance.gpu.bf16 or self.precision != "bf16") and self.fits and self.host.fits

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

    method = method or training.method
    model = training.catalog_model
    instance = instance or INSTANCE_TYPES[training.evaluate_instance_type]
    precision = "bf16" if method == "qlora" else training.precision
    per_parameter = sizing.BYTES_PER_PARAMETER[precision] / sizing.GIB
    embedding = model.vocab_size * model.hidden_size * per_parameter
    layer = (model.parameters - embedding_parameters(model)) / model.layers * per_parameter
    return EvaluateFit(
        instance,
        base_weights_gib(model, method, precision),
        layer,
        max(layer, embedding),
        method == "lora",
        base_weights_gib(model, "lora", precision),
        precision,
    )


def fitting_instances(training: Any, method: str | None = None) -> list[InstanceType]:
    """The instance types the Evaluate step would hold the base on (for training.method or `method`), cheapest first:
    offered by CreateProcessingJob, with a processing image the SDK knows, where the step runs (EvaluateFit.runs: bf16
    GPUs for a bf16 base, and the memory to load and hold the base)."""

    offered = aws_tables.constraint("sagemaker:CreateProcessingJob:ProcessingResources.ClusterConfig.InstanceType")
    fitting = []
    for instance in INSTANCE_TYPES.values():
        if (
            evaluate_fit(training, instance, method).runs
            and limit.violation(offered, instance.name) is None
            and images.processing_instance_problem(instance.name) is None
        ):
            fitting.append(instance)
    return sorted(fitting, key=lambda instance: instance.hourly_usd)


def _cheapest(training: Any) -> str | None:
    """The cheapest instance types the Evaluate step runs on, in words."""
    fitting = fitting_instances(training)
    if not fitting:
        return None
    names = ", ".join(
        f"{t.name} ({'whole on one GPU' if evaluate_fit(training, t).whole else f'over its {t.gpu_count} GPUs'})"
        for t in fitting[:3]
    )
    return f"{names} (cheapest first)"


def check(training: Any) -> None:
    """ValueError, naming evaluate_instance_type, the sizes and the types that would do, where the Evaluate step does
    not run (EvaluateFit.runs)."""

    fit = evaluate_fit(training)
    if fit.runs:
        return
    instance, cheapest = fit.instance, _cheapest(training)
    instead = f"use an instance type that holds it, e.g. {cheapest}" if cheapest else ""
    if not instance.gpu.bf16 and fit.precision == "bf16":
        held = "QLoRA computes in bf16" if training.method == "qlora" else "the adapter trained over a bf16 base"
        raise ValueError(
            f"evaluate_instance_type: {instance.name} has {instance.gpu.model} GPUs, without bf16 arithmetic, and the "
            f"Evaluate step holds the base in bf16 ({held}), which torch runs on them only emulated, at about a "
            "tenth of their fp16 speed; use Ampere or newer GPUs (g5, g6, g6e)"
            + (f", e.g. {cheapest}" if cheapest else "")
        )
    if fit.fits:
        raise ValueError(
            f"evaluate_instance_type: {training.model}'s base does not load on {instance.name} "
            f"({instance.host_memory_gib} GiB of host memory): the Evaluate step needs {fit.host.describe()}; "
            + (instead or "no instance type a processing job runs on has the memory for it")
        )
    holds = "on one GPU (a 4-bit base is not spread over GPUs)" if training.method == "qlora" else ""
    message = (
        f"evaluate_instance_type: the Evaluate step holds {training.model}'s base weights with the adapter"
        f"{' ' + holds if holds else ''}: {fit.describe()}; "
    )
    if instead:
        raise ValueError(message + instead)
    message += (
        "no instance type a processing job runs on holds it (CreateProcessingJob offers no p4d, p4de or p5.48xlarge)"
    )
    if training.method == "lora":
        quantized = base_weights_gib(training.catalog_model, "qlora", "bf16") + sizing.RUNTIME_OVERHEAD_GIB
        message += f"; training.method qlora evaluates over the 4-bit base, about {quantized:.1f} GiB on one GPU"
    spread = fitting_instances(training, "lora") if training.method == "qlora" else []
    if spread:
        message += (
            f"; training.method lora evaluates over the {training.precision} base spread over GPUs, e.g. on "
            f"{spread[0].name} ({spread[0].gpus})"
        )
    raise ValueError(message)
