"""Will it fit? GPU memory arithmetic for serving and training, used by config validation and by the plan.

The numbers are estimates with their assumptions stated, meant to turn a 40-minute failed deploy into a synth-time
error, not to replace a load test.

Serving, per GPU, with tensor parallel degree `tp`:
    weights  = parameters x bytes per parameter (fp16/bf16 2, int8 1, fp32 4) / tp
    KV cache = 2 (keys and values) x layers x hidden size x 2 bytes (fp16 cache, also with int8 weights)
               x tokens (context) x sequences (max batch size) / tp
    runtime  = RUNTIME_OVERHEAD_GIB (CUDA context, kernels, NCCL and allocator reserve)
    fits when weights + KV cache + runtime <= USABLE_FRACTION x GPU memory

Training, per GPU, mixed precision with Adam (model states of ZeRO's accounting, 16 bytes per parameter):
    2 half-precision weights + 2 half-precision gradients + 4 fp32 master weights + 8 Adam moments
    split by tensor x pipeline parallelism; the 12 optimizer bytes also split over the data-parallel ranks with
    shard_optimizer_state; all 16 split over the sharded-data-parallel degree; plus activations per micro-batch
    (checkpointed: one hidden state per layer, and one layer's working set).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stacks.catalog.instances import INSTANCE_TYPES, InstanceType
from stacks.catalog.models import Model

GIB = 1024**3
BYTES_PER_PARAMETER = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
KV_CACHE_BYTES = 2  # LMI DeepSpeed keeps the KV cache in fp16, int8 weights included
RUNTIME_OVERHEAD_GIB = 2.0
USABLE_FRACTION = 0.90

# Container start-up = download the weights from S3 + load them onto the GPUs. 15 s per GiB of weights (about
# 70 MB/s end to end) plus 5 minutes of fixed cost, kept within SageMaker's 10-60 minute window.
STARTUP_FIXED_SECONDS = 300
STARTUP_SECONDS_PER_GIB = 15
TIMEOUT_MIN_SECONDS, TIMEOUT_MAX_SECONDS = 600, 3600


@dataclass(frozen=True)
class ServingFit:
    weights_gib: float  # per GPU
    kv_cache_gib: float  # per GPU
    runtime_gib: float
    capacity_gib: float  # usable memory of one GPU
    copies_per_instance: int  # model copies (DJL workers) per instance: GPUs / tensor parallel degree

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_cache_gib + self.runtime_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    def describe(self) -> str:
        return (
            f"{self.total_gib:.1f} GiB of {self.capacity_gib:.1f} GiB usable per GPU "
            f"(weights {self.weights_gib:.1f} + KV cache {self.kv_cache_gib:.1f} + runtime {self.runtime_gib:.1f})"
        )


def serving_fit(
    model: Model, dtype: str, tensor_parallel_degree: int, instance: InstanceType, *, batch_size: int, tokens: int
) -> ServingFit:
    tp = tensor_parallel_degree
    weights = model.parameters * BYTES_PER_PARAMETER[dtype] / tp / GIB
    kv = 2 * model.layers * model.hidden_size * KV_CACHE_BYTES * tokens * batch_size / tp / GIB
    return ServingFit(
        weights_gib=weights,
        kv_cache_gib=kv,
        runtime_gib=RUNTIME_OVERHEAD_GIB,
        capacity_gib=instance.gpu.memory_gib * USABLE_FRACTION,
        copies_per_instance=instance.gpu_count // tp,
    )


def weights_gib(model: Model, dtype: str) -> float:
    """The whole model's weights in `dtype`, in GiB (what every host downloads)."""
    return model.parameters * BYTES_PER_PARAMETER[dtype] / GIB


def startup_timeout_seconds(model: Model, dtype: str) -> int:
    """A container start-up health-check timeout sized from the weights each host downloads and loads."""
    seconds = STARTUP_FIXED_SECONDS + STARTUP_SECONDS_PER_GIB * weights_gib(model, dtype)
    return int(min(max(math.ceil(seconds / 60) * 60, TIMEOUT_MIN_SECONDS), TIMEOUT_MAX_SECONDS))


def smallest_fitting_tp(
    model: Model, dtype: str, instance: InstanceType, *, batch_size: int, tokens: int
) -> tuple[int, ServingFit] | None:
    """The smallest tensor parallel degree that divides the GPUs and the heads and fits, if any."""
    for tp in range(1, instance.gpu_count + 1):
        if instance.gpu_count % tp == 0 and model.attention_heads % tp == 0:
            fit = serving_fit(model, dtype, tp, instance, batch_size=batch_size, tokens=tokens)
            if fit.fits:
                return tp, fit
    return None


def suggest_serving(model: Model, dtype: str, instance: InstanceType, *, batch_size: int, tokens: int) -> str:
    """What would fit instead: more tensor parallelism here, int8 here, or the cheapest instance type that fits."""
    found = smallest_fitting_tp(model, dtype, instance, batch_size=batch_size, tokens=tokens)
    if found:
        return f"tensor_parallel_degree {found[0]} fits on {instance.name}: {found[1].describe()}"
    if dtype != "int8" and model.deepspeed_kernels:
        found = smallest_fitting_tp(model, "int8", instance, batch_size=batch_size, tokens=tokens)
        if found:
            return f"dtype int8 with tensor_parallel_degree {found[0]} fits on {instance.name}: {found[1].describe()}"
    for other in sorted(INSTANCE_TYPES.values(), key=lambda i: i.hourly_usd):
        if dtype == "bf16" and not other.gpu.bf16:
            continue
        found = smallest_fitting_tp(model, dtype, other, batch_size=batch_size, tokens=tokens)
        if found:
            return (
                f"the cheapest instance type where {dtype} fits is {other.name} with tensor_parallel_degree "
                f"{found[0]}: {found[1].describe()}"
            )
    return "no supported instance type holds it; lower max_batch_size or the context, or use int8"


@dataclass(frozen=True)
class TrainingFit:
    model_states_gib: float  # per GPU
    activations_gib: float  # per GPU
    capacity_gib: float

    @property
    def total_gib(self) -> float:
        return self.model_states_gib + self.activations_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    def describe(self) -> str:
        return (
            f"{self.total_gib:.1f} GiB of {self.capacity_gib:.1f} GiB usable per GPU "
            f"(weights, gradients and optimizer {self.model_states_gib:.1f} + activations {self.activations_gib:.1f})"
        )


def training_fit(
    model: Model,
    instance: InstanceType,
    *,
    precision: str,
    tensor_parallel_degree: int,
    pipeline_parallel_degree: int,
    data_parallel_degree: int,
    shard_optimizer_state: bool,
    sharded_data_parallel_degree: int,
    micro_batch_size: int,
    sequence_length: int,
    activation_checkpointing: bool,
) -> TrainingFit:
    model_parallel = tensor_parallel_degree * pipeline_parallel_degree
    half = precision in ("fp16", "bf16")
    weights_and_grads = (2 + 2) if half else (4 + 4)
    optimizer = (4 + 8) if half else 8  # fp32 master copy only with half precision
    params = model.parameters / model_parallel
    if sharded_data_parallel_degree > 1:
        states = params * (weights_and_grads + optimizer) / sharded_data_parallel_degree
    elif shard_optimizer_state:
        states = params * (weights_and_grads + optimizer / data_parallel_degree)
    else:
        states = params * (weights_and_grads + optimizer)
    # Activations (Korthikanti et al. 2022): per layer s*b*h*(34 + 5*a*s/h) bytes in half precision.
    s, b, h, a = sequence_length, micro_batch_size, model.hidden_size, model.attention_heads
    layers = model.layers / pipeline_parallel_degree
    per_layer = s * b * h * (34 + 5 * a * s / h) / tensor_parallel_degree
    activations = (layers * 2 * s * b * h + per_layer) if activation_checkpointing else layers * per_layer
    return TrainingFit(
        model_states_gib=states / GIB,
        activations_gib=activations / GIB,
        capacity_gib=instance.gpu.memory_gib * USABLE_FRACTION,
    )
