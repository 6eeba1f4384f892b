"""The table of core/api_limits/__init__.py: each config field, or value derived from one, and the API member it
reaches.

Read it as "this field becomes that member of that call". Members name keys of core/api_limits/aws_api_limits.json
(botocore's `<service>:<Operation>:<Member.Path>`, CloudFormation's `cfn:<Type>:<Property.Path>`). Fields that reach
no API, or reach one with no limit, are listed in UNCONSTRAINED with the reason; a test checks that every config
field is in one or the other.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from core import endpoint_settings, naming, placement, serving_properties, sizing
from core.api_limits.limit import Limit, Rule
from core.bucket_layout import HANDLER_SUBFOLDER
from core.endpoint_settings import MODEL_DIR, ROUTING, TRAFFIC
from core.naming import StageNames
from core.staging import staged_repositories
from core.training_job import hyperparameters, smp_parameters
from training.finetune.memory import MEMORY_FLAGS

TRAINING = "stages.*.training."
SERVING = "stages.*.serving."

# --- limits the service models do not carry ----------------------------------------------------------------------

TORCH_SEED_RANGE = (-(2**63), 2**64 - 1)
DATA_ORDER_SEED_FACTOR = 1_000_003  # training/finetune/data.py: torch.Generator().manual_seed(seed * 1_000_003 + epoch)


def _at_most(maximum: int, unit: str = "") -> Any:
    return lambda subject, value: f"is above {maximum}{unit}" if value > maximum else None


TRAINING_RUNTIME = Limit(
    "above 28 days (2419200 s)",
    'SageMaker API reference, StoppingCondition.MaxRuntimeInSeconds: "The maximum value is 28 days."',
    _at_most(28 * 24 * 3600, " s (28 days)"),
)
SPOT_WAIT = Limit(
    "below MaxRuntimeInSeconds (max_runtime_hours x 3600)",
    'SageMaker API reference, StoppingCondition.MaxWaitTimeInSeconds: "It must be equal to or greater than '
    'MaxRuntimeInSeconds."',
    lambda t, value: (
        f"is less than max_runtime_hours {t.max_runtime_hours} h ({t.max_runtime_hours * 3600} s): the wait for spot "
        "capacity comes on top of the run time"
        if value < t.max_runtime_hours * 3600
        else None
    ),
)
EBS_VOLUME = Limit(
    "above 16384 GiB",
    "Amazon EBS General Purpose SSD volumes are 1 GiB-16 TiB (docs.aws.amazon.com/ebs/latest/userguide/"
    "general-purpose.html); CreateProcessingJob's ProcessingVolumeSizeInGB states the same maximum",
    _at_most(16384, " GiB"),
)
CANARY_SIZE = Limit(
    "above 50 (% of the variant's instances)",
    'SageMaker API reference, TrafficRoutingConfig.CanarySize: "Value must be less than or equal to 50% of the '
    "variant's total instance count.\"",
    _at_most(50, "%"),
)
LINEAR_STEP = Limit(
    "outside 10-50 (% of the variant's instances)",
    "SageMaker API reference, TrafficRoutingConfig.LinearStepSize: \"Value must be 10-50% of the variant's total "
    'instance count."',
    lambda s, value: None if 10 <= value <= 50 else "is outside 10-50%",
)
MODEL_CONTEXT = Limit(
    "above the model's context (catalog context_tokens)",
    "train.py refuses data blocks longer than the model's positions (training/finetune/modeling.py "
    "check_data_fits_model)",
    lambda t, value: (
        f"is above the {t.catalog_model.context_tokens}-token context of {t.model}"
        if value > t.catalog_model.context_tokens
        else None
    ),
)
TORCH_SEED = Limit(
    f"seed x {DATA_ORDER_SEED_FACTOR} + epoch outside [-2^63, 2^64 - 1]",
    "train.py seeds torch.Generator with seed x 1,000,003 + epoch (training/finetune/data.py); torch.manual_seed "
    "refuses values outside 64 bits",
    lambda t, value: (
        None
        if TORCH_SEED_RANGE[0] <= value * DATA_ORDER_SEED_FACTOR
        and value * DATA_ORDER_SEED_FACTOR + t.max_steps <= TORCH_SEED_RANGE[1]
        else f"is outside what torch can seed ({TORCH_SEED_RANGE[0]} to {TORCH_SEED_RANGE[1]}) once train.py "
        f"multiplies it by {DATA_ORDER_SEED_FACTOR} for the data order"
    ),
)


def _hours(subject: Any, seconds: int) -> str:
    return f"{seconds // 3600} h ({seconds} s)"


# --- values derived from the whole file ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One stage of the file, and its resources' names: core/naming.py's, which the stacks build with too (a test
    compares them with a synthesized stage)."""

    config: Any
    name: str

    @property
    def names(self) -> StageNames:
        return StageNames(self.config.project, self.name)

    @property
    def prefix(self) -> str:
        return self.names.prefix

    @property
    def training(self) -> Any:
        return self.config.stages[self.name].training

    @property
    def serving(self) -> Any:
        return self.config.stages[self.name].serving

    def finetune_pipeline(self) -> str:
        return self.names.finetune_pipeline

    def staging_pipeline(self) -> str:
        return self.names.staging_pipeline

    def smoke_tested(self) -> bool:
        pipeline = self.config.pipeline
        return pipeline is not None and self.name in pipeline.smoke_test_after

    def scales(self) -> bool:
        """The classic endpoint's variant scales (components scale each their own copies)."""
        scaling = self.serving.autoscaling
        return not self.serving.components and scaling.max_instances > scaling.min_instances


def _smoke_test_role(stage: Stage) -> str | None:

    return stage.names.smoke_test_role if stage.smoke_tested() else None


def _smoke_test_runner_role(stage: Stage) -> str | None:

    return stage.names.smoke_test_runner_role if stage.smoke_tested() else None


def _staging_volume(stage: Stage) -> int:

    return max(
        sizing.staging_volume_gib(model, staged) for model, staged in staged_repositories(stage.training, stage.serving)
    )


def _source_configuration(config: Any) -> dict[str, str] | None:
    if config.pipeline is None:
        return None
    source = config.pipeline.source
    if source.connection_arn is not None:
        return {
            "ConnectionArn": source.connection_arn,
            "FullRepositoryId": source.repository,
            "BranchName": source.branch,
        }
    return {"S3Bucket": source.bucket, "S3ObjectKey": source.key}


def _hyperparameters(training: Any) -> dict[str, str]:
    """What the Train step's HyperParameters carry from the config: train.py's flags and the SMP layout, each as the
    SDK writes it (JSON)."""

    flags = hyperparameters(
        training,
        max_steps=training.max_steps,
        learning_rate=training.learning_rate,
        train_batch_size=training.train_batch_size,
        with_memory=False,
    )
    # The memory figures are sized once the layout checks have passed (these limits come first): counted here at the
    # longest JSON a float takes.
    flags.update(dict.fromkeys(MEMORY_FLAGS, -sys.float_info.max))
    return {
        **{name: json.dumps(value) for name, value in flags.items()},
        "mp_parameters": json.dumps(smp_parameters(training)),
    }


def _routing(serving: Any) -> str:

    return ROUTING[serving.routing]


def _initial_instances(serving: Any) -> int:

    return placement.initial_instances(serving) if serving.components else serving.autoscaling.min_instances


def _scaling_policy(stage: Stage) -> str | None:

    return stage.names.variant_policy(stage.serving.autoscaling.scaling_metric) if stage.scales() else None


def _longest_component_name(stage: Stage) -> str | None:

    # Adapters are inference components too, named the same way.
    short = [c.name for c in stage.serving.components] + [a.name for c in stage.serving.components for a in c.adapters]
    names = [stage.names.component(name) for name in short]
    return max(names, key=len) if names else None


def _traffic(serving: Any) -> str:

    return TRAFFIC[serving.deployment.traffic]


def _model_environment(serving: Any) -> dict[str, str]:

    # The handler's folder is named by its hash when the stack deploys: a SHA-256 is always 64 characters.
    entry_point = f"{MODEL_DIR}/{HANDLER_SUBFOLDER}{'0' * 64}/model.py" if serving.engine == "deepspeed" else None
    return serving_properties.environment(serving, entry_point=entry_point)


_HYPERPARAMETER_FIELDS = (
    *(
        TRAINING + name
        for name in (
            "max_steps",
            "learning_rate",
            "train_batch_size",
            "val_batch_size",
            "gradient_accumulation",
            "precision",
            "activation_checkpointing",
            "lr_decay_style",
            "warmup",
            "validation_freq",
            "checkpoint_freq",
            "num_kept_checkpoints",
            "method",
        )
    ),
    TRAINING + "smp.*",
    TRAINING + "lora.*",  # train.py's --lora_* flags
)


def _on(scope: str, prefix: str):
    def rule(field: str, api: str, members: tuple[str, ...], value: Any, *limits: Limit, **options: Any) -> Rule:
        fields = options.pop("fields", (prefix + field,))
        return Rule(scope, field, fields, api, members, value, limits, **options)

    return rule


def _derived(scope: str):
    def rule(field: str, fields: tuple[str, ...], api: str, members: tuple[str, ...], value: Any) -> Rule:
        return Rule(scope, field, fields, api, members, value)

    return rule


def sm(operation: str, *paths: str) -> tuple[str, ...]:
    return tuple(f"sagemaker:{operation}:{path}" for path in paths)


def cfn(resource_type: str, path: str) -> str:
    return f"cfn:{resource_type}:{path}"


training, serving = _on("training", TRAINING), _on("serving", SERVING)
stage, platform = _derived("stage"), _derived("platform")
NAMES = ("project", "stages.*")  # the fields a name built from the project and stage comes from
TRAIN, PROCESS, ENDPOINT_CONFIG = (
    "SageMaker CreateTrainingJob",
    "SageMaker CreateProcessingJob",
    "SageMaker CreateEndpointConfig",
)
ENDPOINT, BLUE_GREEN = "SageMaker CreateEndpoint", "DeploymentConfig.BlueGreenUpdatePolicy."
TRAFFIC_ROUTING = BLUE_GREEN + "TrafficRoutingConfiguration."
VARIANT = "ProductionVariants."
ROLE = ("iam:CreateRole:RoleName", cfn("AWS::IAM::Role", "RoleName"))
PIPELINE = (*sm("CreatePipeline", "PipelineName"), cfn("AWS::SageMaker::Pipeline", "PipelineName"))

# fmt: off
RULES: tuple[Rule, ...] = (
    # The Train step.
    training("instance_type", TRAIN, sm("CreateTrainingJob", "ResourceConfig.InstanceType"), lambda t: t.instance_type),
    training("instance_count", TRAIN, sm("CreateTrainingJob", "ResourceConfig.InstanceCount"),
             lambda t: t.instance_count),
    training("volume_size_gib", TRAIN, sm("CreateTrainingJob", "ResourceConfig.VolumeSizeInGB"),
             lambda t: t.volume_size_gib, EBS_VOLUME),
    training("max_runtime_hours", TRAIN, sm("CreateTrainingJob", "StoppingCondition.MaxRuntimeInSeconds"),
             lambda t: t.max_runtime_hours * 3600, TRAINING_RUNTIME, shown=_hours),
    training("spot.max_wait_hours", TRAIN, sm("CreateTrainingJob", "StoppingCondition.MaxWaitTimeInSeconds"),
             lambda t: t.spot.max_wait_hours * 3600 if t.spot.enabled else None, SPOT_WAIT, shown=_hours,
             fields=(TRAINING + "spot.max_wait_hours", TRAINING + "spot.enabled")),
    training("vpc.subnet_ids", TRAIN,
             sm("CreateTrainingJob", "VpcConfig.Subnets")
             + sm("CreateProcessingJob", "NetworkConfig.VpcConfig.Subnets"),
             lambda t: list(t.vpc.subnet_ids) if t.vpc else None),
    training("vpc.security_group_ids", TRAIN,
             sm("CreateTrainingJob", "VpcConfig.SecurityGroupIds")
             + sm("CreateProcessingJob", "NetworkConfig.VpcConfig.SecurityGroupIds"),
             lambda t: list(t.vpc.security_group_ids) if t.vpc else None),
    training("the hyperparameters (train.py's flags, smp)", TRAIN, sm("CreateTrainingJob", "HyperParameters"),
             _hyperparameters, fields=_HYPERPARAMETER_FIELDS),
    # The PrepareData, Evaluate and Stage-<weights> steps.
    training("processing_instance_type", PROCESS,
             sm("CreateProcessingJob", "ProcessingResources.ClusterConfig.InstanceType"),
             lambda t: t.processing_instance_type),
    training("evaluate_instance_type", PROCESS,
             sm("CreateProcessingJob", "ProcessingResources.ClusterConfig.InstanceType"),
             lambda t: t.evaluate_instance_type),
    training("max_runtime_hours", PROCESS, sm("CreateProcessingJob", "StoppingCondition.MaxRuntimeInSeconds"),
             lambda t: t.max_runtime_hours * 3600, shown=_hours,
             note="the prepare, evaluate and weights-staging jobs run under the same limit"),
    stage("the weights-staging volume (sized from training.model and the served weights)",
          (TRAINING + "model", SERVING + "model", SERVING + "weights.checkpoint"), PROCESS,
          sm("CreateProcessingJob", "ProcessingResources.ClusterConfig.VolumeSizeInGB"), _staging_volume),
    # The Register step.
    serving("instance_type", "SageMaker CreateModelPackage",
            sm("CreateModelPackage", "InferenceSpecification.SupportedRealtimeInferenceInstanceTypes"),
            lambda s: [s.instance_type]),
    # The endpoint.
    serving("weights.s3_uri", "SageMaker CreateModel",
            (*sm("CreateModel", "PrimaryContainer.ModelDataSource.S3DataSource.S3Uri"),
             cfn("AWS::SageMaker::Model", "PrimaryContainer.ModelDataSource.S3DataSource.S3Uri")),
            lambda s: s.weights.s3_uri),
    serving("the Model's environment (serving.properties keys as OPTION_*)", "SageMaker CreateModel",
            sm("CreateModel", "PrimaryContainer.Environment"), _model_environment,
            fields=tuple(SERVING + f for f in ("engine", "tensor_parallel_degree", "dtype", "max_new_tokens",
                                                "max_batch_size", "startup_timeout_seconds"))),
    serving("vpc.subnet_ids", "SageMaker CreateModel",
            (*sm("CreateModel", "VpcConfig.Subnets"), cfn("AWS::SageMaker::Model", "VpcConfig.Subnets")),
            lambda s: list(s.vpc.subnet_ids) if s.vpc else None),
    serving("vpc.security_group_ids", "SageMaker CreateModel",
            (*sm("CreateModel", "VpcConfig.SecurityGroupIds"),
             cfn("AWS::SageMaker::Model", "VpcConfig.SecurityGroupIds")),
            lambda s: list(s.vpc.security_group_ids) if s.vpc else None),
    serving("instance_type", ENDPOINT_CONFIG, sm("CreateEndpointConfig", VARIANT + "InstanceType"),
            lambda s: s.instance_type),
    serving("autoscaling.min_instances", ENDPOINT_CONFIG, sm("CreateEndpointConfig", VARIANT + "InitialInstanceCount"),
            _initial_instances, note="with components, the instances their initial copies need"),
    serving("autoscaling.min_instances", ENDPOINT_CONFIG,
            sm("CreateEndpointConfig", VARIANT + "ManagedInstanceScaling.MinInstanceCount"),
            lambda s: s.autoscaling.min_instances if s.components else None),
    serving("autoscaling.max_instances", ENDPOINT_CONFIG,
            sm("CreateEndpointConfig", VARIANT + "ManagedInstanceScaling.MaxInstanceCount"),
            lambda s: s.autoscaling.max_instances if s.components else None),
    serving("volume_size_gib", ENDPOINT_CONFIG,
            (*sm("CreateEndpointConfig", VARIANT + "VolumeSizeInGB"),
             cfn("AWS::SageMaker::EndpointConfig", VARIANT + "VolumeSizeInGB")),
            lambda s: s.volume_size_gib),
    serving("download_timeout_seconds", ENDPOINT_CONFIG,
            (*sm("CreateEndpointConfig", VARIANT + "ModelDataDownloadTimeoutInSeconds"),
             cfn("AWS::SageMaker::EndpointConfig", VARIANT + "ModelDataDownloadTimeoutInSeconds")),
            lambda s: s.download_timeout, note="without it, the timeout sized from the weights"),
    serving("startup_timeout_seconds", ENDPOINT_CONFIG,
            (*sm("CreateEndpointConfig", VARIANT + "ContainerStartupHealthCheckTimeoutInSeconds"),
             cfn("AWS::SageMaker::EndpointConfig", VARIANT + "ContainerStartupHealthCheckTimeoutInSeconds")),
            lambda s: s.startup_timeout, note="without it, the timeout sized from the weights"),
    serving("routing", ENDPOINT_CONFIG, sm("CreateEndpointConfig", VARIANT + "RoutingConfig.RoutingStrategy"),
            _routing),
    serving("data_capture_percent", ENDPOINT_CONFIG,
            sm("CreateEndpointConfig", "DataCaptureConfig.InitialSamplingPercentage"),
            lambda s: s.data_capture_percent),
    serving("deployment.traffic", ENDPOINT, sm("CreateEndpoint", TRAFFIC_ROUTING + "Type"), _traffic),
    serving("deployment.step_percent", ENDPOINT, sm("CreateEndpoint", TRAFFIC_ROUTING + "CanarySize.Value"),
            lambda s: s.deployment.step_percent if s.deployment.traffic == "canary" else None, CANARY_SIZE),
    serving("deployment.step_percent", ENDPOINT, sm("CreateEndpoint", TRAFFIC_ROUTING + "LinearStepSize.Value"),
            lambda s: s.deployment.step_percent if s.deployment.traffic == "linear" else None, LINEAR_STEP),
    serving("deployment.wait_seconds", ENDPOINT, sm("CreateEndpoint", TRAFFIC_ROUTING + "WaitIntervalInSeconds"),
            lambda s: s.deployment.wait_seconds),
    serving("deployment.termination_wait_seconds", ENDPOINT,
            sm("CreateEndpoint", BLUE_GREEN + "TerminationWaitInSeconds"),
            lambda s: s.deployment.termination_wait_seconds),
    stage("the endpoint name <project>-<stage>", NAMES, ENDPOINT,
          (*sm("CreateEndpoint", "EndpointName"), cfn("AWS::SageMaker::Endpoint", "EndpointName")),
          lambda s: s.names.endpoint),
    # The weights-staging jobs' Hugging Face token (gated models).
    stage("huggingface_token_secret (the secret the storage stack creates)", ("stages.*.huggingface_token_secret",),
          "Secrets Manager CreateSecret",
          ("secretsmanager:CreateSecret:Name", cfn("AWS::SecretsManager::Secret", "Name")),
          lambda s: s.config.stages[s.name].huggingface_token_secret),
    # The model registry and the pipelines.
    stage("the model package group name <project>-<stage>", NAMES, "SageMaker CreateModelPackageGroup",
          (*sm("CreateModelPackageGroup", "ModelPackageGroupName"),
           cfn("AWS::SageMaker::ModelPackageGroup", "ModelPackageGroupName")), lambda s: s.names.model_package_group),
    stage("the model package group description (training.model, pipeline name)", (*NAMES, TRAINING + "model"),
          "SageMaker CreateModelPackageGroup", sm("CreateModelPackageGroup", "ModelPackageGroupDescription"),
          lambda s: f"{s.training.model} fine-tuned by {s.finetune_pipeline()}"),
    stage("the pipeline name <project>-<stage>-finetune", NAMES, "SageMaker CreatePipeline", PIPELINE,
          lambda s: s.finetune_pipeline()),
    stage("the pipeline name <project>-<stage>-stage-weights", NAMES, "SageMaker CreatePipeline", PIPELINE,
          lambda s: s.staging_pipeline()),
    # Deploy-time lookups of a registered model (custom resources).
    serving("weights.model_package_group", "SageMaker ListModelPackages",
            sm("ListModelPackages", "ModelPackageGroupName"), lambda s: s.weights.model_package_group),
    serving("weights.model_package_arn", "SageMaker DescribeModelPackage",
            sm("DescribeModelPackage", "ModelPackageName"), lambda s: s.weights.model_package_arn),
    # Scaling.
    stage("the scaling policy name <project>-<stage>-<metric>", NAMES,
          "Application Auto Scaling PutScalingPolicy", ("application-autoscaling:PutScalingPolicy:PolicyName",),
          _scaling_policy),
    stage("the inference component name <project>-<stage>-<component>",
          (*NAMES, SERVING + "components.name", SERVING + "components.adapters.name"),
          "SageMaker CreateInferenceComponent",
          (*sm("CreateInferenceComponent", "InferenceComponentName"),
           cfn("AWS::SageMaker::InferenceComponent", "InferenceComponentName")), _longest_component_name),
    stage("the scalable target endpoint/<project>-<stage>/variant/AllTraffic", NAMES,
          "Application Auto Scaling RegisterScalableTarget",
          ("application-autoscaling:RegisterScalableTarget:ResourceId",),
          lambda s: f"endpoint/{s.names.endpoint}/variant/{endpoint_settings.VARIANT}" if s.scales() else None),
    # IAM.
    stage("the smoke-test role name <project>-<stage>-smoke-test", NAMES, "IAM CreateRole", ROLE, _smoke_test_role),
    stage("the smoke-test runner role name <project>-<stage>-smoke-test-runner", NAMES, "IAM CreateRole", ROLE,
          _smoke_test_runner_role),
    # The promotion pipeline.
    platform("project (the promotion pipeline <project>-promotion)", ("project",), "CodePipeline CreatePipeline",
             ("codepipeline:CreatePipeline:pipeline.name",),
             lambda c: naming.promotion_pipeline(c.project) if c.pipeline else None),
    platform("pipeline.source", ("pipeline.source.*",), "CodePipeline CreatePipeline",
             ("codepipeline:CreatePipeline:pipeline.stages.actions.configuration",), _source_configuration),
    # train.py's start-up.
    training("sequence_length", "train.py start-up", (), lambda t: t.sequence_length, MODEL_CONTEXT),
    training("seed", "train.py start-up", (), lambda t: t.seed, TORCH_SEED),
)
# fmt: on

# Config fields that reach no API member with a limit, or are checked elsewhere; each with the reason.
UNCONSTRAINED: dict[str, str] = {
    "project": "a name prefix: its own pattern (fields.py), and the names built from it are checked above",
    "tags": "fields.py's tag-key and tag-value validators state the rules every service applies to tags",
    "pipeline.account": "a 12-digit account id (fields.py)",
    "pipeline.region": "the CDK's region list (fields.py) and the CloudFormation resource types there "
    "(core/region_support.py)",
    "pipeline.approval_before": "stage names, checked against the file's stages",
    "pipeline.smoke_test_after": "stage names, checked against the file's stages",
    "pipeline.trigger_on_model_approval": "a switch: no API value",
    "stages.*.account": "a 12-digit account id (fields.py)",
    "stages.*.region": "the images this stage needs and the CloudFormation resource types of its stacks "
    "(core/region_support.py)",
    "stages.*.removal_policy": "a CDK removal policy: no API value",
    "stages.*.tags": "fields.py's tag-key and tag-value validators",
    TRAINING + "model": "a key of the model catalog; the staging volume derived from it is checked above",
    TRAINING + "processes_per_host": "SMP's layout rules (at most one process per GPU)",
    TRAINING + "smp.*": "SMP's own rules at synth (core/training_job.py, training/finetune/layout.py)",
    TRAINING + "perplexity_threshold": "a pipeline parameter's default, compared by the condition step: no limit",
    TRAINING + "spot.enabled": "a switch (its wait time is checked above)",
    TRAINING + "pretrained.revision": "a commit (40 hex digits): the staging pipeline's revision, far below "
    "ContainerArguments' 256 characters",
    TRAINING + "pretrained.allow_pickle": "a switch: which weight files the staging step accepts",
    SERVING + "engine": "chooses the image (core/region_support.py checks the region has it)",
    SERVING + "model": "a key of the model catalog; sizing checks it against the instance",
    SERVING + "dtype": "serving.properties, read by the handler's own parser at synth (sizing, checkpoint rules)",
    SERVING + "tensor_parallel_degree": "divides the GPUs and the attention heads (serving.py)",
    SERVING + "weights.source": "chooses where the weights come from: no API value",
    SERVING + "network_isolation": "EnableNetworkIsolation, a boolean: no limit",
    SERVING + "weights.checkpoint": "a key of the model's checkpoint catalog",
    SERVING + "weights.revision": "a commit (40 hex digits): the staging pipeline's revision, far below "
    "ContainerArguments' 256 characters",
    SERVING + "weights.allow_pickle": "a switch: which weight files the staging step accepts",
    SERVING + "weights.from_stage": "a stage of the file (core/config/promotion.py): names its model package group, "
    "which every stage's rules check",
    SERVING + "weights.version": "a model package version, a positive integer: part of the ARN the promotion "
    "handler describes, no limit of its own",
    SERVING + "components.adapters.weights.from_stage": "as serving.weights.from_stage",
    SERVING + "components.adapters.weights.version": "as serving.weights.version",
    SERVING + "data_capture_expiry_days": "an S3 lifecycle expiration in days: a positive integer, no maximum in S3's "
    "model",
    SERVING + "max_new_tokens": "serving.properties: below the model's context (serving.py)",
    SERVING + "max_batch_size": "serving.properties: sized into the GPU memory check",
    SERVING + "context_tokens": "serving.properties (max_model_len, context_length): at most the model's context, "
    "sized into the GPU memory check (serving.py)",
    SERVING + "autoscaling.metric": "chooses the predefined metric of the target-tracking policy: no value of its own",
    SERVING + "autoscaling.concurrent_requests_per_copy": "TargetValue (MetricScale): no limit in the model",
    SERVING + "autoscaling.invocations_per_instance_per_minute": "TargetValue (MetricScale): no limit in the model",
    SERVING + "autoscaling.scale_out_cooldown_seconds": "Cooldown: no limit in Application Auto Scaling's model",
    SERVING + "autoscaling.scale_in_cooldown_seconds": "Cooldown: no limit in Application Auto Scaling's model",
    SERVING + "components.model": "as serving.model: each component's effective serving config runs every serving "
    "check and rule",
    SERVING + "components.dtype": "as serving.dtype, checked in the component's effective serving config",
    SERVING + "components.tensor_parallel_degree": "NumberOfAcceleratorDevicesRequired (at least 1): divides the GPUs "
    "and heads, checked in the component's effective serving config",
    SERVING + "components.weights.*": "as serving.weights, checked in the component's effective serving config",
    SERVING + "components.max_batch_size": "as serving.max_batch_size, sized into the component's GPU memory check",
    SERVING + "components.min_copies": "CopyCount and the scalable target's MinCapacity: 0 or more, no maximum in the "
    "models",
    SERVING + "components.max_copies": "the scalable target's MaxCapacity (no limit in the model); every copy must "
    "find a place on max_instances instances (components.py)",
    SERVING + "components.max_loras": "vLLM's max_loras, a serving.properties key: at most the adapters' number, "
    "sized into the component's GPU memory check (core/config/lora_serving.py)",
    SERVING + "components.max_lora_rank": "vLLM's max_lora_rank, one of its ranks (a Literal): serving.properties",
    SERVING + "components.adapters.rank": "at most max_lora_rank and vLLM's 512 (core/config/lora_serving.py): sizes "
    "the slots",
    SERVING + "components.adapters.target_modules": "layer names of the model's architecture "
    "(core/config/lora_serving.py)",
    SERVING + "components.adapters.weights.source": "chooses where the adapter's archive comes from: no API value",
    SERVING + "components.adapters.weights.model_package_group": "ListModelPackages' ModelPackageGroupName, its "
    "pattern and 63-character length enforced by the field's own pattern",
    SERVING + "components.adapters.weights.model_package_arn": "DescribeModelPackage's ModelPackageName: the field's "
    "pattern is a model package version ARN",
    SERVING + "components.adapters.weights.s3_uri": "the adapter component's Container.ArtifactUrl: the field's "
    "pattern is an S3 .tar.gz object; ArtifactUrl's 1024-character maximum is not yet a rule (aws_api_limits.json "
    "lacks the member)",
    SERVING + "alarms.latency_p90_seconds": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.error_5xx_per_minute": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.gpu_memory_percent": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.disk_percent": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.emails": "SNS Subscribe's Endpoint: no limit in SNS's model",
}
