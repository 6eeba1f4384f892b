"""Serving: one LMI endpoint per stage."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PrivateAttr, StringConstraints, ValidationError, model_validator

from core import api_limits, sizing
from core.catalog import images, inference_hosts
from core.catalog.instances import INSTANCE_TYPES
from core.catalog.models import (
    FOLLOWED_BRANCH,
    LMI_DEEPSPEED_TRANSFORMERS,
    MODELS,
    DeepSpeedCheckpoint,
    StagedWeights,
    check_commit,
    unpinned_pickles,
)
from core.config import components, lora_serving
from core.config.components import AutoscalingConfig, ComponentConfig
from core.config.fields import (
    MODEL_PACKAGE_ARN_PATTERN,
    MODEL_PACKAGE_GROUP_PATTERN,
    PROMOTED_FROM_STAGE,
    PROMOTED_VERSION,
    InstanceTypeName,
    ModelName,
    StageName,
    StrictModel,
    VpcConfig,
    check_location_fields,
)

S3Prefix = Annotated[str, StringConstraints(pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/(.+/)?$")]
# SageMaker's limits on these (and every other value that reaches an API) are checked by core/api_limits/__init__.py.
TimeoutSeconds = int


class WeightsConfig(StrictModel):
    """Where the served weights come from. Nothing is looked up at synth: an S3 location is fixed here, and a
    model package is read when the stack deploys."""

    source: Literal["pretrained", "s3", "model_package", "latest_approved", "promoted"] = Field(
        default="pretrained",
        description="'pretrained': the stage's staged copy of the model's Hugging Face weights "
        "(models bucket, pretrained/<model>/); 's3': the prefix in s3_uri; 'model_package': the weights of the "
        "registered model package model_package_arn; 'latest_approved': the newest Approved package of "
        "model_package_group (default: the stage's own), looked up on every deploy of a new release; 'promoted': the "
        "newest Approved version of from_stage's group (or its version), copied into this stage's models bucket, "
        "verified and registered in this stage's group when the stack deploys (docs/promotion.md)",
    )
    s3_uri: S3Prefix | None = Field(default=None, description="for source 's3': s3://bucket/prefix/ of an HF folder")
    model_package_arn: str | None = Field(
        default=None,
        pattern=MODEL_PACKAGE_ARN_PATTERN,
        description="for source 'model_package': arn:aws:sagemaker:<region>:<account>:model-package/<group>/<version>",
    )
    model_package_group: str | None = Field(
        default=None,
        pattern=MODEL_PACKAGE_GROUP_PATTERN,
        description="for source 'latest_approved': a model package group of the stage's account and region",
    )
    from_stage: StageName | None = PROMOTED_FROM_STAGE
    version: int | None = PROMOTED_VERSION
    checkpoint: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="a pre-sharded DeepSpeed checkpoint of the model (core/catalog/models.py, e.g. "
        "deepspeed-int8-tp8 of bloom-176b): with source 'pretrained' its staged copy "
        "(pretrained/<model>-<checkpoint>/); with source 's3', what s3_uri holds. Each rank then loads only its shards",
    )
    revision: Annotated[str, AfterValidator(check_commit)] | None = Field(
        default=None,
        description="with source 'pretrained': the commit (40 hex digits) of the repository to stage and serve. "
        "Default: the catalog's (BLOOM's int8 checkpoint), else whatever commit main had when the staging pipeline "
        f"last ran, read from its record ({FOLLOWED_BRANCH}.json) when the stack deploys",
    )
    allow_pickle: bool = Field(
        default=False,
        description="accept PyTorch pickle weights (pytorch_model*.bin, a DeepSpeed checkpoint's .pt shards), which "
        "run code when loaded: staged only when the repository has no safetensors, under pretrained/<model>-pickle/. "
        "Required with a checkpoint: DeepSpeed's pre-sharded checkpoints are pickles. With source 'pretrained', "
        "only from a pinned commit: revision, or the catalog's commit of the checkpoint",
    )

    @model_validator(mode="after")
    def _one_location(self) -> WeightsConfig:
        if self.checkpoint is not None and self.source not in ("pretrained", "s3"):
            raise ValueError(
                f"checkpoint is only used with source 'pretrained' or 's3'; source {self.source!r} serves the "
                "Hugging Face folder the fine-tuning pipeline registered"
            )
        if self.revision is not None and self.source != "pretrained":
            raise ValueError(
                f"revision is only used with source 'pretrained' (the commit the staging pipeline copies); source "
                f"{self.source!r} serves weights the platform does not stage"
            )
        if self.allow_pickle and self.source != "pretrained" and self.checkpoint is None:
            raise ValueError(
                f"allow_pickle is only used with source 'pretrained' or a checkpoint; with source {self.source!r} the "
                "platform stages nothing it could refuse"
            )
        if self.checkpoint is not None and not self.allow_pickle:
            # Every pre-sharded checkpoint of the catalog is torch.save shards (DeepSpeedCheckpoint.pickled); the
            # endpoint unpickles them as they are, so accepting that is the config's explicit choice.
            raise ValueError(
                f"checkpoint {self.checkpoint}: DeepSpeed's pre-sharded checkpoints are PyTorch pickles (.pt shards), "
                "which run code when they are loaded; set allow_pickle: true to accept them from this repository"
            )
        if self.source == "s3" and self.s3_uri is None:
            raise ValueError("source 's3' needs s3_uri")
        check_location_fields(self)
        return self


# AutoscalingConfig and the inference components live in components.py; a component's weights are a WeightsConfig.
ComponentConfig.model_rebuild(_types_namespace={"WeightsConfig": WeightsConfig})


class AlarmsConfig(StrictModel):
    """CloudWatch alarms on the endpoint; errors, latency and disk also roll back a deployment that trips them."""

    latency_p90_seconds: float = Field(default=30.0, gt=0, description="model latency, 90th percentile")
    error_5xx_per_minute: int = Field(default=1, ge=1, description="invocation 5XX errors per minute")
    gpu_memory_percent: float = Field(
        default=95.0,
        gt=0,
        le=100,
        description="GPU memory utilization, any instance; engine deepspeed only, and it notifies without rolling back "
        "(vLLM holds about 90% of each GPU by design)",
    )
    disk_percent: float = Field(default=90.0, gt=0, le=100, description="disk utilization, any instance")
    emails: tuple[Annotated[str, StringConstraints(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")], ...] = Field(
        default=(), description="addresses subscribed to the alarm topic"
    )


class DeploymentConfig(StrictModel):
    """How an endpoint update shifts traffic to the new fleet (blue/green), with automatic rollback on the alarms."""

    traffic: Literal["all_at_once", "canary", "linear"] = "all_at_once"
    step_percent: int = Field(
        default=25, ge=1, description="canary size (at most 50) or linear step (10-50), % of capacity"
    )
    wait_seconds: int = Field(default=600, description="baking time between steps (at most 3600)")
    termination_wait_seconds: int = Field(default=600, description="old fleet kept after the switch (at most 3600)")


class ServingConfig(StrictModel):
    """The stage's LMI endpoint: which model, how it is sharded, on what, and how it is run."""

    engine: Literal["deepspeed", "vllm"] = Field(
        default="deepspeed",
        description="'deepspeed': LMI 0.27.0 with model_artifacts/deepspeed; 'vllm': the current LMI image",
    )
    model: ModelName = Field(default="gpt-j-6b", description="a model of core/catalog/models.py")
    dtype: Literal["fp16", "bf16", "int8"] = Field(
        default="fp16",
        description="weights precision on the GPUs; int8 only from a pre-sharded DeepSpeed checkpoint "
        "(weights.checkpoint)",
    )
    tensor_parallel_degree: int = Field(default=1, ge=1, description="GPUs one model copy is sharded over")
    instance_type: InstanceTypeName = "ml.g5.2xlarge"
    weights: WeightsConfig = Field(default_factory=WeightsConfig)
    max_new_tokens: int = Field(default=256, ge=1, description="cap on new tokens per request")
    max_batch_size: int = Field(default=4, ge=1, description="prompts per request (deepspeed) or running sequences")
    context_tokens: int | None = Field(
        default=None,
        ge=2,
        description="tokens per sequence the engine serves, prompt and new tokens together (vLLM's max_model_len, "
        "the deepspeed handler's context_length); default: the model's whole context (core/catalog/models.py). "
        "The KV cache is sized for max_batch_size sequences this long: lower it to serve a long-context model on "
        "smaller GPUs",
    )
    startup_timeout_seconds: TimeoutSeconds | None = Field(
        default=None,
        description="container start-up health check (loading the delivered weights onto the GPUs); default sized "
        "from the weights",
    )
    download_timeout_seconds: TimeoutSeconds | None = Field(
        default=None,
        description="SageMaker's copy of the model data (the weights, and the deepspeed handler beside them) from S3 "
        "onto each instance, before the container starts; default sized from the weights, at most 3600",
    )
    network_isolation: bool = Field(
        default=True,
        description="run the container without network access (EnableNetworkIsolation): SageMaker delivers the "
        "weights and the handler before it starts, and nothing in it needs the network. false only for a handler "
        "of your own that must call out",
    )
    vpc: VpcConfig | None = Field(
        default=None,
        description="put the endpoint's instances in these subnets, behind these security groups (the Model's "
        "VpcConfig); SageMaker still delivers the model data itself, so an isolated endpoint needs no VPC endpoint "
        "for it",
    )
    volume_size_gib: int | None = Field(
        default=None, description="EBS volume (1-512 GiB); only on instance types without local NVMe storage"
    )
    data_capture_percent: int | None = Field(
        default=None, ge=1, description="capture this % of requests and responses to the data bucket"
    )
    data_capture_expiry_days: int = Field(
        default=30,
        ge=1,
        le=365,
        description="days captured requests and responses are kept under capture/ before S3 deletes them (at most a "
        "year, like the access logs: they are people's prompts)",
    )
    routing: Literal["least_outstanding_requests", "random"] = "least_outstanding_requests"
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    alarms: AlarmsConfig = Field(default_factory=AlarmsConfig)
    deployment: DeploymentConfig = Field(default_factory=DeploymentConfig)
    components: tuple[ComponentConfig, ...] = Field(
        default=(),
        description="inference components: the endpoint holds instances and each component is one model with its own "
        "copies, GPUs and memory, invoked by name (InferenceComponentName <project>-<stage>-<name>); with them "
        "autoscaling.min_instances may be 0 (scale to zero). Empty: one model per instance, blue/green updates",
    )

    # A component's effective config carries the LoRA slots of its adapters (components.component_servings).
    _lora: lora_serving.LoraSlots | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _adapters_need_a_component(cls, data: Any) -> Any:
        if isinstance(data, dict) and "adapters" in data:
            raise ValueError(
                "adapters: LoRA adapters attach to a base model served as an inference component (each adapter is an "
                "adapter component over it): move them under serving.components[].adapters, with a component for "
                "the base model"
            )
        return data

    def attach_lora(self, lora: lora_serving.LoraSlots | None) -> None:
        self._lora = lora

    @property
    def lora(self) -> lora_serving.LoraSlots | None:
        """The engine's LoRA slots: only on a component's effective config, when it has adapters."""
        return self._lora

    @property
    def catalog_model(self):
        return MODELS[self.model]

    @property
    def catalog_instance(self):
        return INSTANCE_TYPES[self.instance_type]

    @property
    def checkpoint(self) -> DeepSpeedCheckpoint | None:
        """The pre-sharded checkpoint served, if any (validated: the model has it)."""
        name = self.weights.checkpoint
        return None if name is None else self.catalog_model.checkpoint(name)

    @property
    def staged_weights(self) -> StagedWeights | None:
        """What the stage's staging pipeline copies for the endpoint: only with weights source 'pretrained'."""
        weights = self.weights
        if weights.source != "pretrained":
            return None
        return self.catalog_model.staged(
            weights.checkpoint, revision=weights.revision, allow_pickle=weights.allow_pickle
        )

    @property
    def served_context(self) -> int:
        """Tokens per sequence: the config's context_tokens, or the model's whole context."""
        return self.context_tokens or self.catalog_model.context_tokens

    def fit(self) -> sizing.ServingFit:
        return sizing.serving_fit(
            self.catalog_model,
            self.dtype,
            self.tensor_parallel_degree,
            self.catalog_instance,
            batch_size=self.max_batch_size,
            tokens=self.served_context,
            lora_gib=lora_serving.slots_gib(self.catalog_model, self._lora) if self._lora else 0.0,
        )

    def host_fit(self) -> sizing.HostFit:
        return sizing.serving_host_fit(
            self.catalog_model,
            self.dtype,
            self.tensor_parallel_degree,
            self.catalog_instance,
            engine=self.engine,
            checkpoint=self.checkpoint,
        )

    @property
    def startup_timeout(self) -> int:
        return self.startup_timeout_seconds or sizing.startup_timeout_seconds(
            self.catalog_model, self.dtype, self.checkpoint
        )

    @property
    def download_timeout(self) -> int:
        return self.download_timeout_seconds or sizing.download_timeout_seconds(
            self.catalog_model, self.dtype, self.checkpoint
        )

    @property
    def inference_ami_version(self) -> str | None:
        """The production variant's InferenceAmiVersion: the host AMI the engine's image needs
        (core/catalog/inference_hosts.py); None leaves SageMaker's default for the instance type."""
        ami = inference_hosts.required_ami(images.lmi_image(self.engine))
        return ami.name if ami else None

    @model_validator(mode="after")
    def _check_host(self) -> ServingConfig:
        """The instance must start the engine's image: the host AMI it needs, GPUs its kernels are built for."""
        image = images.lmi_image(self.engine)
        problem = inference_hosts.host_problem(image, self.instance_type, self.catalog_instance.gpu.model)
        if problem:
            families = sorted(
                {
                    name.split(".")[1]
                    for name, i in INSTANCE_TYPES.items()
                    if not inference_hosts.host_problem(image, name, i.gpu.model)
                }
            )
            raise ValueError(
                f"instance_type {self.instance_type} with engine {self.engine}: {problem}; use an instance type of "
                f"{', '.join(f'ml.{f}' for f in families)}"
                + (", or engine deepspeed" if self.engine != "deepspeed" else "")
            )
        return self

    @model_validator(mode="after")
    def _check_model_fits_instance(self) -> ServingConfig:
        """The model, as configured, serves on the instance. One check each, in this order: the first problem found
        is the one reported."""
        for check in (
            self._check_tensor_parallel_divides_gpus,
            self._check_tensor_parallel_splits_heads,
            self._check_deepspeed_loads_model,
            self._check_context_within_model,
            self._check_bf16_supported,
            self._check_int8_engine,
            self._check_int8_kernels,
            self._check_int8_checkpoint,
            self._check_volume_size_supported,
            self._check_checkpoint,
            self._check_pickles_pinned,
            self._check_fits_gpu_memory,
            self._check_fits_host_memory,
            self._check_room_for_prompt,
        ):
            check()
        return self

    def _check_tensor_parallel_divides_gpus(self) -> None:
        gpus = self.catalog_instance.gpu_count
        tp = self.tensor_parallel_degree
        if tp > gpus or gpus % tp:
            options = [d for d in range(1, gpus + 1) if gpus % d == 0]
            raise ValueError(
                f"tensor_parallel_degree {tp} must divide the {gpus} GPU(s) of {self.instance_type}; "
                f"use one of {options}"
            )

    def _check_tensor_parallel_splits_heads(self) -> None:
        if not sizing.splits_heads(self.catalog_model, self.tensor_parallel_degree, self.engine):
            raise ValueError(self._head_split_problem())

    def _check_deepspeed_loads_model(self) -> None:
        """The DeepSpeed image's transformers can load the model's architecture."""
        model = self.catalog_model
        if self.engine == "deepspeed" and not model.loads_with_transformers(LMI_DEEPSPEED_TRANSFORMERS):
            raise ValueError(
                f"engine deepspeed: the LMI 0.27.0 image ships transformers {LMI_DEEPSPEED_TRANSFORMERS}, which cannot "
                f"load {self.model} (its {model.architecture} config needs transformers {model.min_transformers} or "
                "later); use engine vllm"
            )

    def _check_context_within_model(self) -> None:
        model = self.catalog_model
        if self.context_tokens is not None and self.context_tokens > model.context_tokens:
            raise ValueError(
                f"context_tokens {self.context_tokens} is above the {model.context_tokens}-token context of "
                f"{self.model}: the engine refuses a longer max_model_len than the model's; use at most "
                f"{model.context_tokens}, or leave it out"
            )

    def _check_bf16_supported(self) -> None:
        gpu = self.catalog_instance.gpu
        if self.dtype == "bf16" and not gpu.bf16:
            raise ValueError(f"dtype bf16 needs Ampere or newer GPUs; {gpu.model} has none: use fp16")

    def _check_int8_engine(self) -> None:
        if self.dtype == "int8" and self.engine != "deepspeed":
            raise ValueError("dtype int8 is DeepSpeed's kernel-injected int8; with engine vllm use fp16 or bf16")

    def _check_int8_kernels(self) -> None:
        if self.dtype == "int8" and not self.catalog_model.deepspeed_kernels:
            raise ValueError(f"dtype int8 needs DeepSpeed kernel injection, which has no policy for {self.model}")

    def _check_int8_checkpoint(self) -> None:
        """int8 is served from a pre-sharded checkpoint: DeepSpeed quantizes only while loading checkpoint shards;
        its quantization of a Hugging Face model is disabled (module_inject/containers/base.py,
        apply_weight_quantization), so it would serve garbage."""
        if self.dtype != "int8" or self.weights.checkpoint is not None:
            return
        int8 = [c.name for c in self.catalog_model.checkpoints if c.dtype == "int8"]
        raise ValueError(
            "dtype int8 needs a pre-sharded DeepSpeed checkpoint: DeepSpeed quantizes weights only while it "
            "loads such shards, and would cast Hugging Face weights to int8 without scales; "
            + (
                f"set weights.checkpoint to one of {', '.join(int8)}"
                if int8
                else f"{self.model} has no int8 checkpoint in the catalog: use fp16 or bf16"
            )
        )

    def _check_volume_size_supported(self) -> None:
        if self.volume_size_gib is not None and not self.catalog_instance.volume_size_supported:
            raise ValueError(
                f"volume_size_gib: {self.instance_type} has instance-local NVMe storage and takes no EBS volume; "
                "remove volume_size_gib"
            )

    def _check_fits_gpu_memory(self) -> None:
        """The weights and the KV cache fit the GPUs' memory."""
        instance, tp = self.catalog_instance, self.tensor_parallel_degree
        fit = self.fit()
        if not fit.fits:
            suggestion = sizing.suggest_serving(
                self.catalog_model,
                self.dtype,
                instance,
                self.engine,
                batch_size=self.max_batch_size,
                tokens=self.served_context,
            )
            raise ValueError(
                f"{self.model} {self.dtype} with tensor_parallel_degree {tp} does not fit "
                f"{self.instance_type} ({instance.gpus}): needs "
                f"{fit.describe()}; {suggestion}; or shrink the KV cache, sized for max_batch_size "
                f"{self.max_batch_size} x context_tokens {self.served_context}"
            )

    def _check_fits_host_memory(self) -> None:
        """The engine can load the weights within the host's memory."""
        instance = self.catalog_instance
        host = self.host_fit()
        if not host.fits:
            suggestion = sizing.suggest_host_serving(
                self.catalog_model,
                self.dtype,
                instance,
                engine=self.engine,
                batch_size=self.max_batch_size,
                tokens=self.served_context,
            )
            raise ValueError(
                f"{self.model} {self.dtype} with tensor_parallel_degree {self.tensor_parallel_degree} cannot load on "
                f"{self.instance_type} ({instance.host_memory_gib} GiB of host memory): needs {host.describe()}; "
                f"{suggestion}"
            )

    def _check_room_for_prompt(self) -> None:
        if self.max_new_tokens >= self.served_context:
            raise ValueError(
                f"max_new_tokens {self.max_new_tokens} leaves no room for a prompt in the {self.served_context}-token "
                f"context served of {self.model}"
            )

    def _head_split_problem(self) -> str:
        """Why the tensor parallel degree cannot split the model's attention on this engine, and what can."""
        model, tp = self.catalog_model, self.tensor_parallel_degree
        works = sizing.head_splits(model, self.engine, self.catalog_instance.gpu_count)
        if model.attention_heads % tp:
            why = f"does not divide the {model.attention_heads} attention heads of {self.model}"
        elif self.engine == "vllm":
            # vllm/model_executor/models/llama.py (and qwen2.py), LlamaAttention.__init__.
            why = (
                f"neither divides nor is a multiple of the {model.kv_heads} key/value heads of {self.model} (grouped-"
                "query attention): vLLM splits the key/value heads evenly over the GPUs, or copies each onto a whole "
                "number of them"
            )
        else:
            why = (
                f"does not divide the {model.kv_heads} key/value heads of {self.model} (grouped-query attention): "
                "DeepSpeed's AutoTP gives each GPU whole key/value heads, and would leave some GPUs none"
            )
        return f"tensor_parallel_degree {tp} {why}; on {self.instance_type} use one of {works}"

    def _check_checkpoint(self) -> None:
        """A pre-sharded checkpoint is served exactly as it was made: DeepSpeed, its dtype, its split."""
        name, model = self.weights.checkpoint, self.catalog_model
        if name is None:
            return
        try:
            checkpoint = model.checkpoint(name)
        except KeyError as error:
            raise ValueError(f"weights.checkpoint: {error.args[0]}") from None
        made = (
            f"{name} holds {self.model}'s weights in {checkpoint.dtype}, split for {checkpoint.tensor_parallel_degree} "
            f"tensor-parallel ranks ({checkpoint.hf_id})"
        )
        if self.engine != "deepspeed":
            raise ValueError(f"{made}: only the deepspeed engine loads it; use engine deepspeed or drop checkpoint")
        if self.dtype != checkpoint.dtype:
            raise ValueError(
                f"{made}: DeepSpeed loads its shards as stored, so dtype {self.dtype} cannot be served from it; use "
                f"dtype {checkpoint.dtype}, or drop checkpoint to serve the Hugging Face weights"
            )
        if self.tensor_parallel_degree != checkpoint.tensor_parallel_degree:
            raise ValueError(
                f"{made}: with tensor_parallel_degree {self.tensor_parallel_degree} DeepSpeed would have to merge or "
                f"re-split its stored shards at load, which the checkpoint was not made for; use "
                f"tensor_parallel_degree {checkpoint.tensor_parallel_degree}, or drop checkpoint"
            )

    def _check_pickles_pinned(self) -> None:
        """Pickles are staged only from one reviewed commit: weights.revision, or the catalog's commit of the
        checkpoint (a branch's next commit could run any code on the endpoint)."""
        weights, checkpoint = self.weights, self.checkpoint
        if weights.source != "pretrained" or not weights.allow_pickle:
            return
        if weights.revision is None and (checkpoint is None or checkpoint.revision is None):
            hf_id = self.catalog_model.hf_id if checkpoint is None else checkpoint.hf_id
            raise ValueError("weights.allow_pickle: " + unpinned_pickles(hf_id, "weights.revision"))

    @model_validator(mode="after")
    def _check_components(self) -> ServingConfig:
        components.check(self)
        return self

    def component_servings(self) -> dict[str, ServingConfig]:
        """Each component's effective serving config: the stage's, with what the component sets. Validated like a
        stage's own (the model fits a GPU share, the weights source is consistent); a problem names the component."""
        # The stage's scaling and deployment belong to the endpoint, not to one model: checked above, not per component.
        base = self.model_dump(exclude={"components", "autoscaling", "deployment"})
        found = {}
        for component in self.components:
            try:
                found[component.name] = ServingConfig.model_validate({**base, **component.overrides()})
            except ValidationError as error:
                problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
                raise ValueError(f"component {component.name}: {problems}") from None
            # The engine's LoRA slots belong to the base model's copies: sizing and serving.properties read them here.
            found[component.name].attach_lora(lora_serving.slots(component))
        return found

    @model_validator(mode="after")
    def _check_api_limits(self) -> ServingConfig:
        """What SageMaker's APIs would refuse when the stack deploys (core/api_limits/rules.py); last, as the values
        sent are derived from a config the checks above found consistent."""
        problems = api_limits.check("serving", self)
        if problems:
            raise ValueError("; ".join(problems))
        return self
