"""Training with LoRA / QLoRA adapters: the `training.lora` settings, and the checks and memory estimates of a stage
whose `training.method` is lora or qlora.

How such a job runs, in the SMP v2 image (PyTorch 2.4.1, Python 3.11, whose lock lines pin transformers 4.46.3, peft
and bitsandbytes; the prepare and evaluate steps run in the same image, since the current models' tokenizers and
configs need that transformers), in one of two ways:
- Without `training.smp` (DDP): train.py with PEFT on plain PyTorch, one process per GPU under torchrun, every GPU
  holding the whole frozen base (training/finetune/backends/lora.py). The config is given SMP v2's image line
  (smp.version 2) for the image lookups, region checks and IAM, with hybrid_shard_degree 1 (the base sharded over
  one GPU: whole on each), which is what tells the two ways apart (`TrainingConfig.shards_base`).
- With `training.smp: {version: 2, hybrid_shard_degree: N}` (method lora only): launched like an SMP v2 full
  fine-tuning job (torch_distributed and SMP v2's mp_parameters), train.py trains the adapters over a frozen base
  that FSDP shards over N GPUs (0: all of them), following AWS's SMP v2 fine-tuning recipe: rank 0 alone reads the
  pretrained weights, the others build the model on the meta device and receive their shards from it
  (sync_module_states). Tensor parallelism is refused: SMP v2's replaces the attention and MLP modules the adapters
  attach to. QLoRA is refused: bitsandbytes' 4-bit weights are not sharded by FSDP in this stack.

Memory per GPU, with D the GPUs the base is sharded over (DDP: 1; FSDP: hybrid_shard_degree, or the world size when 0):
    base weights  = parameters x 2 bytes (bf16/fp16; 4 in fp32) / D; QLoRA (DDP only): the linear layers in 4-bit
                    NF4 with double quantization (4.127 bits per weight, the QLoRA paper), while the token embedding
                    and the LM head stay unquantized and PEFT's prepare_model_for_kbit_training casts them to fp32
    gathered      = FSDP only (D > 1): the units it holds whole while a step runs, in the training dtype: two
                    transformer layers (the one computing and the next, prefetched) and the root unit, the token
                    embedding and LM head, which FSDP keeps gathered from the forward pass through the backward
    adapters      = r x (inputs + outputs) of each adapted projection, in every layer, x 16 bytes (fp32 weights,
                    gradients and two Adam moments) / D
    activations   = sizing's checkpointed per-layer estimate, plus the logits: sequence x batch x vocabulary x
                    logits_bytes (14 for Llama, Mistral, Qwen2 and GPT-J on the SMP v2 image's transformers 4.46.3,
                    whose loss upcasts the logits to fp32 and copies the shifted slice), which dominates with
                    128K-152K vocabularies
    runtime       = sizing.RUNTIME_OVERHEAD_GIB
Host memory while loading: DDP: each process reads the weights straight into the training dtype (from_pretrained
with low_cpu_mem_usage): one bf16 copy per process at most; QLoRA quantizes shard by shard onto the GPU. FSDP: rank 0
alone holds one copy in the training dtype, on the first instance; every process adds its own overhead.
The Evaluate step holds the base (bf16; QLoRA: 4-bit) and the adapter on one GPU of evaluate_instance_type, or a
bf16 base spread over all its GPUs: core/config/lora_evaluation.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from core import sizing, training_job
from core.catalog.images import training_framework
from core.catalog.instances import INSTANCE_TYPES
from core.config.fields import StrictModel
from training.finetune.adapters import LORA_TARGETS, resolve_target_modules

QLORA_BITS_PER_WEIGHT = 4.127  # NF4 plus double-quantized constants (Dettmers et al. 2023, section 3)
ADAPTER_STATE_BYTES = 16  # fp32 weight + gradient + Adam's two moments
# The causal-LM architectures whose loss, in each transformers release a training image runs (training/requirements.txt
# pins it per image Python), upcasts the logits to fp32 before the cross-entropy. 4.46.3: Llama and Qwen2 through
# ForCausalLMLoss (src/transformers/loss/loss_utils.py: logits.float(), then logits[..., :-1, :].contiguous()),
# Mistral in its own forward (models/mistral/modeling_mistral.py, MistralForCausalLM: logits.float()), GPT-J in the
# model (models/gptj/modeling_gptj.py: self.lm_head(hidden_states).to(torch.float32)); GPT-NeoX, OPT and BLOOM take
# CrossEntropyLoss on the logits as computed. 4.21.0 (the SMP v1 image): GPT-J alone, the same line.
LOSS_UPCASTS_TO_FP32 = {
    "4.21.0": frozenset({"gptj"}),
    "4.46.3": frozenset({"llama", "mistral", "qwen2", "gptj"}),
}
SHARD_GIB = 5e9 / 2**30  # transformers' save_pretrained max_shard_size default, "5GB"
# The base sharded over one GPU is the base whole on every GPU (SMP v2 reads hybrid_shard_degree 1 as FSDP's NO_SHARD:
# distributed-model-parallel-v2-reference): the DDP run's smp.hybrid_shard_degree.
DDP_SHARD_DEGREE = 1
# FSDP gathers the transformer layer it computes and prefetches the next (forward and backward prefetch).
GATHERED_LAYERS = 2

ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class LoraConfig(StrictModel):
    """LoRA's settings (training.method lora or qlora): which linear layers get adapters, their rank and scaling."""

    r: int = Field(default=16, ge=1, le=1024, description="the adapters' rank")
    alpha: int = Field(default=32, ge=1, description="scaling: each adapter's update is multiplied by alpha / r")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="dropout on each adapter's input")
    target_modules: tuple[ModuleName, ...] | None = Field(
        default=None,
        min_length=1,
        description="the linear layers to adapt, by name (q_proj, v_proj, ...); default: every attention and MLP "
        "projection of the architecture (training/finetune/adapters.py LORA_TARGETS)",
    )

    @property
    def target_modules_flag(self) -> str:
        """train.py's --lora_target_modules."""
        return ",".join(self.target_modules) if self.target_modules else "auto"


def normalize(data: Any) -> Any:
    """Before validation: an adapter method runs in SMP v2's image line. Without a `smp` section it runs under DDP
    (hybrid_shard_degree 1: the base whole on every GPU); with one (lora only), over a base FSDP shards, where
    version 2 and tensor_parallel_degree 1 are the defaults, the only values that apply."""
    if not isinstance(data, dict) or data.get("method") not in ("lora", "qlora"):
        return data
    if "smp" not in data:
        return {**data, "smp": {"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": DDP_SHARD_DEGREE}}
    if data["method"] == "qlora":
        raise ValueError(
            "smp: training.method qlora keeps the base in bitsandbytes' 4-bit weights, which FSDP does not shard in "
            "this stack, so QLoRA runs only with PyTorch DDP (the whole 4-bit base on every GPU): remove "
            "training.smp, or use training.method lora with training.smp {version: 2, hybrid_shard_degree: N} to "
            "shard a bf16 base"
        )
    smp = data["smp"]
    if not isinstance(smp, dict):
        return data  # the field's own validation says what it should be
    degree = smp.get("hybrid_shard_degree")
    if degree == DDP_SHARD_DEGREE and not isinstance(degree, bool):
        raise ValueError(
            "smp.hybrid_shard_degree 1 keeps the whole base on every GPU, which is what training.method lora does "
            "without training.smp (PyTorch DDP, no SMP): remove training.smp, or shard the base over 2 or more GPUs "
            "(0: over all of them)"
        )
    return {**data, "smp": {"version": 2, "tensor_parallel_degree": 1, **smp}}


def _projections(model: Any) -> dict[str, tuple[int, int]]:
    """(inputs, outputs) of each linear layer of a transformer block, from the catalog's figures."""
    h, heads, kv = model.hidden_size, model.attention_heads, model.kv_heads
    head_dim, inner = h // heads, model.intermediate_size or 4 * h
    attention = {
        "q_proj": (h, heads * head_dim),
        "k_proj": (h, kv * head_dim),
        "v_proj": (h, kv * head_dim),
        "o_proj": (heads * head_dim, h),
        "out_proj": (h, h),
        "query_key_value": (h, 3 * h),
        "dense": (h, h),
    }
    mlp = {
        "gate_proj": (h, inner),
        "up_proj": (h, inner),
        "down_proj": (inner, h),
        "fc_in": (h, inner),
        "fc_out": (inner, h),
        "fc1": (h, inner),
        "fc2": (inner, h),
        "dense_h_to_4h": (h, inner),
        "dense_4h_to_h": (inner, h),
    }
    return {**attention, **mlp}


def adapter_parameters(model: Any, lora: LoraConfig) -> int:
    targets = resolve_target_modules(model.architecture, lora.target_modules)
    shapes = _projections(model)
    return model.layers * sum(lora.r * sum(shapes[name]) for name in targets)


def embedding_parameters(model: Any) -> int:
    """The token embedding and the LM head (one matrix when tied)."""
    return model.vocab_size * model.hidden_size * (1 if model.tied_embeddings else 2)


def logits_bytes(transformers_version: str, model_type: str, head_dtype: str) -> int:
    """Bytes per logit at the loss's peak: the logits as the LM head computes them (`head_dtype`), the fp32 copy
    where the loss upcasts them, the shifted slice it copies (.contiguous()) and cross_entropy's log-softmax, both in
    the loss's dtype. bf16 logits with an upcasting loss: 2 + 4 + 4 + 4 = 14; without: 2 + 2 + 2 = 6."""
    if transformers_version not in LOSS_UPCASTS_TO_FP32:
        raise ValueError(
            f"transformers {transformers_version} (pinned in training/requirements.txt for the training image): its "
            "causal-LM loss code has not been read for the memory estimate; read each architecture's loss in that "
            "release and add the version to LOSS_UPCASTS_TO_FP32 in core/config/lora_training.py, or pin one listed "
            f"there ({', '.join(sorted(LOSS_UPCASTS_TO_FP32))})"
        )
    head = sizing.BYTES_PER_PARAMETER[head_dtype]
    loss = 4 if model_type in LOSS_UPCASTS_TO_FP32[transformers_version] else head
    upcast_copy = 4 if loss != head else 0
    return head + upcast_copy + 2 * loss


def _logits_head_dtype(training: Any) -> str:
    """What the LM head computes the logits in: the training dtype, or fp32 under QLoRA, whose
    prepare_model_for_kbit_training casts the unquantized LM head to fp32."""
    return "fp32" if training.method == "qlora" else training.precision


def jobs_transformers(training: Any) -> str:
    """The transformers release the training job runs: the lock's pin for its image's Python."""

    python = training_job._python_version(training_framework(training.smp.version)[1])
    return training_job.pinned_version(training_job.TRAINING_REQUIREMENTS, "transformers", python)


def base_weights_gib(model: Any, method: str, precision: str) -> float:
    embeddings = embedding_parameters(model)
    if method == "qlora":
        return ((model.parameters - embeddings) * QLORA_BITS_PER_WEIGHT / 8 + embeddings * 4) / sizing.GIB
    return model.parameters * sizing.BYTES_PER_PARAMETER[precision] / sizing.GIB


def shard_degree(training: Any, hybrid_shard_degree: int | None = None) -> int:
    """The GPUs the frozen base is sharded over: 1 under DDP, else smp.hybrid_shard_degree, or every GPU when 0."""
    degree = training.smp.hybrid_shard_degree if hybrid_shard_degree is None else hybrid_shard_degree
    return degree or training.world_size


def training_fit(training: Any, hybrid_shard_degree: int | None = None) -> sizing.TrainingFit:
    """Memory per GPU (the module's formulas); `hybrid_shard_degree` asks what it would be sharded that way."""
    model, instance = training.catalog_model, training.catalog_instance
    shards = shard_degree(training, hybrid_shard_degree)
    s, b, h, a = training.sequence_length, training.train_batch_size, model.hidden_size, model.attention_heads
    per_layer = s * b * h * (34 + 5 * a * s / h)
    layers = model.layers * 2 * s * b * h + per_layer if training.activation_checkpointing else model.layers * per_layer
    per_logit = logits_bytes(jobs_transformers(training), model.architecture, _logits_head_dtype(training))
    logits = s * b * model.vocab_size * per_logit
    gathered = 0.0
    if shards > 1:
        # FSDP1 does not free the root unit's weights after the forward pass, which the backward pass needs again
        # (torch/distributed/fsdp/_runtime_utils.py, _post_forward_reshard: "Do not free the root's parameters").
        embeddings = embedding_parameters(model)
        layer = (model.parameters - embeddings) / model.layers
        gathered = (GATHERED_LAYERS * layer + embeddings) * sizing.BYTES_PER_PARAMETER[training.precision]
    states = (
        base_weights_gib(model, training.method, training.precision) / shards
        + gathered / sizing.GIB
        + adapter_parameters(model, training.lora) * ADAPTER_STATE_BYTES / sizing.GIB / shards
        + sizing.RUNTIME_OVERHEAD_GIB
    )
    return sizing.TrainingFit(
        model_states_gib=states,
        activations_gib=(layers + logits) / sizing.GIB,
        capacity_gib=instance.gpu.memory_gib * sizing.USABLE_FRACTION,
    )


@dataclass(frozen=True)
class RankZeroHostFit(sizing.HostFit):
    """Host memory when one process (rank 0) holds the weights and every process of the instance its overhead."""

    @property
    def total_gib(self) -> float:
        return self.weights_per_rank_gib + self.ranks * self.overhead_gib

    def describe(self) -> str:
        return (
            f"{self.total_gib:.1f} GiB of {self.capacity_gib:.1f} GiB usable per instance (weights "
            f"{self.weights_per_rank_gib:.1f} + {self.ranks} processes x {self.overhead_gib:.1f}; {self.loading})"
        )


def host_fit(training: Any) -> sizing.HostFit:
    instance = training.catalog_instance
    capacity = instance.host_memory_gib * sizing.USABLE_HOST_FRACTION
    if training.shards_base:
        # AWS's SMP v2 fine-tuning recipe: the other ranks build the model on the meta device and FSDP copies
        # rank 0's weights to them (sync_module_states), so the first instance holds one copy, the others none.
        return RankZeroHostFit(
            sizing.weights_gib(training.catalog_model, training.precision),
            sizing.HOST_OVERHEAD_GIB,
            training.processes,
            capacity,
            f"rank 0 alone reads the weights in {training.precision}; the other ranks build on the meta device and "
            "receive their shards from it",
        )
    weights = sizing.weights_gib(training.catalog_model, "bf16")
    loading = "every rank reads the weights straight into bf16 (from_pretrained, low_cpu_mem_usage)"
    if training.method == "qlora":
        # With a device_map, from_pretrained quantizes each checkpoint shard onto the GPU as it reads it: one shard
        # (save_pretrained's default max_shard_size, 5 GB) at a time in host memory.
        weights = min(weights, SHARD_GIB)
        loading = "every rank quantizes one checkpoint shard at a time onto its GPU"
    return sizing.HostFit(weights, sizing.HOST_OVERHEAD_GIB, training.processes, capacity, loading)


def check_sharding(training: Any) -> None:
    """What LoRA over a sharded base needs of the `smp` section, beyond SMP v2's own layout rules."""
    smp = training.smp
    if smp.version != 2:
        raise ValueError(
            f"smp.version {smp.version}: training.method {training.method} shards the base with SMP v2 (FSDP); "
            "SMP v1's image has Python 3.9, where peft does not install (training/requirements.in): set "
            "smp.version 2"
        )
    if smp.tensor_parallel_degree > 1:
        raise ValueError(
            f"smp.tensor_parallel_degree {smp.tensor_parallel_degree}: SMP v2's tensor parallelism replaces the "
            "model's Hugging Face attention and MLP modules with its own (torch.sagemaker.transform), so PEFT finds "
            "none of the layers its adapters attach to, and AWS documents SMP v2 fine-tuning with FSDP sharding only "
            "(model-parallel-core-features-v2-fine-tuning): remove tensor_parallel_degree and shard the base with "
            "hybrid_shard_degree"
        )
    if training.world_size == 1:
        raise ValueError(
            f"smp: {training.instance_count} x {training.instance_type} runs one process, so there is no GPU to "
            "shard the base over: remove training.smp (the base whole on the GPU), or use more GPUs"
        )
    if training.catalog_model.tied_embeddings:
        # train.py refuses it at start-up (finetune/backends/lora_fsdp.py create_model), after the job has started.
        raise ValueError(
            f"smp: {training.model} ties its input and output embeddings (tie_word_embeddings), and train.py's LoRA "
            "over a base FSDP shards refuses such a model: the ranks that build it on the meta device would hold the "
            "two as separate tensors, so FSDP's shards would differ between ranks. Remove training.smp to train "
            "under DDP (the whole base on every GPU, for a base one GPU holds), or choose a model without tied "
            "embeddings"
        )


def _fitting_shard_degree(training: Any) -> int | None:
    """The smallest hybrid_shard_degree (a divisor of the world size) under which training fits."""
    world = training.world_size
    for degree in [d for d in range(2, world + 1) if world % d == 0]:
        if training_fit(training, degree).fits:
            return degree
    return None


def check(training: Any) -> None:
    """What an adapter-method stage must satisfy, in this order; ValueError naming the field and the fix."""
    _check_target_modules(training)
    _check_processes(training)
    _check_precision(training)
    _check_fits_gpus(training)


def _check_target_modules(training: Any) -> None:
    model, method = training.catalog_model, training.method
    try:
        resolve_target_modules(model.architecture, training.lora.target_modules)
    except ValueError as error:
        raise ValueError(f"lora.target_modules: {error}") from None
    if model.architecture not in LORA_TARGETS:
        raise ValueError(
            f"training.method {method}: no LoRA layer map for {model.architecture} models ({training.model}); "
            f"supported: {', '.join(sorted(LORA_TARGETS))}"
        )


def _check_processes(training: Any) -> None:
    instance = training.catalog_instance
    if training.processes > instance.gpu_count:
        raise ValueError(
            f"processes_per_host {training.processes} is more than the {instance.gpu_count} GPU(s) of "
            f"{training.instance_type}; the job runs one process per GPU"
        )
    if training.world_size > 1 and training.processes != instance.gpu_count:
        raise ValueError(
            f"processes_per_host {training.processes}: with more than one process the job runs under torchrun (the "
            f"estimator's torch_distributed), which starts one process per GPU, {instance.gpu_count} on "
            f"{training.instance_type}; leave processes_per_host unset, or 1 on a single instance"
        )


def _check_precision(training: Any) -> None:
    """QLoRA computes in bf16, which needs Ampere or newer GPUs for training and the Evaluate step."""
    instance = training.catalog_instance
    if training.method == "qlora":
        for field in ("instance_type", "evaluate_instance_type"):
            catalog = INSTANCE_TYPES[getattr(training, field)]
            if not catalog.gpu.bf16:
                raise ValueError(
                    f"{field}: training.method qlora computes in bf16 over bitsandbytes' 4-bit weights (QLoRA's "
                    f"recipe), which needs Ampere or newer GPUs; {catalog.name} has {catalog.gpu.model}. Use a "
                    "g5/g6/p4d-class instance type, or training.method lora"
                )
        if training.precision != "bf16":
            raise ValueError("precision: training.method qlora computes in bf16; set precision bf16")
    if training.precision == "bf16" and not instance.gpu.bf16:
        raise ValueError(f"precision bf16 needs A100/H100-class (Ampere or newer) GPUs; {instance.gpus} has none")


def _check_fits_gpus(training: Any) -> None:
    """The estimated GPU memory of the run against the GPUs, with the way out that fits."""
    instance, method = training.catalog_instance, training.method
    fit = training_fit(training)
    if not fit.fits and training.shards_base:
        degree = shard_degree(training)
        raise ValueError(
            f"{training.model} {method} training over a base sharded {degree} ways does not fit "
            f"{training.instance_count} x {training.instance_type} ({instance.gpus}): estimated {fit.describe()}. "
            "Lower train_batch_size or sequence_length (with gradient_accumulation), shard over more GPUs "
            f"(smp.hybrid_shard_degree: a larger divisor of the {training.world_size} processes, or 0 for all of "
            "them; more instances with instance_count), or use larger GPUs"
        )
    if not fit.fits:
        sharded = _fitting_shard_degree(training) if method == "lora" else None
        way_out = (
            f"shard the base: training.smp {{version: 2, hybrid_shard_degree: {sharded}}} fits"
            + (" (with precision bf16: SMP v2 does not train in fp16)" if training.precision == "fp16" else "")
            if sharded is not None
            else "shard the base over more GPUs: training.smp {version: 2, hybrid_shard_degree: N} with more "
            "instances (instance_count) or larger GPUs"
            if method == "lora"
            else "training.method lora with training.smp {version: 2, hybrid_shard_degree: N} shards a bf16 base"
        )
        cheaper = ", training.method qlora (4-bit base weights)" if method == "lora" else ""
        raise ValueError(
            f"{training.model} {method} training does not fit {training.instance_type} ({instance.gpus}): DDP keeps "
            f"the whole base model on every GPU; estimated {fit.describe()}. Lower train_batch_size or "
            f"sequence_length (with gradient_accumulation), use larger GPUs{cheaper}, or {way_out}"
        )


def check_host(training: Any) -> None:
    """Whether the host's memory holds what each process loads (checked after core/config/lora_evaluation.py)."""
    instance, host = training.catalog_instance, host_fit(training)
    if not host.fits:
        fix = (
            "use an instance type with more memory"
            if training.shards_base
            else "lower processes_per_host, or use an instance type with more memory per GPU"
        )
        raise ValueError(
            f"{training.model} cannot load on {training.instance_type} ({instance.host_memory_gib} GiB of host "
            f"memory) with {training.processes} processes per host: needs {host.describe()}; {fix}"
        )
