"""Training with LoRA / QLoRA adapters: the `training.lora` settings, and the checks and memory estimates of a stage
whose `training.method` is lora or qlora.

How such a job runs (training/finetune/backends/lora.py): train.py with PEFT on plain PyTorch, one process per GPU
under torchrun (DDP), in the SMP v2 image (PyTorch 2.4.1, Python 3.11, whose lock lines pin transformers 4.46.3,
peft and bitsandbytes) without SMP itself; the prepare and evaluate steps run in the same image, since the current
models' tokenizers and configs need that transformers. So the stage's `smp` section does not apply and is refused,
and the config is given SMP v2's image line (smp.version 2) for the image lookups, region checks and IAM.

Memory per GPU (DDP keeps a whole copy of the frozen base on every GPU):
    base weights  = parameters x 2 bytes (bf16/fp16; 4 in fp32); QLoRA: the linear layers in 4-bit NF4 with double
                    quantization (4.127 bits per weight, the QLoRA paper), while the token embedding and the LM head
                    stay unquantized and PEFT's prepare_model_for_kbit_training casts them to fp32 (4 bytes)
    adapters      = r x (inputs + outputs) of each adapted projection, in every layer, x 16 bytes (fp32 weights,
                    gradients and two Adam moments)
    activations   = sizing's checkpointed per-layer estimate, plus the logits: sequence x batch x vocabulary x 10 bytes
                    (half-precision logits, their fp32 copy for the loss, and its gradient), which dominates with
                    128K-152K vocabularies
    runtime       = sizing.RUNTIME_OVERHEAD_GIB
Host memory while loading: each process reads the weights straight into the training dtype (from_pretrained with
low_cpu_mem_usage): one bf16 copy per process at most; QLoRA quantizes shard by shard onto the GPU.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from stacks import sizing
from stacks.catalog.instances import INSTANCE_TYPES
from stacks.config.fields import _Strict
from training.finetune.adapters import LORA_TARGETS, resolve_target_modules

QLORA_BITS_PER_WEIGHT = 4.127  # NF4 plus double-quantized constants (Dettmers et al. 2023, section 3)
ADAPTER_STATE_BYTES = 16  # fp32 weight + gradient + Adam's two moments
LOGITS_BYTES = 10  # half-precision logits, the fp32 copy the loss takes, and its gradient
SHARD_GIB = 5e9 / 2**30  # transformers' save_pretrained max_shard_size default, "5GB"

ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class LoraConfig(_Strict):
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
    """Before validation: an adapter method runs in SMP v2's image line without SMP; a `smp` section is refused."""
    if not isinstance(data, dict) or data.get("method") not in ("lora", "qlora"):
        return data
    if "smp" in data:
        raise ValueError(
            f"smp: training.method {data['method']} trains PEFT adapters with PyTorch DDP, one process per GPU, not "
            "with SMP (SMP v2's tensor parallelism replaces the attention and MLP modules the adapters attach to): "
            "remove training.smp, or use training.method full"
        )
    return {**data, "smp": {"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 0}}


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


def base_weights_gib(model: Any, method: str, precision: str) -> float:
    embeddings = model.vocab_size * model.hidden_size * (1 if model.tied_embeddings else 2)
    if method == "qlora":
        return ((model.parameters - embeddings) * QLORA_BITS_PER_WEIGHT / 8 + embeddings * 4) / sizing.GIB
    return model.parameters * sizing.BYTES_PER_PARAMETER[precision] / sizing.GIB


def training_fit(training: Any) -> sizing.TrainingFit:
    model, instance = training.catalog_model, training.catalog_instance
    s, b, h, a = training.sequence_length, training.train_batch_size, model.hidden_size, model.attention_heads
    per_layer = s * b * h * (34 + 5 * a * s / h)
    layers = model.layers * 2 * s * b * h + per_layer if training.activation_checkpointing else model.layers * per_layer
    logits = s * b * model.vocab_size * LOGITS_BYTES
    states = (
        base_weights_gib(model, training.method, training.precision)
        + adapter_parameters(model, training.lora) * ADAPTER_STATE_BYTES / sizing.GIB
        + sizing.RUNTIME_OVERHEAD_GIB
    )
    return sizing.TrainingFit(
        model_states_gib=states,
        activations_gib=(layers + logits) / sizing.GIB,
        capacity_gib=instance.gpu.memory_gib * sizing.USABLE_FRACTION,
    )


def host_fit(training: Any) -> sizing.HostFit:
    instance = training.catalog_instance
    weights = sizing.weights_gib(training.catalog_model, "bf16")
    loading = "every rank reads the weights straight into bf16 (from_pretrained, low_cpu_mem_usage)"
    if training.method == "qlora":
        # With a device_map, from_pretrained quantizes each checkpoint shard onto the GPU as it reads it: one shard
        # (save_pretrained's default max_shard_size, 5 GB) at a time in host memory.
        weights = min(weights, SHARD_GIB)
        loading = "every rank quantizes one checkpoint shard at a time onto its GPU"
    return sizing.HostFit(
        weights,
        sizing.HOST_OVERHEAD_GIB,
        training.processes,
        instance.host_memory_gib * sizing.USABLE_HOST_FRACTION,
        loading,
    )


def check(training: Any) -> None:
    """What an adapter-method stage must satisfy; ValueError naming the field and the fix."""
    model, instance, method = training.catalog_model, training.catalog_instance, training.method
    try:
        resolve_target_modules(model.architecture, training.lora.target_modules)
    except ValueError as error:
        raise ValueError(f"lora.target_modules: {error}") from None
    if model.architecture not in LORA_TARGETS:
        raise ValueError(
            f"training.method {method}: no LoRA layer map for {model.architecture} models ({training.model}); "
            f"supported: {', '.join(sorted(LORA_TARGETS))}"
        )
    if training.processes > instance.gpu_count:
        raise ValueError(
            f"processes_per_host {training.processes} is more than the {instance.gpu_count} GPU(s) of "
            f"{training.instance_type}; DDP runs one process per GPU"
        )
    if training.world_size > 1 and training.processes != instance.gpu_count:
        raise ValueError(
            f"processes_per_host {training.processes}: with more than one process the job runs under torchrun (the "
            f"estimator's torch_distributed), which starts one process per GPU, {instance.gpu_count} on "
            f"{training.instance_type}; leave processes_per_host unset, or 1 on a single instance"
        )
    if method == "qlora":
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
    fit = training_fit(training)
    if not fit.fits:
        cheaper = " or training.method qlora (4-bit base weights)" if method == "lora" else ""
        raise ValueError(
            f"{training.model} {method} training does not fit {training.instance_type} ({instance.gpus}): DDP keeps "
            f"the whole base model on every GPU; estimated {fit.describe()}. Lower train_batch_size or "
            f"sequence_length (with gradient_accumulation), use larger GPUs{cheaper} (sharding the base over GPUs "
            "with FSDP is not offered for adapters yet)"
        )
    evaluator = INSTANCE_TYPES[training.evaluate_instance_type]
    # evaluate.py puts the base (bf16 as staged; 4-bit for QLoRA) with the adapter on one GPU.
    needed = base_weights_gib(model, method, "bf16") + sizing.RUNTIME_OVERHEAD_GIB
    if needed > evaluator.gpu.memory_gib * sizing.USABLE_FRACTION:
        raise ValueError(
            f"evaluate_instance_type: the Evaluate step holds {training.model}'s base weights and the adapter on one "
            f"GPU, about {needed:.1f} GiB, more than the {evaluator.gpu.memory_gib * sizing.USABLE_FRACTION:.1f} GiB "
            f"usable of {evaluator.name}'s {evaluator.gpu.model}; choose an instance type with a larger GPU"
        )
    host = host_fit(training)
    if not host.fits:
        raise ValueError(
            f"{training.model} cannot load on {training.instance_type} ({instance.host_memory_gib} GiB of host "
            f"memory) with {training.processes} processes per host: needs {host.describe()}; lower "
            "processes_per_host, or use an instance type with more memory per GPU"
        )
