"""ServingStack: the LMI endpoint as CloudFormation, with the rules that make a p4d or g5 deploy succeed."""

from __future__ import annotations

import json

import pytest

from stacks.catalog.images import serving_image
from tests.cdk_assembly import REPO, synthesize

VARIANTS = REPO / "tests" / "stacks" / "fixtures" / "serving_variants.yaml"


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    return synthesize(VARIANTS, tmp_path_factory.mktemp("variants"))


def one(assembly, stage: str, type_: str) -> dict:
    (resource,) = assembly.resources(stage, "Serving", type_).values()
    return resource["Properties"]


def variant(props: dict) -> dict:
    (production_variant,) = props["ProductionVariants"]
    return production_variant


def test_model_runs_the_deepspeed_lmi_image_with_the_packaged_code_and_weights_location(assembly):
    container = one(assembly, "dev", "AWS::SageMaker::Model")["PrimaryContainer"]
    assert (
        container["Image"] == "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121"
    )
    assert "InferenceCodeArchive" in json.dumps(container["ModelDataUrl"])
    env = container["Environment"]
    assert env["TENSOR_PARALLEL_DEGREE"] == "1"
    weights = json.dumps(env["WEIGHTS_S3_URI"])
    assert "ExportsOutputRefModels" in weights and "/pretrained/gpt-j-6b/" in weights


def test_model_has_no_physical_name_so_changes_replace_it_cleanly(assembly):
    assert "ModelName" not in one(assembly, "prod", "AWS::SageMaker::Model")
    assert "EndpointConfigName" not in one(assembly, "prod", "AWS::SageMaker::EndpointConfig")


def test_endpoint_config_on_g5_has_timeouts_routing_and_no_volume_or_kms(assembly):
    props = one(assembly, "dev", "AWS::SageMaker::EndpointConfig")
    assert variant(props) == {
        "VariantName": "AllTraffic",
        "ModelName": variant(props)["ModelName"],
        "InstanceType": "ml.g5.2xlarge",
        "InitialInstanceCount": 1,
        "InitialVariantWeight": 1,
        "ModelDataDownloadTimeoutInSeconds": 600,
        "ContainerStartupHealthCheckTimeoutInSeconds": 600,
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }
    assert "KmsKeyId" not in props and "DataCaptureConfig" not in props


def test_bloom_on_p4d_gets_a_long_startup_and_no_volume_or_kms(variants):
    props = one(variants, "bloom", "AWS::SageMaker::EndpointConfig")
    assert variant(props)["ContainerStartupHealthCheckTimeoutInSeconds"] == 2820
    assert "VolumeSizeInGB" not in variant(props) and "KmsKeyId" not in props
    env = one(variants, "bloom", "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
    assert env["TENSOR_PARALLEL_DEGREE"] == "8"


def test_bloom_endpoint_reads_the_prefix_its_staging_pipeline_fills_with_the_presharded_checkpoint(variants):
    env = one(variants, "bloom", "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
    assert "/pretrained/bloom-176b-deepspeed-int8-tp8/" in json.dumps(env["WEIGHTS_S3_URI"])
    pipelines = variants.resources("bloom", "Training", "AWS::SageMaker::Pipeline").values()
    (staging,) = [p for p in pipelines if p["Properties"]["PipelineName"].endswith("-stage-weights")]
    body, _ = staging["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Sub"]
    steps = {s["Name"]: s["Arguments"] for s in json.loads(body)["Steps"]}
    bloom = steps["Stage-bloom-176b-deepspeed-int8-tp8"]
    (output,) = bloom["ProcessingOutputConfig"]["Outputs"]
    assert output["S3Output"]["S3Uri"] == "s3://${ModelsBucket}/pretrained/bloom-176b-deepspeed-int8-tp8/"
    assert bloom["AppSpecification"]["ContainerArguments"][:2] == [
        "--model_id",
        "microsoft/bloom-deepspeed-inference-int8",
    ]
    assert set(steps) == {"Stage-gpt-j-6b", "Stage-bloom-176b-deepspeed-int8-tp8"}  # the training model's, too


def test_instances_with_ebs_get_the_volume_and_the_stage_key(variants):
    props = one(variants, "ebs", "AWS::SageMaker::EndpointConfig")
    assert variant(props)["VolumeSizeInGB"] == 200
    assert "ExportsOutputFnGetAttKey" in json.dumps(props["KmsKeyId"])


def test_data_capture_goes_to_the_data_bucket_encrypted(assembly):
    capture = one(assembly, "prod", "AWS::SageMaker::EndpointConfig")["DataCaptureConfig"]
    assert capture["InitialSamplingPercentage"] == 10
    assert capture["CaptureOptions"] == [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}]
    assert "/capture" in json.dumps(capture["DestinationS3Uri"])
    assert "ExportsOutputFnGetAttKey" in json.dumps(capture["KmsKeyId"])
    assert (
        one(assembly, "staging", "AWS::SageMaker::EndpointConfig")["DataCaptureConfig"]["InitialSamplingPercentage"]
        == 100
    )


def test_endpoint_keeps_its_name_and_rolls_back_on_any_alarm(assembly):
    props = one(assembly, "prod", "AWS::SageMaker::Endpoint")
    assert props["EndpointName"] == "llm-platform-prod"
    deployment = props["DeploymentConfig"]
    assert deployment["BlueGreenUpdatePolicy"] == {
        "TrafficRoutingConfiguration": {
            "Type": "CANARY",
            "WaitIntervalInSeconds": 900,
            "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 25},
        },
        "TerminationWaitInSeconds": 600,
    }
    alarms = assembly.resources("prod", "Serving", "AWS::CloudWatch::Alarm")
    assert sorted(a["AlarmName"]["Ref"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]) == sorted(alarms)


def test_autoscaling_tracks_invocations_per_instance_between_min_and_max(assembly):
    target = one(assembly, "prod", "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["ResourceId"] == "endpoint/llm-platform-prod/variant/AllTraffic"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert "RoleARN" not in target  # the service-linked role
    policy = one(assembly, "prod", "AWS::ApplicationAutoScaling::ScalingPolicy")[
        "TargetTrackingScalingPolicyConfiguration"
    ]
    assert policy == {
        "TargetValue": 60,
        "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
        "ScaleInCooldown": 900,
        "ScaleOutCooldown": 300,
    }
    assert variant(one(assembly, "prod", "AWS::SageMaker::EndpointConfig"))["InitialInstanceCount"] == 2


def test_a_fixed_size_endpoint_has_no_scaling_resources(assembly):
    assert not assembly.resources("dev", "Serving", "AWS::ApplicationAutoScaling::ScalableTarget")


def test_alarms_watch_errors_latency_gpu_memory_and_disk_and_notify_the_topic(variants):
    alarms = {
        a["Properties"]["MetricName"]: a["Properties"]
        for a in variants.resources("ebs", "Serving", "AWS::CloudWatch::Alarm").values()
    }
    assert {
        name: (a["Namespace"], a.get("Statistic") or a.get("ExtendedStatistic"), a["Threshold"])
        for name, a in alarms.items()
    } == {
        "Invocation5XXErrors": ("AWS/SageMaker", "Sum", 1),
        "ModelLatency": ("AWS/SageMaker", "p90", 30_000_000),
        # ml.p3.16xlarge has 8 GPUs; an instance reports their utilizations summed.
        "GPUMemoryUtilization": ("/aws/sagemaker/Endpoints", "Maximum", 95 * 8),
        "DiskUtilization": ("/aws/sagemaker/Endpoints", "Maximum", 90),
    }
    for alarm in alarms.values():
        assert {"Name": "EndpointName", "Value": "variants-ebs"} in alarm["Dimensions"]
        assert alarm["AlarmActions"] == [{"Ref": next(iter(variants.resources("ebs", "Serving", "AWS::SNS::Topic")))}]


def test_alarm_topic_is_encrypted_and_tls_only(assembly):
    topic = one(assembly, "dev", "AWS::SNS::Topic")
    assert "KmsMasterKeyId" in topic
    policy = one(assembly, "dev", "AWS::SNS::TopicPolicy")["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy)


def test_dashboard_shows_latency_traffic_errors_and_instance_utilization(assembly):
    body = json.dumps(one(assembly, "dev", "AWS::CloudWatch::Dashboard")["DashboardBody"])
    for metric in [
        "ModelLatency",
        "Invocations",
        "Invocation5XXErrors",
        "GPUUtilization",
        "GPUMemoryUtilization",
        "CPUUtilization",
        "MemoryUtilization",
        "DiskUtilization",
    ]:
        assert metric in body


def test_vllm_engine_uses_the_current_lmi_image_and_names_weights_for_djl(variants):
    container = one(variants, "vllm", "AWS::SageMaker::Model")["PrimaryContainer"]
    assert container["Image"] == "763104351884.dkr.ecr.eu-west-1.amazonaws.com/djl-inference:0.35.0-lmi17.0.0-cu128"
    assert "OPTION_MODEL_ID" in container["Environment"] and "WEIGHTS_S3_URI" not in container["Environment"]


def test_weights_from_another_bucket_are_readable_by_the_endpoint_and_nothing_more(variants):
    env = one(variants, "external", "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
    assert env["WEIGHTS_S3_URI"] == "s3://shared-weights/gpt-j-6b/v3/"
    policies = variants.resources("external", "Serving", "AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if k.startswith("ReadExternalWeights")]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert [(s["Action"], s["Resource"]) for s in statements] == [
        ("s3:GetObject", "arn:aws:s3:::shared-weights/gpt-j-6b/v3/*"),
        ("s3:ListBucket", "arn:aws:s3:::shared-weights"),
    ]


def test_model_package_weights_are_read_at_deploy_time_not_at_synth(variants):
    lookup = next(iter(variants.resources("package", "Serving", "Custom::AWS").values()))["Properties"]
    call = (
        json.loads(lookup["Create"]["Fn::Join"][1][0])
        if isinstance(lookup["Create"], dict)
        else json.loads(lookup["Create"])
    )
    assert (call["service"], call["action"]) == ("SageMaker", "describeModelPackage")
    assert call["parameters"]["ModelPackageName"].endswith(":model-package/llm-platform-package/3")
    env = one(variants, "package", "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
    assert env["WEIGHTS_S3_URI"]["Fn::GetAtt"][1] == "InferenceSpecification.Containers.0.Environment.WEIGHTS_S3_URI"


def test_variant_stages_pass_cdk_nag(variants):
    assert variants.error is None, "\n".join(variants.findings())


@pytest.mark.parametrize(
    ("region", "engine", "uri"),
    [
        (
            "us-east-1",
            "deepspeed",
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121",
        ),
        (
            "cn-north-1",
            "deepspeed",
            "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/djl-inference:0.27.0-deepspeed0.12.6-cu121",
        ),
        (
            "us-gov-west-1",
            "deepspeed",
            "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121",
        ),
        (
            "cn-northwest-1",
            "vllm",
            "727897471807.dkr.ecr.cn-northwest-1.amazonaws.com.cn/djl-inference:0.35.0-lmi17.0.0-cu128",
        ),
    ],
)
def test_images_come_from_the_sdk_tables_for_every_partition(region, engine, uri):
    assert serving_image(region, engine) == uri
