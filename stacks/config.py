"""The platform's configuration: one YAML file describing every environment, loaded into typed, frozen models.

These classes are the documentation of what can be configured. Loading validates everything before any construct is
built; a bad value fails with the file, the field path, the value and what would be accepted. Unknown keys are errors.
Only `app.py` calls `load_config`; stacks and constructs receive the typed objects.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from stacks import sizing
from stacks.catalog.instances import INSTANCE_TYPES
from stacks.catalog.models import MODELS, DeepSpeedCheckpoint, StagedWeights

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"


class ConfigError(ValueError):
    """An invalid configuration file, with one line per problem."""


# ---------------------------------------------------------------------------------------------------------------
# Field types: each validator's message says what is accepted.


def _aws_regions() -> dict[str, str]:
    """Region name -> partition, from the CDK's own region facts (no network, same list the CDK uses)."""
    from aws_cdk.region_info import RegionInfo

    return {r.name: r.partition for r in RegionInfo.regions if r.partition}


def _check_region(value: str) -> str:
    regions = _aws_regions()
    if value not in regions:
        close = difflib.get_close_matches(value, regions, n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else f"known regions: {', '.join(sorted(regions))}"
        raise ValueError(f"not an AWS region; {hint}")
    return value


def _check_account(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(
            "an account id must be a quoted string of 12 digits: YAML reads an unquoted number as an integer "
            "and drops its leading zeros"
        )
    if isinstance(value, str) and not re.fullmatch(r"\d{12}", value):
        raise ValueError("an account id is exactly 12 digits, for example '123456789012'")
    return value


def _check_instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        close = difflib.get_close_matches(value, INSTANCE_TYPES, n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(f"not a supported GPU instance type; {hint}supported: {', '.join(INSTANCE_TYPES)}")
    return value


def _check_name(kind: str, max_len: int):
    def check(value: str) -> str:
        if not re.fullmatch(rf"[a-z][a-z0-9-]{{0,{max_len - 1}}}", value) or value.endswith("-"):
            raise ValueError(
                f"{kind} names are lowercase letters, digits and '-', start with a letter, do not end with '-', "
                f"and have at most {max_len} characters (they become part of stack and resource names)"
            )
        return value

    return check


def _check_tag_key(value: str) -> str:
    if not 1 <= len(value) <= 128 or not re.fullmatch(r"[\w .:/=+\-@]+", value):
        raise ValueError("tag keys have 1-128 characters: letters, digits, spaces and _ . : / = + - @")
    if value.lower().startswith("aws:"):
        raise ValueError("tag keys starting with 'aws:' are reserved by AWS")
    return value


def _check_tag_value(value: str) -> str:
    if len(value) > 256 or not re.fullmatch(r"[\w .:/=+\-@]*", value):
        raise ValueError("tag values have at most 256 characters: letters, digits, spaces and _ . : / = + - @")
    return value


AccountId = Annotated[str, BeforeValidator(_check_account)]
Region = Annotated[str, AfterValidator(_check_region)]
InstanceTypeName = Annotated[str, AfterValidator(_check_instance_type)]
StageName = Annotated[str, AfterValidator(_check_name("stage", 20))]
ProjectName = Annotated[str, AfterValidator(_check_name("project", 24))]
Tags = dict[Annotated[str, AfterValidator(_check_tag_key)], Annotated[str, AfterValidator(_check_tag_value)]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# ---------------------------------------------------------------------------------------------------------------
# Serving: one LMI endpoint per stage.


def _check_model(value: str) -> str:
    if value not in MODELS:
        close = difflib.get_close_matches(value, MODELS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ValueError(f"not a known model; {hint}known: {', '.join(MODELS)}")
    return value


ModelName = Annotated[str, AfterValidator(_check_model)]
S3Prefix = Annotated[str, StringConstraints(pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/(.+/)?$")]
TimeoutSeconds = Annotated[int, Field(ge=60, le=3600)]


class WeightsConfig(_Strict):
    """Where the served weights come from. Nothing is looked up at synth: an S3 location is fixed here, and a
    model package is read when the stack deploys."""

    source: Literal["pretrained", "s3", "model_package", "latest_approved"] = Field(
        default="pretrained",
        description="'pretrained': the stage's staged copy of the model's Hugging Face weights "
        "(models bucket, pretrained/<model>/); 's3': the prefix in s3_uri; 'model_package': the weights of the "
        "registered model package model_package_arn; 'latest_approved': the newest Approved package of "
        "model_package_group (default: the stage's own), looked up on every deploy of a new release",
    )
    s3_uri: S3Prefix | None = Field(default=None, description="for source 's3': s3://bucket/prefix/ of an HF folder")
    model_package_arn: str | None = Field(
        default=None,
        pattern=r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package/[A-Za-z0-9-]{1,63}/\d+$",
        description="for source 'model_package': arn:aws:sagemaker:<region>:<account>:model-package/<group>/<version>",
    )
    model_package_group: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9](-*[A-Za-z0-9]){0,62}$",
        description="for source 'latest_approved': a model package group of the stage's account and region",
    )
    checkpoint: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="a pre-sharded DeepSpeed checkpoint of the model (stacks/catalog/models.py, e.g. "
        "deepspeed-int8-tp8 of bloom-176b): with source 'pretrained' its staged copy "
        "(pretrained/<model>-<checkpoint>/); with source 's3', what s3_uri holds. Each rank then loads only its shards",
    )

    @model_validator(mode="after")
    def _one_location(self) -> WeightsConfig:
        if self.checkpoint is not None and self.source not in ("pretrained", "s3"):
            raise ValueError(
                f"checkpoint is only used with source 'pretrained' or 's3'; source {self.source!r} serves the "
                "Hugging Face folder the fine-tuning pipeline registered"
            )
        owners = {"s3_uri": "s3", "model_package_arn": "model_package", "model_package_group": "latest_approved"}
        if self.source == "s3" and self.s3_uri is None:
            raise ValueError("source 's3' needs s3_uri")
        if self.source == "model_package" and self.model_package_arn is None:
            raise ValueError("source 'model_package' needs model_package_arn")
        for name, owner in owners.items():
            if getattr(self, name) is not None and self.source != owner:
                raise ValueError(f"{name} is only used with source {owner!r}")
        return self


class AutoscalingConfig(_Strict):
    """Target tracking on invocations per instance."""

    min_instances: int = Field(default=1, ge=1, description="never fewer instances (an idle endpoint still bills)")
    max_instances: int = Field(default=1, ge=1, description="never more instances")
    invocations_per_instance_per_minute: int = Field(
        default=60, ge=1, description="scale out above this many invocations per instance per minute"
    )
    scale_out_cooldown_seconds: int = Field(default=300, ge=0, description="wait after adding instances")
    scale_in_cooldown_seconds: int = Field(default=900, ge=0, description="wait after removing instances")

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingConfig:
        if self.min_instances > self.max_instances:
            raise ValueError(f"min_instances {self.min_instances} is above max_instances {self.max_instances}")
        return self


class AlarmsConfig(_Strict):
    """CloudWatch alarms on the endpoint; they also roll back a deployment that trips them."""

    latency_p90_seconds: float = Field(default=30.0, gt=0, description="model latency, 90th percentile")
    error_5xx_per_minute: int = Field(default=1, ge=1, description="invocation 5XX errors per minute")
    gpu_memory_percent: float = Field(default=95.0, gt=0, le=100, description="GPU memory utilization, any instance")
    disk_percent: float = Field(default=90.0, gt=0, le=100, description="disk utilization, any instance")
    emails: tuple[Annotated[str, StringConstraints(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")], ...] = Field(
        default=(), description="addresses subscribed to the alarm topic"
    )


class DeploymentConfig(_Strict):
    """How an endpoint update shifts traffic to the new fleet (blue/green), with automatic rollback on the alarms."""

    traffic: Literal["all_at_once", "canary", "linear"] = "all_at_once"
    step_percent: int = Field(default=25, ge=1, le=50, description="canary size or linear step, % of capacity")
    wait_seconds: int = Field(default=600, ge=0, le=3600, description="baking time between steps")
    termination_wait_seconds: int = Field(default=600, ge=0, le=3600, description="old fleet kept after the switch")


class ServingConfig(_Strict):
    """The stage's LMI endpoint: which model, how it is sharded, on what, and how it is run."""

    engine: Literal["deepspeed", "vllm"] = Field(
        default="deepspeed",
        description="'deepspeed': LMI 0.27.0 with model_artifacts/deepspeed; 'vllm': the current LMI image",
    )
    model: ModelName = Field(default="gpt-j-6b", description="a model of stacks/catalog/models.py")
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
    startup_timeout_seconds: TimeoutSeconds | None = Field(
        default=None, description="container start-up health check; default sized from the weights to download"
    )
    download_timeout_seconds: TimeoutSeconds = Field(
        default=600, description="download of model.tar.gz (the code; the weights download at start-up)"
    )
    volume_size_gib: int | None = Field(
        default=None, ge=1, le=512, description="EBS volume; only on instance types without local NVMe storage"
    )
    data_capture_percent: int | None = Field(
        default=None, ge=1, le=100, description="capture this % of requests and responses to the data bucket"
    )
    routing: Literal["least_outstanding_requests", "random"] = "least_outstanding_requests"
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    alarms: AlarmsConfig = Field(default_factory=AlarmsConfig)
    deployment: DeploymentConfig = Field(default_factory=DeploymentConfig)

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
        return self.catalog_model.staged(self.weights.checkpoint) if self.weights.source == "pretrained" else None

    def fit(self) -> sizing.ServingFit:
        model = self.catalog_model
        return sizing.serving_fit(
            model,
            self.dtype,
            self.tensor_parallel_degree,
            self.catalog_instance,
            batch_size=self.max_batch_size,
            tokens=model.context_tokens,
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

    @model_validator(mode="after")
    def _check_model_fits_instance(self) -> ServingConfig:
        model, instance, tp = self.catalog_model, self.catalog_instance, self.tensor_parallel_degree
        where = f"{self.instance_type} ({instance.gpus})"
        if tp > instance.gpu_count or instance.gpu_count % tp:
            options = [d for d in range(1, instance.gpu_count + 1) if instance.gpu_count % d == 0]
            raise ValueError(
                f"tensor_parallel_degree {tp} must divide the {instance.gpu_count} GPU(s) of {self.instance_type}; "
                f"use one of {options}"
            )
        if model.attention_heads % tp:
            raise ValueError(
                f"tensor_parallel_degree {tp} does not divide the {model.attention_heads} attention heads of "
                f"{self.model}; use a divisor of {model.attention_heads}"
            )
        if self.dtype == "bf16" and not instance.gpu.bf16:
            raise ValueError(f"dtype bf16 needs Ampere or newer GPUs; {instance.gpu.model} has none: use fp16")
        if self.dtype == "int8" and self.engine != "deepspeed":
            raise ValueError("dtype int8 is DeepSpeed's kernel-injected int8; with engine vllm use fp16 or bf16")
        if self.dtype == "int8" and not model.deepspeed_kernels:
            raise ValueError(f"dtype int8 needs DeepSpeed kernel injection, which has no policy for {self.model}")
        if self.dtype == "int8" and self.weights.checkpoint is None:
            # DeepSpeed quantizes only while loading checkpoint shards; its quantization of a Hugging Face model is
            # disabled (module_inject/containers/base.py, apply_weight_quantization), so it would serve garbage.
            int8 = [c.name for c in model.checkpoints if c.dtype == "int8"]
            raise ValueError(
                "dtype int8 needs a pre-sharded DeepSpeed checkpoint: DeepSpeed quantizes weights only while it "
                "loads such shards, and would cast Hugging Face weights to int8 without scales; "
                + (
                    f"set weights.checkpoint to one of {', '.join(int8)}"
                    if int8
                    else f"{self.model} has no int8 checkpoint in the catalog: use fp16 or bf16"
                )
            )
        if self.volume_size_gib is not None and not instance.volume_size_supported:
            raise ValueError(
                f"volume_size_gib: {self.instance_type} has instance-local NVMe storage and takes no EBS volume; "
                "remove volume_size_gib"
            )
        self._check_checkpoint()
        fit = self.fit()
        if not fit.fits:
            suggestion = sizing.suggest_serving(
                model, self.dtype, instance, batch_size=self.max_batch_size, tokens=model.context_tokens
            )
            raise ValueError(
                f"{self.model} {self.dtype} with tensor_parallel_degree {tp} does not fit {where}: needs "
                f"{fit.describe()}; {suggestion}"
            )
        host = self.host_fit()
        if not host.fits:
            suggestion = sizing.suggest_host_serving(
                model,
                self.dtype,
                instance,
                engine=self.engine,
                batch_size=self.max_batch_size,
                tokens=model.context_tokens,
            )
            raise ValueError(
                f"{self.model} {self.dtype} with tensor_parallel_degree {tp} cannot load on {self.instance_type} "
                f"({instance.host_memory_gib} GiB of host memory): needs {host.describe()}; {suggestion}"
            )
        if self.max_new_tokens >= model.context_tokens:
            raise ValueError(
                f"max_new_tokens {self.max_new_tokens} leaves no room for a prompt in the {model.context_tokens}-token "
                f"context of {self.model}"
            )
        return self

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


# ---------------------------------------------------------------------------------------------------------------
# Training: the fine-tuning pipeline of each stage.

ProcessingInstanceType = Annotated[
    str,
    StringConstraints(pattern=r"^ml\.[a-z0-9]+\.[0-9]*x?large$"),
]


class SmpConfig(_Strict):
    """The SageMaker model parallelism library's layout, passed to the job as the estimator's distribution.

    Version 1 (smdistributed.modelparallel, the GPT-J reference) takes every key; version 2 (FSDP-based) only
    hybrid_shard_degree and the activation keys."""

    version: Literal[1, 2] = Field(default=1, description="1: SMP v1 (PyTorch 1.13.1 DLC, SMP 1.15); 2: SMP v2")
    # Defaults: the GPT-J-6B tensor-parallel reference on one ml.p4d.24xlarge.
    tensor_parallel_degree: int = Field(default=8, ge=1, description="GPUs each layer is split over")
    pipeline_parallel_degree: int = Field(default=1, ge=1, description="pipeline stages (SMP's `partitions`)")
    microbatches: int = Field(default=1, ge=1, description="micro-batches per batch, for pipeline parallelism")
    pipeline: Literal["interleaved", "simple"] = "interleaved"
    ddp: bool = Field(default=True, description="data parallelism across the model-parallel groups")
    shard_optimizer_state: bool = Field(default=True, description="split optimizer state over data-parallel ranks")
    sharded_data_parallel_degree: int = Field(
        default=1, ge=1, description="SMP v1's ZeRO-3-like sharding; only 1: it cannot save a full HF model"
    )
    offload_activations: bool = Field(default=False, description="move checkpointed activations to CPU memory")
    activation_loading_horizon: int = Field(default=4, ge=1)
    auto_partition: bool = True
    optimize: Literal["speed", "memory"] = "speed"
    placement_strategy: Literal["cluster", "spread"] = "cluster"
    prescaled_batch: bool = True
    delayed_parameter_initialization: bool = False
    hybrid_shard_degree: int = Field(default=0, ge=0, description="SMP v2 only: GPUs a model copy is sharded over")


class SpotConfig(_Strict):
    enabled: bool = Field(default=False, description="managed spot training; resumes from checkpoints")
    max_wait_hours: int = Field(default=48, ge=1, le=672, description="run time plus time waiting for capacity")


class VpcConfig(_Strict):
    subnet_ids: tuple[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(min_length=1)
    security_group_ids: tuple[Annotated[str, StringConstraints(pattern=r"^sg-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=1
    )


class TrainingConfig(_Strict):
    """The stage's fine-tuning pipeline: model, instances, SMP layout, and the defaults of each run's parameters."""

    model: ModelName = Field(default="gpt-j-6b", description="the model to fine-tune (staged in S3 first)")
    # Fixed per stage, not run parameters: processes per host, the EFA options, the volume key, the layout checks and
    # the memory estimates all follow from them at synth.
    instance_type: InstanceTypeName = Field(default="ml.p4d.24xlarge", description="training instances (per stage)")
    instance_count: int = Field(default=1, ge=1, description="training instances (per stage)")
    processes_per_host: int | None = Field(default=None, ge=1, description="default: one per GPU")
    precision: Literal["fp16", "bf16", "fp32"] = "fp16"
    activation_checkpointing: bool = True
    smp: SmpConfig = Field(default_factory=SmpConfig)
    # Defaults of the pipeline parameters each run may override.
    max_steps: int = Field(default=1000, ge=1)
    learning_rate: float = Field(default=2e-4, gt=0)
    train_batch_size: int = Field(default=8, ge=1, description="sequences per data-parallel rank per step")
    perplexity_threshold: float = Field(default=20.0, gt=1, description="register the model only at or below")
    # Fixed per stage.
    val_batch_size: int = Field(default=8, ge=1)
    gradient_accumulation: int = Field(default=1, ge=1)
    lr_decay_style: Literal["constant", "linear", "cosine"] = "linear"
    warmup: float = Field(default=0.01, ge=0, lt=1)
    validation_freq: int = Field(default=200, ge=0)
    checkpoint_freq: int = Field(default=200, ge=0)
    num_kept_checkpoints: int = Field(default=3, ge=1)
    seed: int = 12345
    sequence_length: int = Field(default=1024, ge=8, description="tokens per training block (prepare step)")
    volume_size_gib: int = Field(default=500, ge=1, le=16384)
    max_runtime_hours: int = Field(default=24, ge=1, le=672, description="SageMaker stops the job after this")
    spot: SpotConfig = Field(default_factory=SpotConfig)
    vpc: VpcConfig | None = Field(default=None, description="run the jobs in these subnets")
    processing_instance_type: ProcessingInstanceType = Field(default="ml.m5.2xlarge", description="prepare step")
    evaluate_instance_type: InstanceTypeName = Field(default="ml.g5.2xlarge", description="evaluate step")

    @property
    def catalog_instance(self):
        return INSTANCE_TYPES[self.instance_type]

    @property
    def catalog_model(self):
        return MODELS[self.model]

    @property
    def processes(self) -> int:
        return self.processes_per_host or self.catalog_instance.gpu_count

    @property
    def world_size(self) -> int:
        return self.processes * self.instance_count

    @property
    def data_parallel_degree(self) -> int:
        return self.world_size // (self.smp.tensor_parallel_degree * self.smp.pipeline_parallel_degree)

    def host_fit(self) -> sizing.HostFit:
        return sizing.training_host_fit(self.catalog_model, self.catalog_instance, processes=self.processes)

    def fit(self) -> sizing.TrainingFit:
        smp = self.smp
        return sizing.training_fit(
            self.catalog_model,
            self.catalog_instance,
            precision=self.precision,
            tensor_parallel_degree=smp.tensor_parallel_degree,
            pipeline_parallel_degree=smp.pipeline_parallel_degree,
            data_parallel_degree=max(self.data_parallel_degree, 1),
            shard_optimizer_state=smp.shard_optimizer_state,
            sharded_data_parallel_degree=smp.sharded_data_parallel_degree
            if smp.version == 1
            else max(smp.hybrid_shard_degree, 1),
            micro_batch_size=max(self.train_batch_size // smp.microbatches, 1),
            sequence_length=self.sequence_length,
            activation_checkpointing=self.activation_checkpointing,
        )

    @model_validator(mode="after")
    def _check_layout(self) -> TrainingConfig:
        instance, smp = self.catalog_instance, self.smp
        model_parallel = smp.tensor_parallel_degree * smp.pipeline_parallel_degree
        if self.processes > instance.gpu_count:
            raise ValueError(
                f"processes_per_host {self.processes} is more than the {instance.gpu_count} GPU(s) of "
                f"{self.instance_type}; SMP runs one process per GPU"
            )
        if self.world_size % model_parallel:
            raise ValueError(
                f"smp.tensor_parallel_degree x smp.pipeline_parallel_degree = {model_parallel} does not divide the "
                f"{self.world_size} processes ({self.processes} per host x {self.instance_count} host(s))"
            )
        if smp.sharded_data_parallel_degree > 1 and smp.version == 1:
            raise ValueError(
                "smp.sharded_data_parallel_degree > 1: SMP v1 then writes only partial shards and the pipeline needs "
                "the full model in Hugging Face format; use shard_optimizer_state with tensor parallelism, or SMP v2"
            )
        if smp.tensor_parallel_degree > 1 and not smp.ddp:
            raise ValueError("smp.tensor_parallel_degree > 1 needs smp.ddp: true (SMP's requirement)")
        if self.train_batch_size % smp.microbatches:
            raise ValueError(
                f"train_batch_size {self.train_batch_size} is not divisible by smp.microbatches {smp.microbatches}"
            )
        if self.precision == "bf16" and not instance.gpu.bf16:
            raise ValueError(f"precision bf16 needs A100/H100-class (Ampere or newer) GPUs; {instance.gpus} has none")
        if smp.version == 2 and smp.tensor_parallel_degree > 1 and self.catalog_model.architecture == "gptj":
            raise ValueError(
                "SMP v2 has no tensor parallelism for GPT-J (its list: GPT-NeoX, Llama, Mistral, Mixtral); use "
                "smp.version 1, or smp.hybrid_shard_degree with tensor_parallel_degree 1"
            )
        if smp.version == 2 and (smp.pipeline_parallel_degree > 1 or smp.sharded_data_parallel_degree > 1):
            raise ValueError(
                "SMP v2 has no pipeline parallelism or sharded_data_parallel_degree; use hybrid_shard_degree"
            )
        if smp.version == 1 and self.instance_type.startswith("ml.p5."):
            raise ValueError("SMP v1 does not support p5 instances (the SageMaker SDK refuses them); use smp.version 2")
        if smp.version == 1 and smp.delayed_parameter_initialization:
            raise ValueError(
                "smp.delayed_parameter_initialization re-initializes the weights after partitioning, over the "
                "pretrained ones the pipeline fine-tunes; remove it"
            )
        if smp.version == 2 and self.precision == "fp16":
            raise ValueError("SMP v2 (FSDP) trains in bf16 or fp32, not fp16: set precision bf16")
        if smp.version == 2 and smp.hybrid_shard_degree and self.world_size % smp.hybrid_shard_degree:
            raise ValueError(
                f"smp.hybrid_shard_degree {smp.hybrid_shard_degree} does not divide the {self.world_size} processes"
            )
        fit = self.fit()
        if not fit.fits:
            raise ValueError(
                f"{self.model} training does not fit {self.instance_type} ({instance.gpus}) with tensor parallel "
                f"{smp.tensor_parallel_degree}, pipeline parallel {smp.pipeline_parallel_degree} and "
                f"shard_optimizer_state {str(smp.shard_optimizer_state).lower()}: estimated {fit.describe()}; "
                "raise the tensor or pipeline parallel degree, shard the optimizer state, or use larger GPUs"
            )
        host = self.host_fit()
        if not host.fits:
            raise ValueError(
                f"{self.model} cannot load on {self.instance_type} ({instance.host_memory_gib} GiB of host memory) "
                f"with {self.processes} processes per host: needs {host.describe()}; lower processes_per_host (with "
                "the SMP degrees), or use an instance type with more memory per GPU process"
            )
        # Last, the job's own start-up checks on exactly what it will be given (a net under the rules above).
        from stacks import training_job

        training_job.check_with_train_py(self)
        return self


# ---------------------------------------------------------------------------------------------------------------
# Promotion: one CDK pipeline taking each commit (and each approved model) through the stages in order.


class SourceConfig(_Strict):
    """Where the pipeline gets the repository: a CodeConnections connection (GitHub, GitLab, Bitbucket), or a zip
    in S3."""

    connection_arn: str | None = Field(
        default=None,
        pattern=r"^arn:aws[a-z-]*:(codestar-connections|codeconnections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]+$",
        description="a CodeConnections connection ARN (create and authorize it in the console once)",
    )
    repository: str | None = Field(default=None, pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    branch: str = Field(default="main", description="the branch whose commits are promoted")
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$", description="S3 source")
    key: str | None = Field(default=None, min_length=1, description="S3 source: the object key of a zip")

    @model_validator(mode="after")
    def _one_source(self) -> SourceConfig:
        connection = self.connection_arn is not None or self.repository is not None
        s3 = self.bucket is not None or self.key is not None
        if connection == s3:
            raise ValueError("give either connection_arn and repository, or bucket and key")
        if connection and (self.connection_arn is None or self.repository is None):
            raise ValueError("a connection source needs both connection_arn and repository")
        if s3 and (self.bucket is None or self.key is None):
            raise ValueError("an S3 source needs both bucket and key")
        return self


class PipelineConfig(_Strict):
    """The promotion pipeline: where it runs, what it watches, and the gates between stages."""

    account: AccountId = Field(description="the tooling account the pipeline runs in")
    region: Region
    source: SourceConfig
    approval_before: tuple[StageName, ...] = Field(
        default=("prod",), description="stages a person approves before they are deployed"
    )
    smoke_test_after: tuple[StageName, ...] = Field(
        default=("staging",), description="stages whose endpoint is invoked, and pipeline checked, after deploying"
    )
    trigger_on_model_approval: bool = Field(
        default=True, description="start the pipeline when a model package of a stage in its account is approved"
    )


# ---------------------------------------------------------------------------------------------------------------
# The configuration.


class StageConfig(_Strict):
    """One environment (dev, staging, prod): where it lives and how its data is treated."""

    account: AccountId | None = Field(
        default=None,
        description="AWS account id; absent = environment-agnostic (the CLI's credentials decide)",
    )
    region: Region = Field(description="AWS region, for example us-east-1")
    removal_policy: Literal["retain", "destroy"] = Field(
        default="retain",
        description="what happens to the data/model buckets and the KMS key when the stack is deleted: "
        "'retain' keeps them; 'destroy' deletes them and empties the buckets first (dev only)",
    )
    tags: Tags = Field(default_factory=dict, description="tags on every resource of this stage")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="the stage's fine-tuning pipeline")
    serving: ServingConfig = Field(default_factory=ServingConfig, description="the stage's inference endpoint")


class PlatformConfig(_Strict):
    """The whole file: the project's name, tags for everything, and the stages in promotion order."""

    project: ProjectName = Field(default="llm-platform", description="prefix of stack names")
    tags: Tags = Field(default_factory=dict, description="tags on every resource of every stage")
    stages: dict[StageName, StageConfig] = Field(description="environments, in promotion order")
    pipeline: PipelineConfig | None = Field(default=None, description="the promotion pipeline; absent: none")

    @model_validator(mode="after")
    def _check_stages(self) -> PlatformConfig:
        if not self.stages:
            raise ValueError("stages: at least one stage is required")
        if self.stages.get("prod") and self.stages["prod"].removal_policy != "retain":
            raise ValueError(
                "stages.prod.removal_policy: 'destroy' would delete production data and keys with the stack; "
                "prod must use 'retain'"
            )
        if self.pipeline:
            for field in ("approval_before", "smoke_test_after"):
                unknown = [name for name in getattr(self.pipeline, field) if name not in self.stages]
                if unknown:
                    raise ValueError(
                        f"pipeline.{field}: no stage named {', '.join(unknown)}; stages: {', '.join(self.stages)}"
                    )
        return self

    def stage_account(self, stage: str) -> str | None:
        """The stage's account; a stage without one deploys into the pipeline's account when there is one."""
        return self.stages[stage].account or (self.pipeline.account if self.pipeline else None)

    def stage_tags(self, stage: str) -> dict[str, str]:
        """Tags for one stage: the project's, then the file's, then the stage's own (later wins)."""
        return {"project": self.project, "stage": stage, **self.tags, **self.stages[stage].tags}


# ---------------------------------------------------------------------------------------------------------------
# Loading.


def load_config(
    path: str | Path = DEFAULT_CONFIG, *, only_stage: str | None = None, overlays: tuple[str | Path, ...] = ()
) -> PlatformConfig:
    """Read and validate a config file; with `overlays`, merge these files over it first (mappings merge key by
    key, everything else replaces); with `only_stage`, keep just that stage."""
    path = Path(path)
    raw = _read_yaml(path)
    source = str(path)
    for overlay in map(Path, overlays):
        raw = _merge(raw, _read_yaml(overlay))
        source += f" + overlay {overlay}"
    try:
        config = PlatformConfig.model_validate(raw)
    except ValidationError as err:
        problems = "\n".join(f"  - {_describe(e)}" for e in err.errors())
        raise ConfigError(f"{source}: invalid configuration:\n{problems}") from None
    if only_stage is None:
        return config
    if only_stage not in config.stages:
        raise ConfigError(f"{source}: no stage named {only_stage!r}; stages: {', '.join(config.stages)}")
    return config.model_copy(update={"stages": {only_stage: config.stages[only_stage]}})


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top, got {type(raw).__name__}")
    return raw


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        return {**base, **{key: _merge(base.get(key), value) for key, value in overlay.items()}}
    return overlay


def _describe(error: dict[str, Any]) -> str:
    """One validation error as `field.path: what is wrong (got value)`."""
    loc = [str(p) for p in error["loc"] if p != "[key]"]
    where = ".".join(loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        accepted = _accepted_keys(loc[:-1])
        close = difflib.get_close_matches(loc[-1], accepted, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{where}: unknown key; {hint}accepted keys: {', '.join(accepted)}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"{where}: required key is missing"
    return f"{where}: {message} (got {error.get('input')!r})"


def _accepted_keys(loc: list[str]) -> list[str]:
    """The field names of the model found by walking `loc` from the root config."""
    annotation: Any = PlatformConfig
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            annotation = annotation.model_fields[part].annotation
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        elif typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` -> X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        else:
            return annotation
