"""ServingStack: the LMI endpoint as CloudFormation, with the rules that make a p4d or g5 deploy succeed."""

from __future__ import annotations

import json

import pytest

from core.catalog.images import serving_image
from core.catalog.models import MODELS
from core.config import ConfigError, load_config
from tests.cdk_assembly import REPO, render, synthesize

VARIANTS = REPO / "tests" / "infrastructure" / "fixtures" / "serving_variants.yaml"


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    return synthesize(VARIANTS, tmp_path_factory.mktemp("variants"))


def one(assembly, stage: str, type_: str) -> dict:
    (resource,) = assembly.resources(stage, "Serving", type_).values()
    return resource["Properties"]


def variant(props: dict) -> dict:
    (production_variant,) = props["ProductionVariants"]
    return production_variant


def delivered(container: dict):
    """The S3 prefix SageMaker copies to /opt/ml/model: uncompressed, the Model's one source of files."""
    source = container["ModelDataSource"]["S3DataSource"]
    assert (source["S3DataType"], source["CompressionType"]) == ("S3Prefix", "None")
    assert "ModelDataUrl" not in container and "WEIGHTS_S3_URI" not in container["Environment"]
    return source["S3Uri"]


def test_model_runs_the_deepspeed_lmi_image_on_the_delivered_weights_with_its_handler_beside_them(assembly):
    model = one(assembly, "dev", "AWS::SageMaker::Model")
    container = model["PrimaryContainer"]
    assert (
        container["Image"] == "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121"
    )
    weights = delivered(container)
    assert "ExportsOutputRefModels" in json.dumps(weights) and "/pretrained/gpt-j-6b/" in json.dumps(weights)
    env = container["Environment"]
    assert (env["TENSOR_PARALLEL_DEGREE"], env["OPTION_TENSOR_PARALLEL_DEGREE"]) == ("1", "1")
    assert env["OPTION_ENGINE"] == "DeepSpeed"
    # DJL loads the handler by its absolute path: the folder the code package wrote into that same prefix.
    (code_id,) = one_id(assembly, "dev", "Custom::CodePackage")
    assert env["OPTION_ENTRYPOINT"] == {
        "Fn::Join": ["", ["/opt/ml/model/inference/", {"Fn::GetAtt": [code_id, "Sha256"]}, "/model.py"]]
    }
    code = one(assembly, "dev", "Custom::CodePackage")
    assert (code["TargetUri"], code["Subfolder"]) == (weights, "inference/")
    assert model["EnableNetworkIsolation"] is True and "VpcConfig" not in model


def one_id(assembly, stage: str, type_: str) -> list[str]:
    return list(assembly.resources(stage, "Serving", type_))


def test_model_has_no_physical_name_so_changes_replace_it_cleanly(assembly):
    assert "ModelName" not in one(assembly, "prod", "AWS::SageMaker::Model")
    assert "EndpointConfigName" not in one(assembly, "prod", "AWS::SageMaker::EndpointConfig")


def test_endpoint_config_on_g5_has_timeouts_routing_and_no_volume_or_kms(assembly):
    props = one(assembly, "dev", "AWS::SageMaker::EndpointConfig")
    # The variant serves the stage's one Model, by the name CloudFormation gives it.
    (model_id,) = one_id(assembly, "dev", "AWS::SageMaker::Model")
    assert variant(props) == {
        "VariantName": "AllTraffic",
        "ModelName": {"Fn::GetAtt": [model_id, "ModelName"]},
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
    # 167 GiB of int8 shards: SageMaker's copy at 10 s/GiB + 2 min, the load at 5 s/GiB + 5 min (core/sizing.py).
    assert variant(props)["ModelDataDownloadTimeoutInSeconds"] == 1800
    assert variant(props)["ContainerStartupHealthCheckTimeoutInSeconds"] == 1140
    assert "VolumeSizeInGB" not in variant(props) and "KmsKeyId" not in props
    env = one(variants, "bloom", "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
    assert env["TENSOR_PARALLEL_DEGREE"] == "8"


BLOOM_INT8_COMMIT = "aa00a6626f6484a2eef68e06d1e089e4e32aa571"  # the commit the LMI reference staged


def test_bloom_endpoint_reads_the_prefix_its_staging_pipeline_fills_with_the_presharded_checkpoint(variants):
    container = one(variants, "bloom", "AWS::SageMaker::Model")["PrimaryContainer"]
    assert f"/pretrained/bloom-176b-deepspeed-int8-tp8/{BLOOM_INT8_COMMIT}/" in json.dumps(delivered(container))
    pipelines = variants.resources("bloom", "Training", "AWS::SageMaker::Pipeline").values()
    (staging,) = [p for p in pipelines if p["Properties"]["PipelineName"].endswith("-stage-weights")]
    body, _ = staging["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Sub"]
    steps = {s["Name"]: s["Arguments"] for s in json.loads(body)["Steps"]}
    arguments = steps["Stage-bloom-176b-deepspeed-int8-tp8"]["AppSpecification"]["ContainerArguments"]
    assert arguments[:6] == [
        "--model_id", "microsoft/bloom-deepspeed-inference-int8", "--revision", BLOOM_INT8_COMMIT,
        "--destination", "s3://${ModelsBucket}/pretrained/bloom-176b-deepspeed-int8-tp8/",
    ]  # fmt: skip
    assert set(steps) == {"Stage-gpt-j-6b", "Stage-bloom-176b-deepspeed-int8-tp8"}  # the training model's, too


def lookup_call(assembly, stage: str) -> tuple[str, dict, dict]:
    """The deploy-time weights lookup: (logical id, its SDK call with the bucket token left out, its resource)."""
    ((logical_id, lookup),) = assembly.resources(stage, "Serving", "Custom::AWS").items()
    create = lookup["Properties"]["Create"]
    parts = [create] if isinstance(create, str) else create["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "<bucket>" for p in parts)
    assert create == lookup["Properties"]["Update"]
    return logical_id, json.loads(text), lookup


def lookup_statements(assembly, stage: str) -> list[tuple]:
    policies = assembly.resources(stage, "Serving", "AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if k.startswith("WeightsLookupCustomResourcePolicy")]
    return [(s["Action"], s["Resource"]) for s in policy["Properties"]["PolicyDocument"]["Statement"]]


def test_staged_weights_following_main_serve_the_commit_its_record_names_read_at_deploy_time(assembly):
    logical_id, call, _ = lookup_call(assembly, "dev")
    # HeadObject returns the metadata the staging step put on main's record: the commit main had when it ran.
    assert call == {
        "service": "S3",
        "action": "headObject",
        "parameters": {"Bucket": "<bucket>", "Key": "pretrained/gpt-j-6b/main.json"},
        "outputPaths": ["Metadata.commit"],
        # Read again on each release; a deploy by hand keeps what it found (as for latest_approved).
        "physicalResourceId": {"id": "pretrained/gpt-j-6b/main.json@manual"},
    }
    container = one(assembly, "dev", "AWS::SageMaker::Model")["PrimaryContainer"]
    (_, parts) = delivered(container)["Fn::Join"]
    assert parts[0] == "s3://" and parts[2:] == [
        "/pretrained/gpt-j-6b/",
        {"Fn::GetAtt": [logical_id, "Metadata.commit"]},  # exactly that commit's files, no other commit's
        "/",
    ]
    # The lookup may read that one object and nothing else (HeadObject decrypts nothing: no key grant).
    ((action, resource),) = lookup_statements(assembly, "dev")
    assert action == "s3:GetObject" and resource["Fn::Join"][1][1] == "/pretrained/gpt-j-6b/main.json"


def test_a_pinned_commit_is_served_as_the_config_names_it_once_its_record_exists(variants):
    logical_id, call, _ = lookup_call(variants, "bloom")
    record = f"pretrained/bloom-176b-deepspeed-int8-tp8/{BLOOM_INT8_COMMIT}.json"
    assert call["parameters"]["Key"] == record
    assert call["physicalResourceId"] == {"id": record}  # the commit is fixed: nothing to look up again
    model = next(iter(variants.resources("bloom", "Serving", "AWS::SageMaker::Model").values()))
    weights = delivered(model["Properties"]["PrimaryContainer"])
    assert weights["Fn::Join"][1][2] == f"/pretrained/bloom-176b-deepspeed-int8-tp8/{BLOOM_INT8_COMMIT}/"
    # The location is a literal, so the model waits for the record check explicitly: a staging that has not
    # finished (or never ran) stops the deploy here, not at the health check 47 minutes later.
    assert logical_id in model["DependsOn"]
    ((action, resource),) = lookup_statements(variants, "bloom")
    assert action == "s3:GetObject" and resource["Fn::Join"][1][1] == f"/{record}"


def test_weights_not_staged_by_the_platform_need_no_staging_lookup(variants):
    assert variants.resources("external", "Serving", "Custom::AWS") == {}
    _, call, _ = lookup_call(variants, "package")
    assert call["action"] == "describeModelPackage"


def test_the_staging_pipeline_and_the_endpoint_agree_on_the_keys(variants):
    # What the endpoint reads is where the step writes (stage_model.Keys, tested against the catalog's keys).
    _, call, _ = lookup_call(variants, "bloom")
    body, _ = next(
        p for p in variants.resources("bloom", "Training", "AWS::SageMaker::Pipeline").values()
        if p["Properties"]["PipelineName"].endswith("-stage-weights")
    )["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Sub"]  # fmt: skip
    steps = {s["Name"]: s["Arguments"]["AppSpecification"]["ContainerArguments"] for s in json.loads(body)["Steps"]}
    arguments = steps["Stage-bloom-176b-deepspeed-int8-tp8"]
    destination = arguments[arguments.index("--destination") + 1].removeprefix("s3://${ModelsBucket}/")
    revision = arguments[arguments.index("--revision") + 1]
    assert call["parameters"]["Key"] == f"{destination}{revision}.json"


def model_reads(assembly, stage: str, role: str) -> set[str]:
    """The models-bucket objects `role` (Training, Hosting) may read, as `<Models.Arn>/...` patterns."""
    (policy,) = [
        p
        for p in assembly.resources(stage, "Storage", "AWS::IAM::Policy").values()
        if render(p["Properties"]["Roles"]) == [f"<{role}Role>"]
    ]
    resources = [
        r
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "s3:GetObject" or s["Action"] == ["s3:GetObject"]
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    ]
    return {r for r in render(resources) if r.startswith("<Models.Arn>")}


def test_each_role_reads_only_the_staged_weights_it_needs(variants):
    # Serving a pinned commit: that commit's files, not the other commits', not the training model's.
    assert model_reads(variants, "bloom", "Hosting") == {
        f"<Models.Arn>/pretrained/bloom-176b-deepspeed-int8-tp8/{BLOOM_INT8_COMMIT}/*",
        "<Models.Arn>/trained/*",
        "<Models.Arn>/registered/*",
    }
    # The staging jobs and training run with the training role: the prefixes of what the stage stages.
    assert model_reads(variants, "bloom", "Training") == {
        "<Models.Arn>/pretrained/bloom-176b-deepspeed-int8-tp8/*",
        "<Models.Arn>/pretrained/gpt-j-6b/*",
        "<Models.Arn>/checkpoints/*",
        "<Models.Arn>/trained/*",
    }
    # Weights from elsewhere: nothing of pretrained/.
    assert model_reads(variants, "package", "Hosting") == {"<Models.Arn>/trained/*", "<Models.Arn>/registered/*"}


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"revision": "main"}, r"serving\.weights\.revision: a revision is a full commit"),
        ({"revision": "refs/pr/12"}, r"serving\.weights\.revision: a revision is a full commit"),
        ({"revision": "AA00A6626F6484A2EEF68E06D1E089E4E32AA571"}, r"a revision is a full commit, 40 lowercase"),
        ({"source": "s3", "s3_uri": "s3://shared/gpt-j/", "revision": BLOOM_INT8_COMMIT},
         r"revision is only used with source 'pretrained'"),
        ({"source": "latest_approved", "allow_pickle": True}, r"allow_pickle is only used with source 'pretrained'"),
        ({"source": "s3", "s3_uri": "s3://shared/gpt-j/", "allow_pickle": True}, r"allow_pickle is only used"),
    ],
    ids=["branch", "pull-request", "uppercase", "revision-with-s3", "pickle-with-package", "pickle-with-s3"],
)  # fmt: skip
def test_staged_weights_config_refuses_what_would_not_pin_or_would_not_be_used(tmp_path, weights, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, {"model": "gpt-j-6b", "weights": weights})


BLOOM_INT8 = {"model": "bloom-176b", "dtype": "int8", "tensor_parallel_degree": 8, "instance_type": "ml.p4d.24xlarge"}


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    "weights",
    [
        {"checkpoint": "deepspeed-int8-tp8"},
        {"source": "s3", "s3_uri": "s3://shared/bloom/", "checkpoint": "deepspeed-int8-tp8"},
    ],
    ids=["staged", "s3"],
)
def test_a_presharded_checkpoint_is_served_only_when_the_config_accepts_its_pickles(tmp_path, weights):
    with pytest.raises(ConfigError, match=r"serving\.weights: .*checkpoint deepspeed-int8-tp8: DeepSpeed's pre-sharded "
                       r"checkpoints are PyTorch pickles \(\.pt shards\).*set allow_pickle: true"):  # fmt: skip
        load(tmp_path, {**BLOOM_INT8, "weights": weights})
    accepted = load(tmp_path, {**BLOOM_INT8, "weights": {**weights, "allow_pickle": True}})
    assert accepted.stages["dev"].serving.weights.allow_pickle


def test_the_config_rule_covers_every_cataloged_checkpoint():
    # WeightsConfig asks for allow_pickle with any checkpoint, without knowing the model: true while every checkpoint
    # of the catalog is torch.save shards. A safetensors one would need the rule to look it up.
    checkpoints = [c for m in MODELS.values() for c in m.checkpoints]
    assert checkpoints and all(c.pickled for c in checkpoints)
    with pytest.raises(ValueError, match="PyTorch pickles"):
        MODELS["bloom-176b"].staged("deepspeed-int8-tp8")  # the catalog refuses too


def test_a_config_pin_overrides_the_catalogs_and_pickles_allowed_are_staged_apart(tmp_path):
    other = "0123456789abcdef0123456789abcdef01234567"
    stage = load(tmp_path, {**BLOOM_INT8, "weights": {"checkpoint": "deepspeed-int8-tp8", "allow_pickle": True,
                                                      "revision": other}}).stages["dev"]  # fmt: skip
    assert stage.serving.staged_weights.record_key == f"pretrained/bloom-176b-deepspeed-int8-tp8/{other}.json"
    gptj = load(tmp_path, {"model": "gpt-j-6b", "weights": {"allow_pickle": True, "revision": other}}).stages["dev"]
    assert gptj.serving.staged_weights.record_key == f"pretrained/gpt-j-6b-pickle/{other}.json"


def load(tmp_path, serving: dict):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"project": "p", "stages": {"dev": {"region": "us-east-1", "serving": serving}}}))
    return load_config(path)


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


def test_endpoint_keeps_its_name_and_rolls_back_on_errors_latency_and_disk(assembly):
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
    rollback = [alarms[a["AlarmName"]["Ref"]]["Properties"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
    assert sorted(a["MetricName"] for a in rollback) == ["DiskUtilization", "Invocation5XXErrors", "ModelLatency"]
    # DeepSpeed's GPU memory notifies only: memory in use is no failure (alarms.gpu_memory_alarm).
    (gpu_memory,) = [
        a["Properties"] for a in alarms.values() if a["Properties"]["MetricName"] == "GPUMemoryUtilization"
    ]
    assert gpu_memory["AlarmActions"] and gpu_memory not in rollback


def test_autoscaling_tracks_concurrent_requests_per_instance_between_min_and_max(assembly):
    target = one(assembly, "prod", "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["ResourceId"] == "endpoint/llm-platform-prod/variant/AllTraffic"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert "RoleARN" not in target  # the service-linked role
    policy = one(assembly, "prod", "AWS::ApplicationAutoScaling::ScalingPolicy")[
        "TargetTrackingScalingPolicyConfiguration"
    ]
    assert policy == {
        "TargetValue": 4,
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
        },
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
    assert container["Image"] == "763104351884.dkr.ecr.eu-west-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
    # A CUDA 13 image starts only on the host AMI with driver 580; the CUDA 12.1 DeepSpeed image keeps the default.
    vllm_variant = variant(one(variants, "vllm", "AWS::SageMaker::EndpointConfig"))
    assert vllm_variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert "InferenceAmiVersion" not in variant(one(variants, "bloom", "AWS::SageMaker::EndpointConfig"))
    # No model_id: LMI serves /opt/ml/model, where SageMaker put the weights; no handler of ours is delivered.
    assert "OPTION_MODEL_ID" not in container["Environment"] and delivered(container)
    assert container["Environment"]["OPTION_ENTRYPOINT"] == "djl_python.lmi_vllm.vllm_async_service"
    assert not variants.resources("vllm", "Serving", "Custom::CodePackage")


def test_weights_from_another_bucket_are_readable_by_the_endpoint_and_nothing_more(variants):
    container = one(variants, "external", "AWS::SageMaker::Model")["PrimaryContainer"]
    assert delivered(container) == "s3://shared-weights/gpt-j-6b/v3/"
    policies = variants.resources("external", "Serving", "AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if k.startswith("ReadExternalWeights")]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert [(s["Action"], s["Resource"]) for s in statements] == [
        ("s3:GetObject", "arn:aws:s3:::shared-weights/gpt-j-6b/v3/*"),
        ("s3:ListBucket", "arn:aws:s3:::shared-weights"),
    ]


def test_the_handler_is_written_beside_weights_of_another_bucket_and_nowhere_else_there(variants):
    code = one(variants, "external", "Custom::CodePackage")
    assert (code["TargetUri"], code["Subfolder"]) == ("s3://shared-weights/gpt-j-6b/v3/", "inference/")
    policies = variants.resources("external", "Serving", "AWS::IAM::Policy")
    (handler,) = [p for k, p in policies.items() if k.startswith("CodePackagingHandlerRoleDefaultPolicy")]
    writes = [s for s in handler["Properties"]["PolicyDocument"]["Statement"] if "s3:PutObject" in s["Action"]]
    assert writes == [
        {
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Effect": "Allow",
            "Resource": "arn:aws:s3:::shared-weights/gpt-j-6b/v3/inference/*",
        }
    ]


def test_a_model_in_a_vpc_gets_its_subnets_and_the_network_interfaces_sagemaker_documents(variants):
    model = one(variants, "external", "AWS::SageMaker::Model")
    subnets = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
    assert model["VpcConfig"] == {"Subnets": subnets, "SecurityGroupIds": ["sg-0123456789abcdef0"]}
    assert model["EnableNetworkIsolation"] is True
    ((logical_id, policy),) = [
        (k, p)
        for k, p in variants.resources("external", "Serving", "AWS::IAM::Policy").items()
        if k.startswith("VpcAccess")
    ]
    statements = {s["Sid"]: s for s in render(policy["Properties"]["PolicyDocument"])["Statement"]}
    arn = "arn:aws:ec2:us-east-1:<AWS::AccountId>:"
    assert sorted(statements["CreateInterfaces"]["Resource"]) == sorted(
        [
            *(f"{arn}subnet/{s}" for s in subnets),
            f"{arn}security-group/sg-0123456789abcdef0",
            f"{arn}network-interface/*",
        ]
    )
    assert statements["HandInterfacesToSageMaker"]["Condition"]["StringEquals"] == {
        "ec2:AuthorizedService": "sagemaker.amazonaws.com"
    }
    assert statements["DeleteInterfaces"]["Condition"] == {
        "ArnEquals": {"ec2:Subnet": [f"{arn}subnet/{s}" for s in subnets]}
    }
    # SageMaker checks the role's permissions when it creates the Model: the policy comes first.
    (model_resource,) = variants.resources("external", "Serving", "AWS::SageMaker::Model").values()
    assert logical_id in model_resource["DependsOn"]
    assert "VpcConfig" not in one(variants, "package", "AWS::SageMaker::Model")


def test_model_package_weights_are_read_at_deploy_time_not_at_synth(variants):
    lookup = next(iter(variants.resources("package", "Serving", "Custom::AWS").values()))["Properties"]
    call = (
        json.loads(lookup["Create"]["Fn::Join"][1][0])
        if isinstance(lookup["Create"], dict)
        else json.loads(lookup["Create"])
    )
    assert (call["service"], call["action"]) == ("SageMaker", "describeModelPackage")
    assert call["parameters"]["ModelPackageName"].endswith(":model-package/llm-platform-package/3")
    container = one(variants, "package", "AWS::SageMaker::Model")["PrimaryContainer"]
    # Where the Register step records the weights (training_pipeline/registration.py).
    assert (
        delivered(container)["Fn::GetAtt"][1]
        == "InferenceSpecification.Containers.0.ModelDataSource.S3DataSource.S3Uri"
    )


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
            "727897471807.dkr.ecr.cn-northwest-1.amazonaws.com.cn/djl-inference:0.38.0-lmi29.0.0-cu130",
        ),
    ],
)
def test_images_come_from_the_sdk_tables_for_every_partition(region, engine, uri):
    assert serving_image(region, engine) == uri
