"""The API-limit mechanism: every rule refuses a value just past its limit and takes the limit itself; every config
field is mapped to the API member it reaches or listed with the reason it needs none; the committed tables are
botocore's and cfn-lint's; the names the rules derive are the names the stacks use."""

from __future__ import annotations

import re
import typing
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from core import api_limits, endpoint_settings
from core.api_limits import aws_tables
from core.api_limits import limit as api_limit
from core.api_limits.rules import UNCONSTRAINED, Stage
from core.catalog import models
from core.config import (
    ConfigError,
    PlatformConfig,
    ServingConfig,
    SpotConfig,
    TrainingConfig,
    VpcConfig,
    load_config,
)
from core.config.components import ComponentConfig
from core.config.fields import REGIONS_TABLE
from core.config.serving import AutoscalingConfig, DeploymentConfig, WeightsConfig
from generators import aws_tables as table_generator
from tests.cdk_assembly import REPO

TRAINING, SERVING = TrainingConfig(), ServingConfig()
ARN = "arn:aws:sagemaker:us-east-1:111111111111:model-package/llm/3"


def training(**update):
    return TrainingConfig().model_copy(update=update)


def serving(**update):
    return ServingConfig().model_copy(update=update)


def stage(project="llm", name="dev", *, serving_config=SERVING, pipeline=None, token_secret=None):
    stages = {name: SimpleNamespace(training=TRAINING, serving=serving_config, huggingface_token_secret=token_secret)}
    return Stage(SimpleNamespace(project=project, stages=stages, pipeline=pipeline), name)


def platform(project="llm", **source):
    pipeline = SimpleNamespace(source=SimpleNamespace(connection_arn=None, repository=None, branch="main", **source))
    return SimpleNamespace(project=project, pipeline=pipeline)


SMOKE_TESTED = SimpleNamespace(smoke_test_after=("d",))
SCALING = ServingConfig(autoscaling={"min_instances": 1, "max_instances": 2})
COMPONENTS = (ComponentConfig(name="c"),)


def with_components(**scaling):
    return serving(components=COMPONENTS, autoscaling=AutoscalingConfig.model_construct(**scaling))


def spot(wait):
    return SpotConfig.model_construct(enabled=True, max_wait_hours=wait)


def vpc(subnets=1, groups=1):
    return VpcConfig.model_construct(
        subnet_ids=tuple(f"subnet-{i:08x}" for i in range(subnets)),
        security_group_ids=tuple(f"sg-{i:08x}" for i in range(groups)),
    )


def deployment(**fields):
    return DeploymentConfig.model_construct(**{**DeploymentConfig().model_dump(), **fields})


def weights(**fields):
    return WeightsConfig.model_construct(**{**WeightsConfig().model_dump(), **fields})


def mapped_to_a_word_sagemaker_lacks(table: str, word: str):
    """A past-the-limit builder for rules whose value is our word mapped to SageMaker's (core/endpoint_settings.py's tables)."""

    def build(monkeypatch):
        monkeypatch.setitem(getattr(endpoint_settings, table), word, "ROUND_ROBIN")
        return serving(routing=word) if table == "ROUTING" else serving(deployment=deployment(traffic=word))

    return build


S3 = "s3://shared/"
SEED_MAX = (2**64 - 1 - TRAINING.max_steps) // 1_000_003

# rule id -> (a subject just past the limit, the subject at the limit). Lambdas: built when the test runs.
CASES: dict[str, tuple] = {
    "instance_type -> SageMaker CreateTrainingJob ResourceConfig.InstanceType":
        (lambda: training(instance_type="ml.p4d.48xlarge"), lambda: training(instance_type="ml.p5.48xlarge")),
    "instance_count -> SageMaker CreateTrainingJob ResourceConfig.InstanceCount":
        (lambda: training(instance_count=-1), lambda: training(instance_count=0)),
    "volume_size_gib -> SageMaker CreateTrainingJob ResourceConfig.VolumeSizeInGB":
        (lambda: training(volume_size_gib=16385), lambda: training(volume_size_gib=16384)),
    "max_runtime_hours -> SageMaker CreateTrainingJob StoppingCondition.MaxRuntimeInSeconds":
        (lambda: training(max_runtime_hours=673), lambda: training(max_runtime_hours=672)),
    "spot.max_wait_hours -> SageMaker CreateTrainingJob StoppingCondition.MaxWaitTimeInSeconds":
        (lambda: training(spot=spot(23)), lambda: training(spot=spot(24))),
    "vpc.subnet_ids -> SageMaker CreateTrainingJob VpcConfig.Subnets":
        (lambda: training(vpc=vpc(subnets=17)), lambda: training(vpc=vpc(subnets=16))),
    "vpc.security_group_ids -> SageMaker CreateTrainingJob VpcConfig.SecurityGroupIds":
        (lambda: training(vpc=vpc(groups=6)), lambda: training(vpc=vpc(groups=5))),
    "the hyperparameters (train.py's flags, smp) -> SageMaker CreateTrainingJob HyperParameters":
        # Each value is sent as JSON: a string gains its two quotes.
        (lambda: training(lr_decay_style="x" * 2499), lambda: training(lr_decay_style="x" * 2498)),
    "processing_instance_type -> SageMaker CreateProcessingJob ProcessingResources.ClusterConfig.InstanceType":
        (lambda: training(processing_instance_type="ml.p4d.24xlarge"),
         lambda: training(processing_instance_type="ml.p5.4xlarge")),
    "evaluate_instance_type -> SageMaker CreateProcessingJob ProcessingResources.ClusterConfig.InstanceType":
        (lambda: training(evaluate_instance_type="ml.p5.48xlarge"),
         lambda: training(evaluate_instance_type="ml.g6e.48xlarge")),
    "max_runtime_hours -> SageMaker CreateProcessingJob StoppingCondition.MaxRuntimeInSeconds":
        (lambda: training(max_runtime_hours=217), lambda: training(max_runtime_hours=216)),
    "instance_type -> SageMaker CreateModelPackage InferenceSpecification.SupportedRealtimeInferenceInstanceTypes":
        (lambda: serving(instance_type="ml.p3dn.24xlarge"), lambda: serving(instance_type="ml.p4de.24xlarge")),
    "weights.s3_uri -> SageMaker CreateModel PrimaryContainer.ModelDataSource.S3DataSource.S3Uri":
        (lambda: serving(weights=weights(source="s3", s3_uri=S3 + "w" * 1013)),
         lambda: serving(weights=weights(source="s3", s3_uri=S3 + "w" * 1012))),
    "the Model's environment (serving.properties keys as OPTION_*) -> SageMaker CreateModel "
    "PrimaryContainer.Environment":
        # Each value is at most 1024 characters: OPTION_MAX_NEW_TOKENS carries the number's digits.
        (lambda: serving(max_new_tokens=10**1024), lambda: serving(max_new_tokens=10**1023)),
    "vpc.subnet_ids -> SageMaker CreateModel VpcConfig.Subnets":
        (lambda: serving(vpc=vpc(subnets=17)), lambda: serving(vpc=vpc(subnets=16))),
    "vpc.security_group_ids -> SageMaker CreateModel VpcConfig.SecurityGroupIds":
        (lambda: serving(vpc=vpc(groups=6)), lambda: serving(vpc=vpc(groups=5))),
    "instance_type -> SageMaker CreateEndpointConfig ProductionVariants.InstanceType":
        (lambda: serving(instance_type="ml.p3dn.24xlarge"), lambda: serving(instance_type="ml.p3.16xlarge")),
    "autoscaling.min_instances -> SageMaker CreateEndpointConfig ProductionVariants.InitialInstanceCount":
        (lambda: serving(autoscaling=AutoscalingConfig.model_construct(min_instances=0, max_instances=1)),
         lambda: serving(autoscaling=AutoscalingConfig.model_construct(min_instances=1, max_instances=1))),
    "autoscaling.min_instances -> SageMaker CreateEndpointConfig ProductionVariants.ManagedInstanceScaling."
    "MinInstanceCount":
        (lambda: with_components(min_instances=-1, max_instances=1),
         lambda: with_components(min_instances=0, max_instances=1)),
    "autoscaling.max_instances -> SageMaker CreateEndpointConfig ProductionVariants.ManagedInstanceScaling."
    "MaxInstanceCount":
        (lambda: with_components(min_instances=0, max_instances=0),
         lambda: with_components(min_instances=0, max_instances=1)),
    "volume_size_gib -> SageMaker CreateEndpointConfig ProductionVariants.VolumeSizeInGB":
        (lambda: serving(volume_size_gib=513), lambda: serving(volume_size_gib=512)),
    "download_timeout_seconds -> SageMaker CreateEndpointConfig ProductionVariants.ModelDataDownloadTimeoutInSeconds":
        (lambda: serving(download_timeout_seconds=59), lambda: serving(download_timeout_seconds=60)),
    "startup_timeout_seconds -> SageMaker CreateEndpointConfig "
    "ProductionVariants.ContainerStartupHealthCheckTimeoutInSeconds":
        (lambda: serving(startup_timeout_seconds=3601), lambda: serving(startup_timeout_seconds=3600)),
    "routing -> SageMaker CreateEndpointConfig ProductionVariants.RoutingConfig.RoutingStrategy":
        (mapped_to_a_word_sagemaker_lacks("ROUTING", "round_robin"), lambda: serving(routing="random")),
    "data_capture_percent -> SageMaker CreateEndpointConfig DataCaptureConfig.InitialSamplingPercentage":
        (lambda: serving(data_capture_percent=101), lambda: serving(data_capture_percent=100)),
    "deployment.traffic -> SageMaker CreateEndpoint "
    "DeploymentConfig.BlueGreenUpdatePolicy.TrafficRoutingConfiguration.Type":
        (mapped_to_a_word_sagemaker_lacks("TRAFFIC", "blue_green"),
         lambda: serving(deployment=deployment(traffic="linear", step_percent=10))),
    "deployment.step_percent -> SageMaker CreateEndpoint "
    "DeploymentConfig.BlueGreenUpdatePolicy.TrafficRoutingConfiguration.CanarySize.Value":
        (lambda: serving(deployment=deployment(traffic="canary", step_percent=51)),
         lambda: serving(deployment=deployment(traffic="canary", step_percent=50))),
    "deployment.step_percent -> SageMaker CreateEndpoint "
    "DeploymentConfig.BlueGreenUpdatePolicy.TrafficRoutingConfiguration.LinearStepSize.Value":
        (lambda: serving(deployment=deployment(traffic="linear", step_percent=9)),
         lambda: serving(deployment=deployment(traffic="linear", step_percent=10))),
    "deployment.wait_seconds -> SageMaker CreateEndpoint "
    "DeploymentConfig.BlueGreenUpdatePolicy.TrafficRoutingConfiguration.WaitIntervalInSeconds":
        (lambda: serving(deployment=deployment(wait_seconds=3601)),
         lambda: serving(deployment=deployment(wait_seconds=3600))),
    "deployment.termination_wait_seconds -> SageMaker CreateEndpoint "
    "DeploymentConfig.BlueGreenUpdatePolicy.TerminationWaitInSeconds":
        (lambda: serving(deployment=deployment(termination_wait_seconds=-1)),
         lambda: serving(deployment=deployment(termination_wait_seconds=0))),
    # Names: the project (24) and stage (20) name limits keep them short; the rules still hold without those.
    "the endpoint name <project>-<stage> -> SageMaker CreateEndpoint EndpointName":
        (lambda: stage("p" * 43, "s" * 20), lambda: stage("p" * 42, "s" * 20)),
    "the model package group name <project>-<stage> -> SageMaker CreateModelPackageGroup ModelPackageGroupName":
        (lambda: stage("p" * 40, "s" * 23), lambda: stage("p" * 40, "s" * 22)),
    "the model package group description (training.model, pipeline name) -> SageMaker CreateModelPackageGroup "
    "ModelPackageGroupDescription":
        # "gpt-j-6b fine-tuned by " (23) + project + "-dev-finetune" (13)
        (lambda: stage("p" * 989), lambda: stage("p" * 988)),
    "huggingface_token_secret (the secret the storage stack creates) -> Secrets Manager CreateSecret Name":
        (lambda: stage(token_secret="t" * 513), lambda: stage(token_secret="t" * 512)),
    "the pipeline name <project>-<stage>-finetune -> SageMaker CreatePipeline PipelineName":
        (lambda: stage("p" * 246, "d"), lambda: stage("p" * 245, "d")),
    "the pipeline name <project>-<stage>-stage-weights -> SageMaker CreatePipeline PipelineName":
        (lambda: stage("p" * 241, "d"), lambda: stage("p" * 240, "d")),
    "weights.model_package_group -> SageMaker ListModelPackages ModelPackageGroupName":
        (lambda: serving(weights=weights(source="latest_approved", model_package_group="group-")),
         lambda: serving(weights=weights(source="latest_approved", model_package_group="g" * 63))),
    "weights.model_package_arn -> SageMaker DescribeModelPackage ModelPackageName":
        (lambda: serving(weights=weights(source="model_package", model_package_arn=ARN.replace("llm", "l" * 64))),
         lambda: serving(weights=weights(source="model_package", model_package_arn=ARN.replace("llm", "l" * 63)))),
    # Scaling on concurrency (the default): "-d" + "-concurrent-requests" after the project.
    "the scaling policy name <project>-<stage>-<metric> -> Application Auto Scaling PutScalingPolicy PolicyName":
        (lambda: stage("p" * 235, "d", serving_config=SCALING), lambda: stage("p" * 234, "d", serving_config=SCALING)),
    "the inference component name <project>-<stage>-<component> -> SageMaker CreateInferenceComponent "
    "InferenceComponentName":
        (lambda: stage("p" * 60, "d", serving_config=serving(components=COMPONENTS)),
         lambda: stage("p" * 59, "d", serving_config=serving(components=COMPONENTS))),
    "the scalable target endpoint/<project>-<stage>/variant/AllTraffic -> Application Auto Scaling "
    "RegisterScalableTarget ResourceId":
        (lambda: stage("p" * 1571, "d", serving_config=SCALING),
         lambda: stage("p" * 1570, "d", serving_config=SCALING)),
    "the smoke-test role name <project>-<stage>-smoke-test -> IAM CreateRole RoleName":
        (lambda: stage("p" * 52, "d", pipeline=SMOKE_TESTED), lambda: stage("p" * 51, "d", pipeline=SMOKE_TESTED)),
    "the smoke-test runner role name <project>-<stage>-smoke-test-runner -> IAM CreateRole RoleName":
        (lambda: stage("p" * 45, "d", pipeline=SMOKE_TESTED), lambda: stage("p" * 44, "d", pipeline=SMOKE_TESTED)),
    "project (the promotion pipeline <project>-promotion) -> CodePipeline CreatePipeline pipeline.name":
        (lambda: platform("p" * 91, bucket="b", key="k"), lambda: platform("p" * 90, bucket="b", key="k")),
    "pipeline.source -> CodePipeline CreatePipeline pipeline.stages.actions.configuration":
        (lambda: platform(bucket="b", key="k" * 1001), lambda: platform(bucket="b", key="k" * 1000)),
    "sequence_length -> train.py start-up above the model's context (catalog context_tokens)":
        (lambda: training(sequence_length=2049), lambda: training(sequence_length=2048)),
    "seed -> train.py start-up seed x 1000003 + epoch outside [-2^63, 2^64 - 1]":
        (lambda: training(seed=SEED_MAX + 1), lambda: training(seed=SEED_MAX)),
}  # fmt: skip
STAGING_VOLUME = (
    "the weights-staging volume (sized from training.model and the served weights) -> SageMaker CreateProcessingJob "
    "ProcessingResources.ClusterConfig.VolumeSizeInGB"
)
RULES = {rule.id: rule for rule in api_limits.RULES}


def test_every_rule_has_a_case():
    assert sorted(set(RULES) - set(CASES) - {STAGING_VOLUME}) == []
    assert sorted(set(CASES) - set(RULES)) == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_every_rule_refuses_a_value_just_past_its_limit(rule_id, monkeypatch):
    rule = RULES[rule_id]
    past, at = CASES[rule_id]
    problems = rule.problems(past(monkeypatch) if past.__code__.co_argcount else past())
    assert problems, rule_id
    assert all(problem.startswith(f"{rule.field}: ") for problem in problems), problems
    assert rule.problems(at()) == [], rule_id


def test_the_staging_volume_rule_refuses_weights_past_a_processing_volume(monkeypatch):
    # 4.5 trillion parameters: staged at fp32, the weights need more than a processing job's 16 TiB volume.
    giant = models.Model(
        adapters_summary="(a test model)",
        name="giant",
        hf_id="org/giant",
        architecture="gptj",
        parameters=4_500_000_000_000,
        layers=96,
        hidden_size=65536,
        attention_heads=512,
        context_tokens=2048,
        vocab_size=50400,
    )
    monkeypatch.setitem(models.MODELS, "giant", giant)
    subject = stage()
    assert RULES[STAGING_VOLUME].problems(subject) == []
    subject.config.stages["dev"].training = training(model="giant")
    (problem,) = RULES[STAGING_VOLUME].problems(subject)
    assert "is above the maximum 16384, the limit of SageMaker CreateProcessingJob" in problem


@pytest.mark.bad_input("config")
def test_a_promotion_source_key_codepipeline_refuses_stops_synth_naming_the_field(tmp_path):
    from aws_cdk import App

    import app as cdk_app

    config = load_config(REPO / "config/examples/promotion.yaml")
    source = config.pipeline.source.model_copy(
        update={"connection_arn": None, "repository": None, "bucket": "src", "key": "k" * 1001}
    )
    config = config.model_copy(update={"pipeline": config.pipeline.model_copy(update={"source": source})})
    with pytest.raises(ConfigError, match=r"pipeline\.source: .*'S3ObjectKey'.* has 1001 characters, more than 1000"):
        cdk_app.build_app(App(), config, config_path="promotion.yaml")


def _leaves(model: type[BaseModel], prefix: str) -> list[str]:
    found = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = field.annotation
        args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
        nested = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if typing.get_origin(annotation) is dict and isinstance(typing.get_args(annotation)[1], type):
            value = typing.get_args(annotation)[1]
            if issubclass(value, BaseModel):
                found += [f"{path}.*", *_leaves(value, f"{path}.*.")]
                continue
        if nested:
            found += _leaves(nested[0], f"{path}.")
        else:
            found.append(path)
    return found


def test_every_config_field_is_mapped_to_an_api_member_or_listed_with_a_reason():
    mapped = {field for rule in api_limits.RULES for field in rule.fields}

    def matches(entry: str, path: str) -> bool:
        # `*` stands for one path segment: a stage's name, or any field of the model before it.
        ours, theirs = entry.split("."), path.split(".")
        return len(ours) == len(theirs) and all(a in ("*", b) for a, b in zip(ours, theirs, strict=True))

    def covered(path: str) -> bool:
        return any(matches(entry, path) for entry in mapped | set(UNCONSTRAINED))

    leaves = _leaves(PlatformConfig, "")
    assert len(leaves) > 60
    assert [leaf for leaf in leaves if not covered(leaf)] == []
    assert [entry for entry in UNCONSTRAINED if not any(matches(entry, leaf) for leaf in leaves)] == []
    assert all(reason.strip() for reason in UNCONSTRAINED.values())


def test_the_committed_tables_are_botocores_and_cfn_lints():
    """`python -m generators.aws_tables` regenerates them; a botocore or cfn-lint bump shows up here."""
    import json

    api = table_generator.generate_api_table(api_limits.api_members())
    assert json.loads(aws_tables.API_TABLE.read_text()) == api, "run `python -m generators.aws_tables`"
    types = table_generator.generate_resource_types_table()
    assert json.loads(aws_tables.RESOURCE_TYPES_TABLE.read_text()) == types, "run `python -m generators.aws_tables`"


def test_the_committed_regions_are_the_cdks():
    """The regions a config may name are the CDK's region facts, committed so that loading a config never starts the
    CDK; a CDK bump that adds or drops a region shows up here."""
    import json

    regions = table_generator.generate_regions_table()
    assert json.loads(REGIONS_TABLE.read_text()) == regions, "run `python -m generators.aws_tables`"


def test_documented_limits_quote_the_sagemaker_api_reference():
    """Limits botocore's shapes lack are sentences of its documentation; they must still be there, word for word."""
    import botocore.loaders

    shapes = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")["shapes"]
    quoted = 0
    for rule in api_limits.RULES:
        for limit in rule.limits:
            found = re.fullmatch(r'SageMaker API reference, (\w+)\.(\w+): "(.*)"', limit.source)
            if not found:
                continue
            structure, member, sentence = found.groups()
            documentation = re.sub(r"<[^>]+>", "", shapes[structure]["members"][member]["documentation"])
            assert sentence in documentation, (structure, member)
            quoted += 1
    assert quoted == 4


def test_every_pattern_in_the_tables_can_be_evaluated():
    for member in api_limits.api_members():
        constraint = aws_tables.constraint(member)
        while constraint is not None:
            if constraint.pattern:
                api_limit.matches(constraint.pattern, "abc", full=constraint.full_match)
            constraint = constraint.member


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (r"[\p{L}\p{M}\p{Z}\p{S}\p{N}\p{P}]*", "gpt-j-6b fine-tuned by ünï", "tab\there"),
        (r"\p{Print}+", "llm-dev-invocations-per-instance", "caf\u00e9"),
        (r"[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]*", "endpoint/\U0001f600/x", "a\x00"),
        (r"([\p{L}\p{Z}\p{N}_.:/=+\-@]*)", "team: ml-1", "a|b"),
    ],
)
def test_java_patterns_are_evaluated_as_java_would(pattern, good, bad):
    assert api_limit.matches(pattern, good)
    assert not api_limit.matches(pattern, bad)


def test_the_names_the_rules_derive_are_the_names_the_stacks_use(assembly, promotion_assembly):
    config = load_config(REPO / "config/default.yaml")
    prod = Stage(config, "prod")
    training_stack = assembly.template("prod", "Training")
    outputs = {name: output["Value"] for name, output in training_stack["Outputs"].items()}
    assert outputs["FinetunePipelineName"] == prod.finetune_pipeline()
    assert outputs["StagingPipelineName"] == prod.staging_pipeline()
    assert outputs["ModelPackageGroupName"] == prod.prefix
    (endpoint,) = assembly.resources("prod", "Serving", "AWS::SageMaker::Endpoint").values()
    assert endpoint["Properties"]["EndpointName"] == prod.prefix
    (policy,) = assembly.resources("prod", "Serving", "AWS::ApplicationAutoScaling::ScalingPolicy").values()
    assert prod.scales() and policy["Properties"]["PolicyName"] == f"{prod.prefix}-concurrent-requests"
    (target,) = assembly.resources("prod", "Serving", "AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert target["Properties"]["ResourceId"] == f"endpoint/{prod.prefix}/variant/AllTraffic"
    promotion = load_config(REPO / "config/examples/promotion.yaml")
    smoke_tested = [Stage(promotion, name) for name in promotion.stages if Stage(promotion, name).smoke_tested()]
    assert smoke_tested
    for tested in smoke_tested:
        roles = promotion_assembly.resources(tested.name, "Serving", "AWS::IAM::Role").values()
        assert f"{tested.prefix}-smoke-test" in {r["Properties"].get("RoleName") for r in roles}
        runners = promotion_assembly.resources("(app)", "Pipeline", "AWS::IAM::Role").values()
        assert f"{tested.prefix}-smoke-test-runner" in {r["Properties"].get("RoleName") for r in runners}
    pipelines = promotion_assembly.resources("(app)", "Pipeline", "AWS::CodePipeline::Pipeline").values()
    assert f"{promotion.project}-promotion" in {p["Properties"].get("Name") for p in pipelines}


def test_rules_name_the_field_and_the_api_in_their_message():
    (problem,) = RULES[
        "max_runtime_hours -> SageMaker CreateProcessingJob StoppingCondition.MaxRuntimeInSeconds"
    ].problems(training(max_runtime_hours=300))
    assert problem == (
        "max_runtime_hours: 300 h (1080000 s) is above the maximum 777600, the limit of SageMaker CreateProcessingJob "
        "StoppingCondition.MaxRuntimeInSeconds (botocore 1.44.8, sagemaker shape ProcessingMaxRuntimeInSeconds); the "
        "prepare, evaluate and weights-staging jobs run under the same limit"
    )
