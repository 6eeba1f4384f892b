"""Will it fit? GPU and host memory arithmetic for serving and training, used by config validation and by the plan.

The numbers are estimates with their assumptions stated, meant to turn a 40-minute failed deploy into a synth-time
error, not to replace a load test.

Serving, per GPU, with tensor parallel degree `tp`:
    weights  = (parameters - embedding) x bytes per parameter (fp16/bf16 2, int8 1, fp32 4) / tp
               + embedding x bytes per parameter (fp16 for int8): DeepSpeed keeps the token embedding whole on every GPU
    KV cache = 2 (keys and values) x layers x key/value heads per GPU x head size x 2 bytes (fp16 cache, also with
               int8 weights) x tokens (context) x sequences (max batch size). Key/value heads per GPU: the model's
               num_key_value_heads / tp (grouped-query attention keeps fewer of them than query heads; multi-head
               attention as many, so this is hidden size / tp), at least 1: with more GPUs than key/value heads vLLM
               copies each head onto several GPUs (vllm/model_executor/models/llama.py, LlamaAttention).
    LoRA     = with adapters (vLLM): max_loras x max_lora_rank x (inputs + outputs of every LoRA-capable projection)
               x layers x 2 bytes, counted whole on every GPU (core/config/lora_serving.py)
    runtime  = RUNTIME_OVERHEAD_GIB (CUDA context, kernels, NCCL and allocator reserve)
    fits when weights + KV cache + LoRA + runtime <= USABLE_FRACTION x GPU memory

Host memory while the weights load, per instance = ranks loading at once x (weights one rank holds + HOST_OVERHEAD_GIB),
    fits when within USABLE_HOST_FRACTION x the instance's RAM. Ranks: every GPU's process (serving: copies x tensor
    parallel degree, all loading together; training: processes per host). What one rank holds:
    - LMI DeepSpeed, Hugging Face folder: from_pretrained(low_cpu_mem_usage=True) on every rank materializes the whole
      model in host memory in the load dtype before init_inference
      shards it: the full model per rank.
    - LMI DeepSpeed, pre-sharded checkpoint (ds_inference_config.json): the model is built on the meta device and each
      rank torch.loads only its own tensor-parallel shards plus the non-tp part (embeddings, fp16): at most that.
    - vLLM: each rank reads the checkpoint files one at a time and keeps only its slice: at most its share.
    - Training (training/finetune/modeling.py, every backend): every rank builds the whole model (fp32 before it is
      cast to the training dtype) and reads the whole stored state dict (fp32 at most) to load into it, before SMP or
      FSDP partitions it: two fp32 copies of the model at most; the bound is what is checked.

Training, per GPU, mixed precision with Adam (model states of ZeRO's accounting, 16 bytes per parameter):
    2 half-precision weights + 2 half-precision gradients + 4 fp32 master weights + 8 Adam moments
    split by tensor x pipeline parallelism; the 12 optimizer bytes also split over the data-parallel ranks with
    shard_optimizer_state; all 16 split over the sharded-data-parallel degree; plus activations per micro-batch
    (checkpointed: one hidden state per layer, and one layer's working set).
    What SMP v1's tensor parallelism keeps whole is not split by the tensor parallel degree: its GPT-J and GPT-NeoX
    hooks set parallel_attn_output, which turns DistributedTransformerLMHead's distribute_embedding off, so every
    tensor-parallel rank holds a plain nn.Embedding and LM head (SMP_V1_WHOLE_ON_EVERY_TP_RANK).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.catalog.instances import INSTANCE_TYPES, InstanceType
from core.catalog.models import DeepSpeedCheckpoint, Model, StagedWeights

GIB = 1024**3
BYTES_PER_PARAMETER = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
KV_CACHE_BYTES = 2  # LMI DeepSpeed keeps the KV cache in fp16, int8 weights included
RUNTIME_OVERHEAD_GIB = 2.0
USABLE_FRACTION = 0.90

# Host memory: each loading process also holds Python, torch and the CUDA runtime's host side, and one checkpoint file
# in flight; the instance keeps the rest for the OS, the model server (DJL's frontend, the training toolkit) and
# SageMaker's agents.
HOST_OVERHEAD_GIB = 3.0
USABLE_HOST_FRACTION = 0.90
# Staging: the download, 10% for the tokenizer files and filesystem, and room for the container's own files.
STAGING_VOLUME_FACTOR = 1.1
STAGING_VOLUME_MARGIN_GIB = 20
# What the weights are loaded as before the engine converts them. int8 is served only from a pre-sharded DeepSpeed
# checkpoint (config refuses it otherwise), which is sized as stored; fp16 is its Hugging Face load dtype.
LOAD_DTYPE = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "int8": "fp16"}

# An instance's start: SageMaker copies the model data (the uncompressed weights prefix, ModelDataSource) to
# /opt/ml/model under ModelDataDownloadTimeoutInSeconds, then the container loads the weights from that local disk onto
# the GPUs under ContainerStartupHealthCheckTimeoutInSeconds. The project's earlier budget for the handler's own
# download plus the load was 15 s per GiB (about 70 MB/s end to end) plus 5 minutes; AWS publishes no throughput for
# its model-data copy, so the same total is split: 10 s per GiB for the copy (about 100 MiB/s) plus 2 minutes, and
# 5 s per GiB for reading local files onto the GPUs plus 5 minutes (imports, DeepSpeed's kernels, warm-up). Each stays
# within SageMaker's window for it (the API takes 60-3600 s; below 10 minutes only by hand).
DOWNLOAD_FIXED_SECONDS = 120
DOWNLOAD_SECONDS_PER_GIB = 10
STARTUP_FIXED_SECONDS = 300
STARTUP_SECONDS_PER_GIB = 5
TIMEOUT_MIN_SECONDS, TIMEOUT_MAX_SECONDS = 600, 3600


@dataclass(frozen=True)
class ServingFit:
    weights_gib: float  # per GPU
    kv_cache_gib: float  # per GPU
    runtime_gib: float
    capacity_gib: float  # usable memory of one GPU
    copies_per_instance: int  # model copies (DJL workers) per instance: GPUs / tensor parallel degree
    lora_gib: float = 0.0  # per GPU: vLLM's LoRA slots for adapters (core/config/lora_serving.py)

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_cache_gib + self.runtime_gib + self.lora_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    def describe(self) -> str:
        adapters = f" + LoRA slots {self.lora_gib:.1f}" if self.lora_gib else ""
        return (
            f"{self.total_gib:.1f} GiB of {self.capacity_gib:.1f} GiB usable per GPU "
            f"(weights {self.weights_gib:.1f} + KV cache {self.kv_cache_gib:.1f}{adapters} + runtime "
            f"{self.runtime_gib:.1f})"
        )


def serving_fit(
    model: Model,
    dtype: str,
    tensor_parallel_degree: int,
    instance: InstanceType,
    *,
    batch_size: int,
    tokens: int,
    lora_gib: float = 0.0,
) -> ServingFit:
    tp = tensor_parallel_degree
    # DeepSpeed's tensor parallelism splits the transformer layers, not the token embedding: every GPU holds it whole,
    # in fp16 also with int8 weights (a pre-sharded checkpoint keeps it in non_tp). vLLM splits it; counted whole
    # anyway, which overstates vLLM's need by (tp - 1) / tp of the embedding.
    embedding = model.embedding_parameters
    layers_bytes = (model.parameters - embedding) * BYTES_PER_PARAMETER[dtype] / tp
    embedding_bytes = embedding * BYTES_PER_PARAMETER["fp16" if dtype == "int8" else dtype]
    weights = (layers_bytes + embedding_bytes) / GIB
    kv = 2 * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * KV_CACHE_BYTES * tokens * batch_size / GIB
    return ServingFit(
        weights_gib=weights,
        kv_cache_gib=kv,
        runtime_gib=RUNTIME_OVERHEAD_GIB,
        capacity_gib=instance.gpu.memory_gib * USABLE_FRACTION,
        copies_per_instance=instance.gpu_count // tp,
        lora_gib=lora_gib,
    )


def kv_heads_per_gpu(model: Model, tensor_parallel_degree: int) -> int:
    """The key/value heads each GPU caches: its share of them, or one copy of a head when there are more GPUs."""
    return max(1, model.kv_heads // tensor_parallel_degree)


def splits_heads(model: Model, tensor_parallel_degree: int, engine: str) -> bool:
    """Whether `engine` can split the model's attention over `tensor_parallel_degree` GPUs. Both split the query
    heads evenly. vLLM splits the key/value heads evenly, or copies each onto a whole number of GPUs when there are
    more GPUs than heads (its LlamaAttention, Qwen2Attention: "assert total_num_kv_heads % tp_size == 0", else
    "assert tp_size % total_num_kv_heads == 0"). DeepSpeed's AutoTP gives each rank whole key/value heads and ranks
    beyond their number none (module_inject/tp_shard.py, get_shard_size @v0.12.6), so it needs an even split."""
    tp, kv = tensor_parallel_degree, model.kv_heads
    if model.attention_heads % tp:
        return False
    return kv % tp == 0 or (engine == "vllm" and tp % kv == 0)


def head_splits(model: Model, engine: str, gpus: int) -> list[int]:
    """The tensor parallel degrees up to `gpus` that divide the GPUs and split the model's heads on `engine`."""
    return [tp for tp in range(1, gpus + 1) if gpus % tp == 0 and splits_heads(model, tp, engine)]


def weights_gib(model: Model, dtype: str) -> float:
    """The whole model's weights in `dtype`, in GiB."""
    return model.parameters * BYTES_PER_PARAMETER[dtype] / GIB


def checkpoint_parts_gib(model: Model, checkpoint: DeepSpeedCheckpoint) -> tuple[float, float]:
    """(tensor-parallel part, non-tp part) of a pre-sharded DeepSpeed checkpoint, in GiB: the transformer layers in
    the checkpoint's dtype, the embeddings (kept out of the shards) in fp16."""
    embeddings = model.embedding_parameters
    tp_part = (model.parameters - embeddings) * BYTES_PER_PARAMETER[checkpoint.dtype]
    return tp_part / GIB, embeddings * BYTES_PER_PARAMETER["fp16"] / GIB


def download_gib(model: Model, dtype: str, checkpoint: DeepSpeedCheckpoint | None = None) -> float:
    """What every host downloads: the checkpoint as stored, or a Hugging Face folder in the load dtype."""
    if checkpoint is not None:
        return sum(checkpoint_parts_gib(model, checkpoint))
    return weights_gib(model, LOAD_DTYPE[dtype])


def _window(seconds: float) -> int:
    return int(min(max(math.ceil(seconds / 60) * 60, TIMEOUT_MIN_SECONDS), TIMEOUT_MAX_SECONDS))


def startup_timeout_seconds(model: Model, dtype: str, checkpoint: DeepSpeedCheckpoint | None = None) -> int:
    """A container start-up health-check timeout sized from the weights each host loads from its local copy."""
    return _window(STARTUP_FIXED_SECONDS + STARTUP_SECONDS_PER_GIB * download_gib(model, dtype, checkpoint))


def delivered_gib(model: Model, checkpoint: DeepSpeedCheckpoint | None = None) -> float:
    """What SageMaker copies onto every host: the checkpoint as stored, or a Hugging Face folder, which may hold fp32
    weights whatever dtype is served (sized as staging_volume_gib sizes it)."""
    if checkpoint is not None:
        return sum(checkpoint_parts_gib(model, checkpoint))
    return weights_gib(model, "fp32")


def download_timeout_seconds(model: Model, dtype: str, checkpoint: DeepSpeedCheckpoint | None = None) -> int:
    """A model-data download timeout sized from the weights SageMaker copies onto each host (`dtype` is served, not
    stored: it does not change what is copied)."""
    return _window(DOWNLOAD_FIXED_SECONDS + DOWNLOAD_SECONDS_PER_GIB * delivered_gib(model, checkpoint))


def staging_volume_gib(model: Model, staged: StagedWeights) -> int:
    """The staging job's volume: it holds the whole download until SageMaker uploads the folder at the job's end. A
    checkpoint is sized as stored; a hub repository may hold fp32, fp16 or bf16 weights, so it is sized at fp32."""
    stored = sum(checkpoint_parts_gib(model, staged.deepspeed)) if staged.deepspeed else weights_gib(model, "fp32")
    return math.ceil(stored * STAGING_VOLUME_FACTOR + STAGING_VOLUME_MARGIN_GIB)


@dataclass(frozen=True)
class HostFit:
    weights_per_rank_gib: float  # what one loading process holds at its peak
    overhead_gib: float  # per process
    ranks: int  # processes loading at once on one instance
    capacity_gib: float  # usable host memory of one instance
    loading: str  # how a rank loads, in words

    @property
    def per_rank_gib(self) -> float:
        return self.weights_per_rank_gib + self.overhead_gib

    @property
    def total_gib(self) -> float:
        return self.ranks * self.per_rank_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    def describe(self) -> str:
        return (
            f"{self.total_gib:.1f} GiB of {self.capacity_gib:.1f} GiB usable per instance ({self.ranks} "
            f"{'rank' if self.ranks == 1 else 'ranks'} x (weights {self.weights_per_rank_gib:.1f} + process "
            f"{self.overhead_gib:.1f}); {self.loading})"
        )


def _host(instance: InstanceType, weights: float, ranks: int, loading: str) -> HostFit:
    capacity = instance.host_memory_gib * USABLE_HOST_FRACTION
    return HostFit(weights, HOST_OVERHEAD_GIB, ranks, capacity, loading)


def serving_host_fit(
    model: Model,
    dtype: str,
    tensor_parallel_degree: int,
    instance: InstanceType,
    *,
    engine: str,
    checkpoint: DeepSpeedCheckpoint | None = None,
) -> HostFit:
    """Host memory while an endpoint instance loads: every copy's ranks load at once (DJL starts all workers)."""
    tp = tensor_parallel_degree
    ranks = instance.gpu_count // tp * tp
    if checkpoint is not None:
        tp_part, non_tp = checkpoint_parts_gib(model, checkpoint)
        return _host(
            instance, tp_part / tp + non_tp, ranks, "each rank reads only its shards of the pre-sharded checkpoint"
        )
    load = LOAD_DTYPE[dtype]
    if engine == "vllm":
        return _host(instance, weights_gib(model, load) / tp, ranks, f"vLLM: each rank keeps only its {load} slice")
    return _host(
        instance, weights_gib(model, load), ranks, f"from_pretrained: every rank holds the whole model in {load}"
    )


def copy_memory_mb(host: HostFit, tensor_parallel_degree: int) -> int:
    """An inference component copy's MinMemoryRequiredInMb: the host memory its ranks hold while loading (HostFit's
    per-rank peak, times the tensor parallel degree), in SageMaker's MB, which are MiB (its MemoryReservation metric:
    1024 MB reserved on a 32 GiB instance is 3.125%)."""
    return math.ceil(tensor_parallel_degree * host.per_rank_gib * 1024)


def training_host_fit(model: Model, instance: InstanceType, *, processes: int) -> HostFit:
    """Host memory while a training instance loads the pretrained weights: every process builds the whole model and
    reads the whole stored state dict into it (two fp32 copies at most)."""
    return _host(
        instance,
        2 * weights_gib(model, "fp32"),
        processes,
        "every rank builds the whole model and reads the whole state dict: two fp32 copies at most",
    )


def suggest_host_serving(
    model: Model, dtype: str, instance: InstanceType, *, engine: str, batch_size: int, tokens: int
) -> str:
    """What would load instead: a pre-sharded checkpoint of the model, or the cheapest instance type whose GPUs and
    host memory both hold it."""
    for checkpoint in model.checkpoints:
        if engine != "deepspeed" or checkpoint.dtype != dtype or instance.gpu_count % checkpoint.tensor_parallel_degree:
            continue
        tp = checkpoint.tensor_parallel_degree
        gpu = serving_fit(model, dtype, tp, instance, batch_size=batch_size, tokens=tokens)
        host = serving_host_fit(model, dtype, tp, instance, engine=engine, checkpoint=checkpoint)
        if gpu.fits and host.fits:
            return (
                f"serve its pre-sharded DeepSpeed checkpoint {checkpoint.hf_id} instead (weights: "
                f"{_checkpoint_weights(checkpoint)}, tensor_parallel_degree {tp}): {host.describe()}"
            )
    cheapest = _cheapest_fitting(model, dtype, engine, batch_size=batch_size, tokens=tokens, check_host=True)
    if cheapest:
        other, tp, host = cheapest
        return f"the cheapest instance type where it loads is {other.name} with tensor_parallel_degree {tp}: {host}"
    return "no supported instance type has the host memory for it: use a pre-sharded checkpoint of the model"


def _cheapest_fitting(
    model: Model, dtype: str, engine: str, *, batch_size: int, tokens: int, check_host: bool = False
) -> tuple[InstanceType, int, str] | None:
    """The cheapest instance type whose GPUs hold the model (and, with check_host, whose host memory holds its
    load), its smallest tensor parallel degree there, and the fit that decided it, described."""
    for other in sorted(INSTANCE_TYPES.values(), key=lambda i: i.hourly_usd):
        if dtype == "bf16" and not other.gpu.bf16:
            continue
        found = smallest_fitting_tp(model, dtype, other, engine, batch_size=batch_size, tokens=tokens)
        if not found:
            continue
        if not check_host:
            return other, found[0], found[1].describe()
        host = serving_host_fit(model, dtype, found[0], other, engine=engine)
        if host.fits:
            return other, found[0], host.describe()
    return None


def smallest_fitting_tp(
    model: Model, dtype: str, instance: InstanceType, engine: str, *, batch_size: int, tokens: int
) -> tuple[int, ServingFit] | None:
    """The smallest tensor parallel degree that divides the GPUs, splits the heads on `engine` and fits, if any."""
    for tp in head_splits(model, engine, instance.gpu_count):
        fit = serving_fit(model, dtype, tp, instance, batch_size=batch_size, tokens=tokens)
        if fit.fits:
            return tp, fit
    return None


def suggest_serving(
    model: Model, dtype: str, instance: InstanceType, engine: str, *, batch_size: int, tokens: int
) -> str:
    """What would fit instead: more tensor parallelism here, the model's pre-sharded int8 checkpoint here, or the
    cheapest instance type that fits."""
    found = smallest_fitting_tp(model, dtype, instance, engine, batch_size=batch_size, tokens=tokens)
    if found:
        return f"tensor_parallel_degree {found[0]} fits on {instance.name}: {found[1].describe()}"
    # int8 only from a pre-sharded checkpoint: DeepSpeed quantizes while loading one, never a Hugging Face model.
    for checkpoint in model.checkpoints if dtype != "int8" else ():
        tp = checkpoint.tensor_parallel_degree
        if checkpoint.dtype != "int8" or instance.gpu_count % tp:
            continue
        fit = serving_fit(model, "int8", tp, instance, batch_size=batch_size, tokens=tokens)
        if fit.fits:
            return (
                f"dtype int8 from its pre-sharded checkpoint {checkpoint.hf_id} (weights: "
                f"{_checkpoint_weights(checkpoint)}) with tensor_parallel_degree {tp} fits on {instance.name}: "
                f"{fit.describe()}"
            )
    cheapest = _cheapest_fitting(model, dtype, engine, batch_size=batch_size, tokens=tokens)
    if cheapest:
        other, tp, fit = cheapest
        return f"the cheapest instance type where {dtype} fits is {other.name} with tensor_parallel_degree {tp}: {fit}"
    return "no supported instance type holds it; lower max_batch_size or the context"


# SMP v1's Hugging Face hooks that set parallel_attn_output, and whether their LM head has a bias (use_lm_head_bias):
# DistributedTransformerLMHead._parse_args then disables distribute_embedding ("not supported together with
# parallel_attn_output"), and __init__ builds a plain nn.Embedding and nn.Linear LM head, whole on every rank
# (tkazusa/smdistributed_modelparallel@b5e06a8: torch/nn/transformer.py, torch/nn/huggingface/gptj.py, gptneox.py).
# Keyed by Hugging Face model_type; SMP v1 has no other hook for a catalog model (GPT-2, GPT-Neo, BERT, RoBERTa, T5
# and ViT keep distribute_embedding's default, off, too, but the pipeline runs none of them).
SMP_V1_WHOLE_ON_EVERY_TP_RANK = {"gptj": True, "gpt_neox": False}


def smp_v1_whole_parameters(model: Model, tensor_parallel_degree: int) -> int:
    """The parameters SMP v1's tensor parallelism keeps whole on every rank: the token embedding and the LM head
    (one matrix when tied), with its bias; 0 without tensor parallelism or for a model SMP v1 does not replace."""
    if tensor_parallel_degree <= 1 or model.architecture not in SMP_V1_WHOLE_ON_EVERY_TP_RANK:
        return 0
    embedding = model.vocab_size * model.hidden_size
    lm_head = 0 if model.tied_embeddings else embedding
    bias = model.vocab_size if SMP_V1_WHOLE_ON_EVERY_TP_RANK[model.architecture] else 0
    return embedding + lm_head + bias


@dataclass(frozen=True)
class TrainingFit:
    model_states_gib: float  # per GPU
    activations_gib: float  # per GPU
    capacity_gib: float
    # Of model_states_gib: what every tensor-parallel GPU holds whole, and what it is (shown in the plan).
    whole_gib: float = 0.0
    whole: str = ""

    @property
    def total_gib(self) -> float:
        return self.model_states_gib + self.activations_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    def describe(self) -> str:
        whole = (
            f", of which {self.whole_gib:.1f} for what every tensor-parallel GPU holds whole: {self.whole}"
            if self.whole_gib
            else ""
        )
        return (
            f"{self.total_gib:.1f} GiB of {self.capacity_gib:.1f} GiB usable per GPU "
            f"(weights, gradients and optimizer {self.model_states_gib:.1f}{whole} + activations "
            f"{self.activations_gib:.1f})"
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
    whole_parameters: int = 0,
) -> TrainingFit:
    """`whole_parameters`: those every tensor-parallel rank holds whole (smp_v1_whole_parameters), counted whole on
    the pipeline stage that holds them; the rest is split over tensor x pipeline parallelism."""
    model_parallel = tensor_parallel_degree * pipeline_parallel_degree
    half = precision in ("fp16", "bf16")
    weights_and_grads = (2 + 2) if half else (4 + 4)
    optimizer = (4 + 8) if half else 8  # fp32 master copy only with half precision
    if sharded_data_parallel_degree > 1:
        per_parameter = (weights_and_grads + optimizer) / sharded_data_parallel_degree
    elif shard_optimizer_state:
        per_parameter = weights_and_grads + optimizer / data_parallel_degree
    else:
        per_parameter = weights_and_grads + optimizer
    whole = whole_parameters * per_parameter
    states = (model.parameters - whole_parameters) / model_parallel * per_parameter + whole
    # Activations (Korthikanti et al. 2022): per layer s*b*h*(34 + 5*a*s/h) bytes in half precision.
    s, b, h, a = sequence_length, micro_batch_size, model.hidden_size, model.attention_heads
    layers = model.layers / pipeline_parallel_degree
    per_layer = s * b * h * (34 + 5 * a * s / h) / tensor_parallel_degree
    activations = (layers * 2 * s * b * h + per_layer) if activation_checkpointing else layers * per_layer
    return TrainingFit(
        model_states_gib=states / GIB,
        activations_gib=activations / GIB,
        capacity_gib=instance.gpu.memory_gib * USABLE_FRACTION,
        whole_gib=whole / GIB,
        whole="embedding and LM head" if whole_parameters else "",
    )


def _checkpoint_weights(checkpoint: DeepSpeedCheckpoint) -> str:
    """The `weights` that serve a pre-sharded checkpoint: its pickles are accepted only at a pinned commit, the
    catalog's or one the operator reviewed."""
    pin = "" if checkpoint.revision else ", revision: <the 40-hex commit you reviewed>"
    return f"{{checkpoint: {checkpoint.name}, allow_pickle: true{pin}}}"
