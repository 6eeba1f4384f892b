"""LoRA adapters served over one base model: `serving.components[].adapters`, their checks and their GPU share.

How they run: each adapter is a SageMaker adapter inference component (CreateInferenceComponent with
Specification.BaseInferenceComponentName and Container.ArtifactUrl), attached to the inference component that serves
its base model. SageMaker loads the adapter into that component's copies; it reserves nothing of its own. The base
component's LMI container runs vLLM with LoRA enabled (option.enable_lora, max_loras, max_lora_rank, max_cpu_loras),
and a request names its adapter by the adapter component's name, InvokeEndpoint's InferenceComponentName (SageMaker
passes it to LMI as the X-Amzn-SageMaker-Adapter-Identifier header, djl_python/async_utils.py).

Why components, not adapters in the model folder (LMI's `adapters/` directory, read once at start): an adapter
component is a resource of its own, so promoting a newly approved adapter updates that component alone; the base
component, its Model and the endpoint config stay as they are and their copies keep serving. An adapter in the model
folder would change the base Model's data and replace every copy.

GPU memory (vLLM's LoRAModelManager): the engine wraps every LoRA-capable linear layer of the model (the attention
and MLP projections) and allocates, per layer, max_loras slots of max_lora_rank x (inputs + outputs) weights in the
model's dtype, whatever the adapters' own target modules: adapters in use are copied into those slots. So the share
is max_loras x max_lora_rank x the LoRA layer widths x layers x 2 bytes, on every GPU (counted whole: vLLM shards
part of it with tensor parallelism, which this overstates). Adapters beyond max_loras wait in host memory
(max_cpu_loras, set to the number of adapters) and are swapped in when a batch asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from core import sizing
from core.catalog.architectures import ARCHITECTURES
from core.catalog.models import MODELS
from core.config.fields import (
    MODEL_PACKAGE_ARN_PATTERN,
    MODEL_PACKAGE_GROUP_PATTERN,
    PROMOTED_FROM_STAGE,
    PROMOTED_VERSION,
    StageName,
    StrictModel,
    check_location_fields,
)
from training.finetune.adapters import ADAPTER_ARCHIVE_FILE, LORA_TARGETS, resolve_target_modules

if TYPE_CHECKING:
    from core.config.components import ComponentConfig
    from core.config.serving import ServingConfig

# vLLM's MaxLoRARanks (vllm/config/lora.py): the ranks its kernels are built for; an adapter's rank must not exceed
# the engine's max_lora_rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The architectures whose vLLM model class implements SupportsLoRA (core/catalog/architectures.py vllm_lora, with its
# source); vLLM refuses enable_lora for the others.
VLLM_LORA_ARCHITECTURES = tuple(name for name, record in ARCHITECTURES.items() if record.vllm_lora)
# What an adapter component's ArtifactUrl names: "a single gzip compressed tar archive (.tar.gz suffix)"
# (InferenceComponentContainerSpecification.ArtifactUrl), adapter_config.json and its weights at the top. The LoRA
# training job writes it into the adapter folder it registers (training/finetune/adapters.py write_adapter_archive).
ADAPTER_ARCHIVE = ADAPTER_ARCHIVE_FILE
LORA_BYTES = 2  # vLLM's lora_dtype 'auto': the model's dtype, fp16 or bf16

AdapterName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9](-?[a-z0-9])*$", max_length=17)]
ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
S3Archive = Annotated[str, StringConstraints(pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/(.+/)?[^/]+\.tar\.gz$")]
MaxLoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]


class AdapterWeightsConfig(StrictModel):
    """Where an adapter's archive comes from. A model package is read when the stack deploys, never at synth."""

    source: Literal["latest_approved", "model_package", "s3", "promoted"] = Field(
        default="latest_approved",
        description="'latest_approved': the newest Approved adapter package of model_package_group (default: the "
        "stage's own, which its LoRA fine-tuning registers), looked up on every deploy of a new release; "
        "'model_package': the adapter package model_package_arn; 's3': the archive s3_uri; 'promoted': the newest "
        "Approved adapter of from_stage's group (or its version), copied into this stage when it deploys",
    )
    s3_uri: S3Archive | None = Field(
        default=None,
        description="for source 's3': s3://bucket/key.tar.gz, a gzipped tar of a PEFT adapter folder "
        "(adapter_config.json and adapter_model.safetensors at the top)",
    )
    model_package_arn: str | None = Field(
        default=None,
        pattern=MODEL_PACKAGE_ARN_PATTERN,
        description="for source 'model_package': an adapter package registered by a LoRA fine-tuning pipeline",
    )
    model_package_group: str | None = Field(
        default=None,
        pattern=MODEL_PACKAGE_GROUP_PATTERN,
        description="for source 'latest_approved': a model package group of adapter packages, in the stage's account "
        "and region; default the stage's own",
    )

    from_stage: StageName | None = PROMOTED_FROM_STAGE
    version: int | None = PROMOTED_VERSION

    @model_validator(mode="after")
    def _one_location(self) -> AdapterWeightsConfig:
        if self.source == "s3" and self.s3_uri is None:
            raise ValueError("source 's3' needs s3_uri, the adapter's .tar.gz")
        check_location_fields(self)
        return self

    @property
    def from_stage_training(self) -> bool:
        """Approved packages of the stage's own group: what this stage's LoRA fine-tuning registers."""
        return self.source == "latest_approved" and self.model_package_group is None


class AdapterConfig(StrictModel):
    """One LoRA adapter served over its component's model, invoked by name."""

    name: AdapterName = Field(
        description="the adapter's part of its component name <project>-<stage>-<name>, which requests give as "
        "InferenceComponentName: lowercase letters, digits and single dashes, at most 17 characters"
    )
    weights: AdapterWeightsConfig = Field(default_factory=AdapterWeightsConfig)
    rank: int | None = Field(
        default=None,
        ge=1,
        le=VLLM_LORA_RANKS[-1],
        description="the adapter's LoRA rank (r of its adapter_config.json); default for the stage's own adapters: "
        "training.lora.r. Required otherwise: the engine's max_lora_rank and the GPU share are sized from it",
    )
    target_modules: tuple[ModuleName, ...] | None = Field(
        default=None,
        min_length=1,
        description="the linear layers the adapter adapts; default for the stage's own adapters: training.lora's, "
        "else every attention and MLP projection. Only sizes what the adapter holds in host memory",
    )


@dataclass(frozen=True)
class LoraSlots:
    """The engine's LoRA settings of one base component, from its adapters."""

    adapters: tuple[AdapterConfig, ...]
    max_loras: int  # adapters in one batch: GPU slots
    max_lora_rank: int

    @property
    def max_cpu_loras(self) -> int:
        """Every adapter stays in host memory once loaded (vLLM requires at least max_loras)."""
        return max(len(self.adapters), self.max_loras)

    def properties(self) -> dict[str, str]:
        """The serving.properties keys LMI passes to vLLM (serving/docs/adapters.md, "Configurations")."""
        return {
            "option.enable_lora": "true",
            "option.max_loras": str(self.max_loras),
            "option.max_lora_rank": str(self.max_lora_rank),
            "option.max_cpu_loras": str(self.max_cpu_loras),
        }


def slots(component: ComponentConfig) -> LoraSlots | None:
    """The LoRA slots a component's adapters need; None without adapters. Unknown ranks are refused in check()."""
    if not component.adapters:
        return None
    ranks = [a.rank for a in component.adapters if a.rank is not None]
    needed = max(ranks, default=VLLM_LORA_RANKS[0])
    rank = component.max_lora_rank or next((r for r in VLLM_LORA_RANKS if r >= needed), VLLM_LORA_RANKS[-1])
    return LoraSlots(component.adapters, component.max_loras or len(component.adapters), rank)


def _widths(model: Any) -> dict[str, int]:
    """(inputs + outputs) of each LoRA-capable linear layer of one transformer block (Llama, Mistral, Qwen2)."""
    h, heads, kv = model.hidden_size, model.attention_heads, model.kv_heads
    head_dim, inner = h // heads, model.intermediate_size or 4 * h
    return {
        "q_proj": h + heads * head_dim,
        "k_proj": h + kv * head_dim,
        "v_proj": h + kv * head_dim,
        "o_proj": heads * head_dim + h,
        "gate_proj": h + inner,
        "up_proj": h + inner,
        "down_proj": inner + h,
    }


def slots_gib(model: Any, lora: LoraSlots) -> float:
    """GPU memory of the engine's LoRA slots, per GPU (counted whole): every LoRA-capable layer gets max_loras slots
    of max_lora_rank, whatever the adapters adapt."""
    widths = sum(_widths(model)[name] for name in LORA_TARGETS[model.architecture])
    return lora.max_loras * lora.max_lora_rank * widths * model.layers * LORA_BYTES / sizing.GIB


def adapter_gib(model: Any, adapter: AdapterConfig) -> float:
    """One adapter's own weights (A and B of each layer it adapts), as the engine holds it in host memory."""
    widths = _widths(model)
    targets = resolve_target_modules(model.architecture, adapter.target_modules)
    return (adapter.rank or 0) * sum(widths[name] for name in targets) * model.layers * LORA_BYTES / sizing.GIB


# --- checks -------------------------------------------------------------------------------------------------------


def check(serving: ServingConfig, servings: dict[str, ServingConfig]) -> None:
    """What vLLM, LMI or SageMaker would refuse, or what could not work, in the components' adapters."""
    names = [c.name for c in serving.components] + [a.name for c in serving.components for a in c.adapters]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"adapters: {', '.join(duplicates)} named more than once among the components and their adapters; each "
            "name is one inference component of the endpoint, which requests address"
        )
    for component in serving.components:
        if component.adapters:
            _check_component(component, servings[component.name])
        elif component.max_loras is not None or component.max_lora_rank is not None:
            raise ValueError(
                f"component {component.name}: max_loras and max_lora_rank size the engine's LoRA slots for adapters; "
                "it has none: add adapters or remove them"
            )


def _check_component(component: ComponentConfig, serving: ServingConfig) -> None:
    where, model = f"component {component.name}", serving.catalog_model
    if serving.engine != "vllm":
        raise ValueError(
            f"{where}: adapters need engine vllm. LMI serves LoRA adapters only with vLLM (djl-serving "
            "serving/docs/adapters.md, 'Backend Support'), and the deepspeed engine's handler (LMI 0.27.0, "
            "model_artifacts/deepspeed) has no adapter API: set engine vllm, or serve the merged weights instead"
        )
    if model.architecture not in VLLM_LORA_ARCHITECTURES:
        lora_models = sorted(n for n, m in MODELS.items() if m.architecture in VLLM_LORA_ARCHITECTURES)
        raise ValueError(
            f"{where}: vLLM serves LoRA adapters only for models whose class supports LoRA; {serving.model} "
            f"({model.architecture}) does not. Catalog models it serves adapters for: {', '.join(lora_models)}"
        )
    for adapter in component.adapters:
        if adapter.rank is None:
            raise ValueError(
                f"{where}: adapter {adapter.name}: rank is required for an adapter this stage's training does not "
                "make: set it to the r of the adapter's adapter_config.json"
            )
        try:
            resolve_target_modules(model.architecture, adapter.target_modules)
        except ValueError as error:
            raise ValueError(f"{where}: adapter {adapter.name}: target_modules: {error}") from None
    lora = serving.lora
    assert lora is not None
    too_high = [f"{a.name} (rank {a.rank})" for a in component.adapters if a.rank > lora.max_lora_rank]
    if too_high:
        raise ValueError(
            f"{where}: max_lora_rank {lora.max_lora_rank} is below the rank of {', '.join(too_high)}: vLLM refuses "
            "to load an adapter of a higher rank than its max_lora_rank; raise max_lora_rank or leave it out"
        )
    if lora.max_loras > len(component.adapters):
        raise ValueError(
            f"{where}: max_loras {lora.max_loras} reserves GPU slots for more adapters than its "
            f"{len(component.adapters)}; use at most {len(component.adapters)}"
        )
    fit = serving.fit()
    if not fit.fits:
        raise ValueError(
            f"{where}: {serving.model} {serving.dtype} with its adapters' LoRA slots does not fit "
            f"{serving.instance_type} ({serving.catalog_instance.gpus}): needs {fit.describe()}. Lower max_loras "
            f"({lora.max_loras} adapters in one batch) or max_lora_rank ({lora.max_lora_rank}), shrink the KV cache "
            "(max_batch_size, context_tokens), or use larger GPUs"
        )
