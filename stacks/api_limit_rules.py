"""The table of stacks/api_limits.py: each config field, or value derived from one, and the API member it reaches.

Read it as "this field becomes that member of that call". Members name keys of stacks/catalog/aws_api_limits.json
(botocore's `<service>:<Operation>:<Member.Path>`, CloudFormation's `cfn:<Type>:<Property.Path>`). Fields that reach
no API, or reach one with no limit, are listed in UNCONSTRAINED with the reason; a test checks that every config
field is in one or the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stacks.api_limits import Limit, Rule

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
    """One stage of the file, and the names the stacks build from the project and stage names (stacks/stage.py,
    stacks/serving_stack.py, stacks/constructs/lmi_endpoint.py; a test compares them with a synthesized stage)."""

    config: Any
    name: str

    @property
    def prefix(self) -> str:
        return f"{self.config.project}-{self.name}"

    @property
    def training(self) -> Any:
        return self.config.stages[self.name].training

    @property
    def serving(self) -> Any:
        return self.config.stages[self.name].serving

    def finetune_pipeline(self) -> str:
        return f"{self.prefix}-finetune"

    def staging_pipeline(self) -> str:
        return f"{self.prefix}-stage-weights"

    def smoke_tested(self) -> bool:
        pipeline = self.config.pipeline
        return pipeline is not None and self.name in pipeline.smoke_test_after

    def scales(self) -> bool:
        return self.serving.autoscaling.max_instances > self.serving.autoscaling.min_instances


def _smoke_test_role(stage: Stage) -> str | None:
    from stacks.serving_stack import smoke_test_role_name

    return smoke_test_role_name(stage.prefix) if stage.smoke_tested() else None


def _smoke_test_runner_role(stage: Stage) -> str | None:
    from stacks.serving_stack import smoke_test_runner_role_name

    return smoke_test_runner_role_name(stage.prefix) if stage.smoke_tested() else None


def _staging_volume(stage: Stage) -> int:
    from stacks import sizing
    from stacks.constructs.training_pipeline.definition import staged_repositories

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
    from stacks.training_job import hyperparameters, smp_parameters

    flags = hyperparameters(
        training,
        max_steps=training.max_steps,
        learning_rate=training.learning_rate,
        train_batch_size=training.train_batch_size,
    )
    return {
        **{name: json.dumps(value) for name, value in flags.items()},
        "mp_parameters": json.dumps(smp_parameters(training)),
    }


def _routing(serving: Any) -> str:
    from stacks.constructs.lmi_endpoint import ROUTING

    return ROUTING[serving.routing]


def _traffic(serving: Any) -> str:
    from stacks.constructs.lmi_endpoint import TRAFFIC

    return TRAFFIC[serving.deployment.traffic]


def _model_environment(serving: Any) -> dict[str, str] | None:
    if serving.weights.source != "s3":
        return None  # the other sources' locations are deploy-time values
    key = {"deepspeed": "WEIGHTS_S3_URI", "vllm": "OPTION_MODEL_ID"}[serving.engine]
    return {key: serving.weights.s3_uri, "TENSOR_PARALLEL_DEGREE": str(serving.tensor_parallel_degree)}


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
        )
    ),
    TRAINING + "smp.*",
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
    serving("weights.s3_uri", "SageMaker CreateModel", sm("CreateModel", "PrimaryContainer.Environment"),
            _model_environment, fields=(SERVING + "weights.s3_uri", SERVING + "tensor_parallel_degree")),
    serving("instance_type", ENDPOINT_CONFIG, sm("CreateEndpointConfig", VARIANT + "InstanceType"),
            lambda s: s.instance_type),
    serving("autoscaling.min_instances", ENDPOINT_CONFIG, sm("CreateEndpointConfig", VARIANT + "InitialInstanceCount"),
            lambda s: s.autoscaling.min_instances),
    serving("volume_size_gib", ENDPOINT_CONFIG,
            (*sm("CreateEndpointConfig", VARIANT + "VolumeSizeInGB"),
             cfn("AWS::SageMaker::EndpointConfig", VARIANT + "VolumeSizeInGB")),
            lambda s: s.volume_size_gib),
    serving("download_timeout_seconds", ENDPOINT_CONFIG,
            (*sm("CreateEndpointConfig", VARIANT + "ModelDataDownloadTimeoutInSeconds"),
             cfn("AWS::SageMaker::EndpointConfig", VARIANT + "ModelDataDownloadTimeoutInSeconds")),
            lambda s: s.download_timeout_seconds),
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
          (*sm("CreateEndpoint", "EndpointName"), cfn("AWS::SageMaker::Endpoint", "EndpointName")), lambda s: s.prefix),
    # The model registry and the pipelines.
    stage("the model package group name <project>-<stage>", NAMES, "SageMaker CreateModelPackageGroup",
          (*sm("CreateModelPackageGroup", "ModelPackageGroupName"),
           cfn("AWS::SageMaker::ModelPackageGroup", "ModelPackageGroupName")), lambda s: s.prefix),
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
    stage("the scaling policy name <project>-<stage>-invocations-per-instance", NAMES,
          "Application Auto Scaling PutScalingPolicy", ("application-autoscaling:PutScalingPolicy:PolicyName",),
          lambda s: f"{s.prefix}-invocations-per-instance" if s.scales() else None),
    stage("the scalable target endpoint/<project>-<stage>/variant/AllTraffic", NAMES,
          "Application Auto Scaling RegisterScalableTarget",
          ("application-autoscaling:RegisterScalableTarget:ResourceId",),
          lambda s: f"endpoint/{s.prefix}/variant/AllTraffic" if s.scales() else None),
    # IAM.
    stage("the smoke-test role name <project>-<stage>-smoke-test", NAMES, "IAM CreateRole", ROLE, _smoke_test_role),
    stage("the smoke-test runner role name <project>-<stage>-smoke-test-runner", NAMES, "IAM CreateRole", ROLE,
          _smoke_test_runner_role),
    # The promotion pipeline.
    platform("project (the promotion pipeline <project>-promotion)", ("project",), "CodePipeline CreatePipeline",
             ("codepipeline:CreatePipeline:pipeline.name",),
             lambda c: f"{c.project}-promotion" if c.pipeline else None),
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
    "(stacks/region_support.py)",
    "pipeline.approval_before": "stage names, checked against the file's stages",
    "pipeline.smoke_test_after": "stage names, checked against the file's stages",
    "pipeline.trigger_on_model_approval": "a switch: no API value",
    "stages.*.account": "a 12-digit account id (fields.py)",
    "stages.*.region": "the images this stage needs and the CloudFormation resource types of its stacks "
    "(stacks/region_support.py)",
    "stages.*.removal_policy": "a CDK removal policy: no API value",
    "stages.*.tags": "fields.py's tag-key and tag-value validators",
    TRAINING + "model": "a key of the model catalog; the staging volume derived from it is checked above",
    TRAINING + "processes_per_host": "SMP's layout rules (at most one process per GPU)",
    TRAINING + "smp.*": "SMP's own rules at synth (stacks/training_job.py, training/finetune/layout.py)",
    TRAINING + "perplexity_threshold": "a pipeline parameter's default, compared by the condition step: no limit",
    TRAINING + "spot.enabled": "a switch (its wait time is checked above)",
    TRAINING + "pretrained.revision": "a commit (40 hex digits): the staging pipeline's revision, far below "
    "ContainerArguments' 256 characters",
    TRAINING + "pretrained.allow_pickle": "a switch: which weight files the staging step accepts",
    SERVING + "engine": "chooses the image (stacks/region_support.py checks the region has it)",
    SERVING + "model": "a key of the model catalog; sizing checks it against the instance",
    SERVING + "dtype": "serving.properties, read by the handler's own parser at synth (sizing, checkpoint rules)",
    SERVING + "tensor_parallel_degree": "divides the GPUs and the attention heads (serving.py)",
    SERVING + "weights.source": "chooses where the weights come from: no API value",
    SERVING + "weights.checkpoint": "a key of the model's checkpoint catalog",
    SERVING + "weights.revision": "a commit (40 hex digits): the staging pipeline's revision, far below "
    "ContainerArguments' 256 characters",
    SERVING + "weights.allow_pickle": "a switch: which weight files the staging step accepts",
    SERVING + "data_capture_expiry_days": "an S3 lifecycle expiration in days: a positive integer, no maximum in S3's "
    "model",
    SERVING + "max_new_tokens": "serving.properties: below the model's context (serving.py)",
    SERVING + "max_batch_size": "serving.properties: sized into the GPU memory check",
    SERVING + "autoscaling.max_instances": "Application Auto Scaling's ResourceCapacity has no limit; at least "
    "min_instances (serving.py)",
    SERVING + "autoscaling.invocations_per_instance_per_minute": "TargetValue (MetricScale): no limit in the model",
    SERVING + "autoscaling.scale_out_cooldown_seconds": "Cooldown: no limit in Application Auto Scaling's model",
    SERVING + "autoscaling.scale_in_cooldown_seconds": "Cooldown: no limit in Application Auto Scaling's model",
    SERVING + "alarms.latency_p90_seconds": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.error_5xx_per_minute": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.gpu_memory_percent": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.disk_percent": "an alarm Threshold: no limit in CloudWatch's model",
    SERVING + "alarms.emails": "SNS Subscribe's Endpoint: no limit in SNS's model",
}
