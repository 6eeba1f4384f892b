"""Training: the fine-tuning pipeline of each stage."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from core import api_limits, sizing, training_job
from core.catalog import images
from core.catalog.instances import INSTANCE_TYPES
from core.catalog.models import FOLLOWED_BRANCH, MODELS, StagedWeights, check_commit, unpinned_pickles
from core.config import lora_evaluation, lora_training
from core.config.fields import InstanceTypeName, ModelName, StrictModel, VpcConfig

# Any instance type CreateProcessingJob offers (its list, and the SDK's image for it, are checked below).
ProcessingInstanceType = Annotated[str, StringConstraints(pattern=r"^ml\.")]


class SmpConfig(StrictModel):
    """The SageMaker model parallelism library's layout, passed to the job as the estimator's distribution.

    Version 1 (smdistributed.modelparallel, the GPT-J reference) takes every key; version 2 (FSDP-based) only
    hybrid_shard_degree and the activation keys. With training.method lora the section shards the frozen base (SMP v2;
    there version defaults to 2 and tensor_parallel_degree to 1, the only values that apply); without it adapters
    run under PyTorch DDP."""

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
    hybrid_shard_degree: int = Field(
        default=0,
        ge=0,
        description="SMP v2 only: GPUs a model copy is sharded over, a divisor of the GPUs / tensor_parallel_degree "
        "(0: all of those)",
    )


class SpotConfig(StrictModel):
    enabled: bool = Field(default=False, description="managed spot training; resumes from checkpoints")
    max_wait_hours: int = Field(
        default=48, ge=1, description="run time plus time waiting for capacity: at least max_runtime_hours"
    )


class PretrainedConfig(StrictModel):
    """Which commit of the model's Hugging Face repository fine-tuning starts from, and in which weights format."""

    revision: Annotated[str, AfterValidator(check_commit)] | None = Field(
        default=None,
        description="the commit (40 hex digits) to stage and fine-tune; default: whatever commit "
        f"{FOLLOWED_BRANCH} had when the staging pipeline last ran, read from its record by each pipeline run",
    )
    allow_pickle: bool = Field(
        default=False,
        description="accept PyTorch pickle weights (pytorch_model*.bin), which run code when loaded, when the "
        "repository has no safetensors (staged under pretrained/<model>-pickle/). Requires revision: pickles come "
        "only from a pinned commit",
    )


class TrainingConfig(StrictModel):
    """The stage's fine-tuning pipeline: model, instances, SMP layout, and the defaults of each run's parameters."""

    model: ModelName = Field(default="gpt-j-6b", description="the model to fine-tune (staged in S3 first)")
    pretrained: PretrainedConfig = Field(
        default_factory=PretrainedConfig, description="the commit and weights format of the model to fine-tune"
    )
    # Fixed per stage, not run parameters: processes per host, the EFA options, the volume key, the layout checks and
    # the memory estimates all follow from them at synth.
    instance_type: InstanceTypeName = Field(default="ml.p4d.24xlarge", description="training instances (per stage)")
    instance_count: int = Field(default=1, ge=1, description="training instances (per stage)")
    processes_per_host: int | None = Field(default=None, ge=1, description="default: one per GPU")
    precision: Literal["fp16", "bf16", "fp32"] = "fp16"
    activation_checkpointing: bool = True
    smp: SmpConfig = Field(default_factory=SmpConfig)
    method: Literal["full", "lora", "qlora"] = Field(
        default="full",
        description="full: every weight, with SMP; lora: PEFT adapters over frozen base weights, with PyTorch DDP "
        "(the base whole on every GPU), or, given training.smp {version: 2, hybrid_shard_degree: N}, over a base "
        "SMP v2 (FSDP) shards over N GPUs; qlora: adapters over 4-bit base weights (bitsandbytes, bf16 GPUs, DDP "
        "only). lora and qlora register an adapter",
    )
    lora: lora_training.LoraConfig = Field(
        default_factory=lora_training.LoraConfig, description="the adapters' settings (method lora or qlora)"
    )
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
    volume_size_gib: int = Field(default=500, ge=1)
    max_runtime_hours: int = Field(
        default=24, ge=1, description="SageMaker stops the job after this (and the processing jobs: at most 216)"
    )
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

    @model_validator(mode="after")
    def _pickles_from_a_pinned_commit(self) -> TrainingConfig:
        if self.pretrained.allow_pickle and self.pretrained.revision is None:
            raise ValueError(
                "pretrained.allow_pickle: " + unpinned_pickles(self.catalog_model.hf_id, "training.pretrained.revision")
            )
        return self

    @property
    def staged_weights(self) -> StagedWeights:
        """What the staging pipeline copies for fine-tuning, and where the pipeline's `model` channel reads it."""
        return self.catalog_model.staged(revision=self.pretrained.revision, allow_pickle=self.pretrained.allow_pickle)

    @property
    def processes(self) -> int:
        return self.processes_per_host or self.catalog_instance.gpu_count

    @property
    def world_size(self) -> int:
        return self.processes * self.instance_count

    @property
    def shards_base(self) -> bool:
        """An adapter method over a base FSDP shards (SMP v2), not whole on every GPU (DDP):
        core/config/lora_training.py."""
        return self.method != "full" and self.smp.hybrid_shard_degree != lora_training.DDP_SHARD_DEGREE

    @property
    def data_parallel_degree(self) -> int:
        return self.world_size // (self.smp.tensor_parallel_degree * self.smp.pipeline_parallel_degree)

    @model_validator(mode="before")
    @classmethod
    def _adapters_run_without_smp(cls, data: Any) -> Any:
        return lora_training.normalize(data)

    def host_fit(self) -> sizing.HostFit:
        if self.method != "full":
            return lora_training.host_fit(self)
        return sizing.training_host_fit(self.catalog_model, self.catalog_instance, processes=self.processes)

    def fit(self) -> sizing.TrainingFit:
        if self.method != "full":
            return lora_training.training_fit(self)
        smp = self.smp
        return sizing.training_fit(
            self.catalog_model,
            self.catalog_instance,
            precision=self.precision,
            tensor_parallel_degree=smp.tensor_parallel_degree,
            pipeline_parallel_degree=smp.pipeline_parallel_degree,
            data_parallel_degree=max(self.data_parallel_degree, 1),
            # An SMP v1 key: SMP v2's job is not given it, and hybrid_shard_degree 1 (NO_SHARD) keeps every state whole.
            shard_optimizer_state=smp.shard_optimizer_state and smp.version == 1,
            # SMP v2's hybrid_shard_degree 0 shards over every data-parallel rank: FSDP's FULL_SHARD over all GPUs
            # with tensor parallel degree 1, else the largest degree tensor parallelism leaves (the SMP v2 reference).
            sharded_data_parallel_degree=smp.sharded_data_parallel_degree
            if smp.version == 1
            else smp.hybrid_shard_degree or max(self.data_parallel_degree, 1),
            micro_batch_size=max(self.train_batch_size // smp.microbatches, 1),
            sequence_length=self.sequence_length,
            activation_checkpointing=self.activation_checkpointing,
            # SMP v2 shards every parameter (FSDP); only SMP v1's tensor parallelism keeps some whole on every rank.
            whole_parameters=sizing.smp_v1_whole_parameters(self.catalog_model, smp.tensor_parallel_degree)
            if smp.version == 1
            else 0,
        )

    def _check_tensor_parallel_split(self) -> None:
        """How the model's layers split over the tensor-parallel ranks, as SMP needs it."""
        smp, model = self.smp, self.catalog_model
        tp = smp.tensor_parallel_degree
        if tp == 1:
            return
        if model.attention_heads % tp or model.hidden_size % tp:
            # SMP's tensor-parallelism reference: a module whose dimensions the degree does not divide is not
            # distributed ("tensor parallelism will not be enabled for this module"): each GPU holds it whole.
            options = [
                d
                for d in range(1, model.attention_heads + 1)
                if model.attention_heads % d == 0 and self.world_size % (d * smp.pipeline_parallel_degree) == 0
            ]
            raise ValueError(
                f"smp.tensor_parallel_degree {tp} divides neither the {model.attention_heads} attention heads nor the "
                f"hidden size {model.hidden_size} of {self.model}: SMP does not distribute layers the degree does not "
                f"divide (smd_model_parallel_pytorch_tensor_parallel.rst), so every GPU would hold them whole; use "
                f"one of {options}"
            )
        if smp.version == 1 and smp.prescaled_batch and (self.sequence_length % tp or self.sequence_length <= tp):
            # SMP v1's DistributedTransformerLMHead shards each sequence over the tensor-parallel ranks with
            # prescaled_batch and raises InvalidSeqLenPrescaledBatchError when it cannot (smdistributed/modelparallel/
            # torch/nn/utils.py shard_sequence, SMP 1.12.1).
            raise ValueError(
                f"sequence_length {self.sequence_length} is not a multiple of smp.tensor_parallel_degree {tp} (and "
                f"above it): with smp.prescaled_batch SMP v1 splits every sequence over the tensor-parallel ranks and "
                f"stops the job at its first step (InvalidSeqLenPrescaledBatchError); use a multiple of {tp}, e.g. "
                f"{self.sequence_length - self.sequence_length % tp}"
            )

    @model_validator(mode="after")
    def _check_api_limits(self) -> TrainingConfig:
        """What SageMaker's APIs and train.py's start-up would refuse (core/api_limits/rules.py), and the
        processing instance types the SDK has no image for."""
        problems = api_limits.check("training", self)
        for field in ("processing_instance_type", "evaluate_instance_type"):
            if any(problem.startswith(f"{field}:") for problem in problems):
                continue
            value = getattr(self, field)
            reason = images.processing_instance_problem(value)
            if reason:
                problems.append(
                    f"{field}: the SageMaker SDK has no PyTorch {images.SMP_V1_PYTORCH_VERSION} image for {value}, "
                    f"which the step runs in ({reason}); use another instance type"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _check_smp_v1_loads_model(self) -> None:
        """SMP v1 runs in the PyTorch 1.13.1 image, where the lock pins transformers 4.21.0 (the last release SMP
        v1's tensor parallelism replaces); a model whose config needs a later transformers does not load there."""

        model = self.catalog_model
        python = training_job._python_version(images.training_framework(1)[1])
        pinned = training_job.pinned_version(training_job.TRAINING_REQUIREMENTS, "transformers", python)
        if not model.loads_with_transformers(pinned):
            raise ValueError(
                f"smp.version 1 cannot fine-tune {self.model}: its image runs transformers {pinned} (training/"
                f"requirements.txt, Python {python}), and {model.architecture} models need transformers "
                f"{model.min_transformers} or later; use smp.version 2 (precision bf16)"
            )

    def _check_smp_v2(self) -> None:
        """SMP v2's layout rules, for full fine-tuning and for adapters over a sharded base."""
        smp = self.smp
        if smp.pipeline_parallel_degree > 1 or smp.sharded_data_parallel_degree > 1:
            raise ValueError(
                "SMP v2 has no pipeline parallelism or sharded_data_parallel_degree; use hybrid_shard_degree"
            )
        if self.precision == "fp16":
            raise ValueError("SMP v2 (FSDP) trains in bf16 or fp32, not fp16: set precision bf16")
        # SMP v2 shards over the data-parallel ranks tensor parallelism leaves (world size / tensor parallel degree):
        # 0 is "the largest possible hybrid_shard_degree based on tensor_parallel_degree and world_size", and AWS's
        # reference configurations multiply to the GPUs (distributed-model-parallel-v2-reference,
        # model-parallel-best-practices-v2). Any other degree must divide those ranks into whole shard groups.
        degree, tp = smp.hybrid_shard_degree, smp.tensor_parallel_degree
        data_parallel = self.world_size // tp
        if degree and data_parallel % degree:
            ranks = (
                f"the {self.world_size} processes"
                if tp == 1
                else f"the {data_parallel} data-parallel ranks that smp.tensor_parallel_degree {tp} leaves of the "
                f"{self.world_size} processes"
            )
            # 1 under adapters is the DDP run, which has no training.smp (core/config/lora_training.py).
            divisors = [
                d for d in range(1, data_parallel + 1) if data_parallel % d == 0 and (d > 1 or self.method == "full")
            ]
            raise ValueError(
                f"smp.hybrid_shard_degree {degree} does not divide {ranks}: SMP v2 shards the model over those "
                f"ranks{' (each holding a tensor-parallel slice)' if tp > 1 else ''}, so the degree must divide "
                f"{data_parallel}; use one of {divisors}, or 0 for {data_parallel}"
            )

    @model_validator(mode="after")
    def _check_layout(self) -> TrainingConfig:
        """The training job runs with this layout: the full fine-tune's SMP rules, or the adapters' own."""
        if self.method == "full":
            self._check_full_fine_tune_layout()
        else:
            self._check_adapter_layout()
        # Last, the job's own start-up checks on exactly what it will be given (a net under the rules above).
        training_job.check_with_train_py(self)
        return self

    def _check_adapter_layout(self) -> None:
        """Adapters (lora, qlora): SMP v2's rules when the base is sharded, then core/config/lora_*.py's."""
        if self.shards_base:
            lora_training.check_sharding(self)
            self._check_smp_v2()
        lora_training.check(self)
        lora_evaluation.check(self)
        lora_training.check_host(self)

    def _check_full_fine_tune_layout(self) -> None:
        """A full fine-tune under SMP. One check each, in this order: the first problem found is the one reported."""
        self._check_no_adapter_settings()
        if self.smp.version == 1:
            self._check_smp_v1_loads_model()
        self._check_processes_fit_gpus()
        self._check_model_parallel_divides_processes()
        self._check_smp_v1_shards_no_data()
        self._check_tensor_parallel_has_ddp()
        self._check_tensor_parallel_split()
        self._check_microbatches_divide_batch()
        self._check_bf16_supported()
        self._check_smp_v2_tensor_parallel_architecture()
        if self.smp.version == 2:
            self._check_smp_v2()
        self._check_smp_v1_instance_type()
        self._check_smp_v1_keeps_pretrained_weights()
        self._check_fits_gpu_memory()
        self._check_fits_host_memory()

    def _check_no_adapter_settings(self) -> None:
        if "lora" in self.model_fields_set:
            raise ValueError("lora: set training.method lora or qlora to train adapters, or remove training.lora")

    def _check_processes_fit_gpus(self) -> None:
        gpus = self.catalog_instance.gpu_count
        if self.processes > gpus:
            raise ValueError(
                f"processes_per_host {self.processes} is more than the {gpus} GPU(s) of "
                f"{self.instance_type}; SMP runs one process per GPU"
            )

    def _check_model_parallel_divides_processes(self) -> None:
        model_parallel = self.smp.tensor_parallel_degree * self.smp.pipeline_parallel_degree
        if self.world_size % model_parallel:
            raise ValueError(
                f"smp.tensor_parallel_degree x smp.pipeline_parallel_degree = {model_parallel} does not divide the "
                f"{self.world_size} processes ({self.processes} per host x {self.instance_count} host(s))"
            )

    def _check_smp_v1_shards_no_data(self) -> None:
        """SMP v1's sharded data parallelism saves partial shards, which the pipeline cannot register."""
        if self.smp.sharded_data_parallel_degree > 1 and self.smp.version == 1:
            raise ValueError(
                "smp.sharded_data_parallel_degree > 1: SMP v1 then writes only partial shards and the pipeline needs "
                "the full model in Hugging Face format; use shard_optimizer_state with tensor parallelism, or SMP v2"
            )

    def _check_tensor_parallel_has_ddp(self) -> None:
        if self.smp.tensor_parallel_degree > 1 and not self.smp.ddp:
            raise ValueError("smp.tensor_parallel_degree > 1 needs smp.ddp: true (SMP's requirement)")

    def _check_microbatches_divide_batch(self) -> None:
        if self.train_batch_size % self.smp.microbatches:
            raise ValueError(
                f"train_batch_size {self.train_batch_size} is not divisible by smp.microbatches {self.smp.microbatches}"
            )

    def _check_bf16_supported(self) -> None:
        instance = self.catalog_instance
        if self.precision == "bf16" and not instance.gpu.bf16:
            raise ValueError(f"precision bf16 needs A100/H100-class (Ampere or newer) GPUs; {instance.gpus} has none")

    def _check_smp_v2_tensor_parallel_architecture(self) -> None:
        smp = self.smp
        if smp.version == 2 and smp.tensor_parallel_degree > 1 and self.catalog_model.architecture == "gptj":
            raise ValueError(
                "SMP v2 has no tensor parallelism for GPT-J (its list: GPT-NeoX, Llama, Mistral, Mixtral); use "
                "smp.version 1, or smp.hybrid_shard_degree with tensor_parallel_degree 1"
            )

    def _check_smp_v1_instance_type(self) -> None:
        if self.smp.version == 1 and self.instance_type.startswith("ml.p5."):
            raise ValueError("SMP v1 does not support p5 instances (the SageMaker SDK refuses them); use smp.version 2")

    def _check_smp_v1_keeps_pretrained_weights(self) -> None:
        if self.smp.version == 1 and self.smp.delayed_parameter_initialization:
            raise ValueError(
                "smp.delayed_parameter_initialization re-initializes the weights after partitioning, over the "
                "pretrained ones the pipeline fine-tunes; remove it"
            )

    def _check_fits_gpu_memory(self) -> None:
        """The model, its gradients and optimizer state and the activations fit the GPUs, as the layout splits them."""
        smp, instance = self.smp, self.catalog_instance
        fit = self.fit()
        if fit.fits:
            return
        layout, remedy = (
            (
                f"pipeline parallel {smp.pipeline_parallel_degree} and shard_optimizer_state "
                f"{str(smp.shard_optimizer_state).lower()}",
                "raise the tensor or pipeline parallel degree, shard the optimizer state",
            )
            if smp.version == 1
            else (
                f"hybrid_shard_degree {smp.hybrid_shard_degree}",
                "shard over more GPUs (hybrid_shard_degree 0: every data-parallel GPU), raise the tensor parallel "
                "degree where SMP v2 supports the model",
            )
        )
        raise ValueError(
            f"{self.model} training does not fit {self.instance_type} ({instance.gpus}) with tensor parallel "
            f"{smp.tensor_parallel_degree} and {layout}: estimated {fit.describe()}; {remedy}, or use larger GPUs"
        )

    def _check_fits_host_memory(self) -> None:
        """Every process on a host loads the whole model before SMP partitions it: they fit the host's memory."""
        host = self.host_fit()
        if not host.fits:
            raise ValueError(
                f"{self.model} cannot load on {self.instance_type} ({self.catalog_instance.host_memory_gib} GiB of "
                f"host memory) with {self.processes} processes per host: needs {host.describe()}; lower "
                "processes_per_host (with the SMP degrees), or use an instance type with more memory per GPU process"
            )
