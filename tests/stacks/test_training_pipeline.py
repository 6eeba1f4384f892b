"""The fine-tuning pipeline's definition: generated offline and deterministically, and saying exactly what the
stage config and train.py agree on."""

from __future__ import annotations

import json
import re
import socket
from functools import cache

import botocore.session
import pytest

from stacks.catalog import images
from stacks.config import ServingConfig, TrainingConfig, load_config
from stacks.constructs.training_pipeline.definition import (
    PLACEHOLDERS,
    PipelineNames,
    finetune_definition,
    placeholders_in,
    staging_definition,
)
from stacks.training_job import smp_parameters
from tests.cdk_assembly import REPO
from training.finetune.hyperparameters import HYPERPARAMETER_NAMES, parse_hyperparameters
from training.finetune.metrics import METRIC_DEFINITIONS

NAMES = PipelineNames(finetune="p-dev-finetune", staging="p-dev-stage-weights", model_package_group="p-dev")


def definition(training: TrainingConfig | None = None, serving: ServingConfig | None = None) -> dict:
    if training is None and serving is None:
        return default_definition()
    return json.loads(
        finetune_definition(
            training or TrainingConfig(),
            serving or ServingConfig(),
            region="us-east-1",
            names=NAMES,
            serving_image="lmi",
        )
    )


@cache
def default_definition() -> dict:
    return json.loads(
        finetune_definition(TrainingConfig(), ServingConfig(), region="us-east-1", names=NAMES, serving_image="lmi")
    )


def step(defn: dict, name: str) -> dict:
    steps = {s["Name"]: s for s in defn["Steps"]}
    for s in defn["Steps"]:
        for nested in s.get("Arguments", {}).get("IfSteps", []) + s.get("Arguments", {}).get("ElseSteps", []):
            steps[nested["Name"]] = nested
    return steps[name]


def decoded(hyperparameters: dict) -> dict:
    """Hyperparameter values as the training toolkit sees them (JSON-decoded strings)."""
    return {k: json.loads(v) if isinstance(v, str) else v for k, v in hyperparameters.items()}


def test_steps_run_prepare_train_evaluate_then_register_or_fail():
    defn = definition()
    assert [(s["Name"], s["Type"]) for s in defn["Steps"]] == [
        ("PrepareData", "Processing"),
        ("Train", "Training"),
        ("Evaluate", "Processing"),
        ("CheckPerplexity", "Condition"),
    ]
    check = step(defn, "CheckPerplexity")["Arguments"]
    assert check["Conditions"] == [
        {
            "Type": "LessThanOrEqualTo",
            "LeftValue": {
                "Std:JsonGet": {
                    "Path": "metrics.perplexity.value",
                    "PropertyFile": {"Get": "Steps.Evaluate.PropertyFiles.EvaluationReport"},
                }
            },
            "RightValue": {"Get": "Parameters.PerplexityThreshold"},
        }
    ]
    assert [s["Type"] for s in check["IfSteps"]] == ["RegisterModel"]
    assert [s["Type"] for s in check["ElseSteps"]] == ["Fail"]


def test_run_parameters_default_to_the_stage_config():
    training = TrainingConfig(max_steps=500, learning_rate=1e-4, train_batch_size=16, perplexity_threshold=12.5)
    parameters = {p["Name"]: p["DefaultValue"] for p in definition(training)["Parameters"]}
    assert parameters == {
        "MaxSteps": 500,
        "LearningRate": 1e-4,
        "TrainBatchSize": 16,
        "PerplexityThreshold": 12.5,
        "InputData": "s3://${DataBucket}/raw/",
    }


def parameter_references(node, path=()) -> list[tuple[tuple, str]]:
    """(where, parameter name) of every {"Get": "Parameters.X"} under `node`."""
    if isinstance(node, dict):
        if isinstance(node.get("Get"), str) and node["Get"].startswith("Parameters."):
            return [(path, node["Get"].removeprefix("Parameters."))]
        return [ref for key, value in node.items() for ref in parameter_references(value, (*path, key))]
    if isinstance(node, list):
        return [ref for i, value in enumerate(node) for ref in parameter_references(value, (*path, i))]
    return []


@pytest.mark.parametrize("instance_type", ["ml.p4d.24xlarge", "ml.p3.16xlarge"])
def test_no_run_parameter_can_contradict_what_synth_derived_from_the_instances(instance_type):
    # processes per host, the EFA options, the volume key, the layout and memory checks all follow from the
    # configured instance type and count: the Train step takes them as fixed values, never as run parameters.
    training = TrainingConfig(instance_type=instance_type, instance_count=2)
    defn = definition(training)
    args = step(defn, "Train")["Arguments"]
    assert args["ResourceConfig"]["InstanceType"] == instance_type
    assert args["ResourceConfig"]["InstanceCount"] == 2
    assert {p["Name"] for p in defn["Parameters"]} == {
        "MaxSteps", "LearningRate", "TrainBatchSize", "PerplexityThreshold", "InputData",
    }  # fmt: skip
    # In the Train step, run parameters only reach train.py's own flags, which it checks at start-up.
    assert {(where[0], name) for where, name in parameter_references(args)} == {
        ("HyperParameters", "MaxSteps"),
        ("HyperParameters", "LearningRate"),
        ("HyperParameters", "TrainBatchSize"),
    }


def test_mp_parameters_are_exactly_the_stage_smp_config():
    training = TrainingConfig(smp={"tensor_parallel_degree": 4, "microbatches": 2, "placement_strategy": "spread"})
    hyperparameters = decoded(step(definition(training), "Train")["Arguments"]["HyperParameters"])
    assert hyperparameters["mp_parameters"] == smp_parameters(training)
    assert hyperparameters["mp_parameters"]["tensor_parallel_degree"] == 4
    assert hyperparameters["mp_parameters"]["partitions"] == 1
    assert hyperparameters["sagemaker_mpi_enabled"] is True
    assert hyperparameters["sagemaker_mpi_num_of_processes_per_host"] == 8


def test_efa_options_only_on_instances_with_efa():
    on_p4d = decoded(step(definition(), "Train")["Arguments"]["HyperParameters"])["sagemaker_mpi_custom_mpi_options"]
    assert "FI_PROVIDER=efa" in on_p4d
    p3 = TrainingConfig(instance_type="ml.p3.16xlarge")
    on_p3 = decoded(step(definition(p3), "Train")["Arguments"]["HyperParameters"])["sagemaker_mpi_custom_mpi_options"]
    assert "efa" not in on_p3.lower() and "NCCL_DEBUG=WARN" in on_p3


def test_every_flag_the_pipeline_passes_is_one_train_py_accepts():
    hyperparameters = step(definition(), "Train")["Arguments"]["HyperParameters"]
    ours = {k for k in hyperparameters if not k.startswith("sagemaker_") and k != "mp_parameters"}
    assert ours <= set(HYPERPARAMETER_NAMES)
    # As the toolkit passes them: --name value, JSON-decoded then str()-ed.
    argv = []
    for name in sorted(ours | {"mp_parameters"}):
        value = hyperparameters[name]
        value = "100" if isinstance(value, dict) else str(json.loads(value))  # pipeline variables: a stand-in value
        argv += [f"--{name}", value]
    parsed, _ = parse_hyperparameters([*argv, "--pretrained_dir", "/opt/ml/input/data/model"], environ={})
    assert parsed.backend == "smp_v1" and parsed.fp16 is True


def test_train_step_runs_the_smp_v1_image_with_the_code_channels_and_outputs_of_the_stage():
    args = step(definition(), "Train")["Arguments"]
    assert args["AlgorithmSpecification"]["TrainingImage"] == images.training_image("us-east-1", 1)
    assert args["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
    assert args["ResourceConfig"]["InstanceType"] == "ml.p4d.24xlarge"
    assert args["ResourceConfig"]["InstanceCount"] == 1
    assert "VolumeKmsKeyId" not in args["ResourceConfig"]  # p4d storage is local NVMe, encrypted by the hardware
    assert (
        decoded(args["HyperParameters"])["sagemaker_submit_directory"] == "s3://${ArtifactsBucket}/${TrainingCodeKey}"
    )
    assert decoded(args["HyperParameters"])["sagemaker_program"] == "train.py"
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in args["InputDataConfig"]}
    assert channels == {
        "train": {"Get": "Steps.PrepareData.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"},
        "test": {"Get": "Steps.PrepareData.ProcessingOutputConfig.Outputs['validation'].S3Output.S3Uri"},
        "model": "s3://${ModelsBucket}/pretrained/gpt-j-6b/",
    }
    assert args["CheckpointConfig"] == {
        "S3Uri": {
            "Std:Join": {
                "On": "/",
                "Values": ["s3://${ModelsBucket}/checkpoints", {"Get": "Execution.PipelineExecutionId"}],
            }
        }
    }
    assert args["OutputDataConfig"] == {
        "CompressionType": "NONE",
        "KmsKeyId": "${KeyArn}",
        "S3OutputPath": "s3://${ModelsBucket}/trained/",
    }
    assert args["EnableInterContainerTrafficEncryption"] is True
    assert args["RoleArn"] == "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${TrainingRoleName}"
    assert args["StoppingCondition"] == {"MaxRuntimeInSeconds": 24 * 3600}


def test_ebs_instances_get_the_volume_key_and_spot_gets_a_max_wait():
    training = TrainingConfig(instance_type="ml.p3.16xlarge", spot={"enabled": True, "max_wait_hours": 30})
    args = step(definition(training), "Train")["Arguments"]
    assert args["ResourceConfig"]["VolumeKmsKeyId"] == "${KeyArn}"
    assert args["EnableManagedSpotTraining"] is True
    assert args["StoppingCondition"] == {"MaxRuntimeInSeconds": 24 * 3600, "MaxWaitTimeInSeconds": 30 * 3600}


def test_vpc_config_reaches_every_job():
    vpc = {"subnet_ids": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]}
    defn = definition(TrainingConfig(vpc=vpc))
    expected = {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]}
    assert step(defn, "Train")["Arguments"]["VpcConfig"] == expected
    for name in ("PrepareData", "Evaluate"):
        assert step(defn, name)["Arguments"]["NetworkConfig"]["VpcConfig"] == expected


def test_smp_v2_uses_torch_distributed_and_its_own_image():
    training = TrainingConfig(
        precision="bf16", smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8}
    )
    args = step(definition(training), "Train")["Arguments"]
    assert args["AlgorithmSpecification"]["TrainingImage"] == images.training_image("us-east-1", 2)
    assert "smdistributed-modelparallel" in args["AlgorithmSpecification"]["TrainingImage"]
    hyperparameters = decoded(args["HyperParameters"])
    assert hyperparameters["sagemaker_torch_distributed_enabled"] is True
    assert "sagemaker_mpi_enabled" not in hyperparameters
    assert hyperparameters["mp_parameters"] == {
        "hybrid_shard_degree": 8,
        "sm_activation_offloading": False,
        "activation_loading_horizon": 4,
    }


def test_processing_steps_run_the_packaged_scripts_in_the_pytorch_image():
    defn = definition()
    prepare = step(defn, "PrepareData")["Arguments"]
    assert prepare["AppSpecification"]["ImageUri"] == images.processing_image("us-east-1", "ml.m5.2xlarge")
    assert prepare["AppSpecification"]["ContainerEntrypoint"][-1] == "prepare_data.py"
    assert prepare["AppSpecification"]["ContainerArguments"] == ["--block_size", "1024", "--seed", "12345"]
    inputs = {i["InputName"]: (i["S3Input"]["LocalPath"], i["S3Input"]["S3Uri"]) for i in prepare["ProcessingInputs"]}
    assert inputs == {
        "raw": ("/opt/ml/processing/input/raw", {"Get": "Parameters.InputData"}),
        "model": ("/opt/ml/processing/input/model", "s3://${ModelsBucket}/pretrained/gpt-j-6b/"),
        "code": ("/opt/ml/processing/input/code", "s3://${ArtifactsBucket}/${TrainingCodeKey}"),
    }
    assert prepare["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == "${KeyArn}"  # m5 has EBS
    evaluate = step(defn, "Evaluate")["Arguments"]
    assert evaluate["AppSpecification"]["ImageUri"].endswith("pytorch-training:1.13.1-gpu-py39")
    assert "VolumeKmsKeyId" not in evaluate["ProcessingResources"]["ClusterConfig"]  # g5: local NVMe
    assert step(defn, "Evaluate")["PropertyFiles"] == [
        {"FilePath": "evaluation.json", "OutputName": "evaluation", "PropertyFileName": "EvaluationReport"}
    ]


def test_register_points_at_the_lmi_image_the_inference_code_and_the_fine_tuned_weights():
    register = step(definition(), "Register-RegisterModel")["Arguments"]
    (container,) = register["InferenceSpecification"]["Containers"]
    assert container == {
        "Image": "lmi",
        "ModelDataUrl": "s3://${ArtifactsBucket}/${InferenceCodeKey}",
        "Environment": {
            "WEIGHTS_S3_URI": {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifacts"},
            "TENSOR_PARALLEL_DEGREE": "1",
        },
    }
    assert register["ModelApprovalStatus"] == "PendingManualApproval"
    assert register["ModelPackageGroupName"] == "p-dev"
    assert register["InferenceSpecification"]["SupportedRealtimeInferenceInstanceTypes"] == ["ml.g5.2xlarge"]


def test_generation_is_deterministic_and_needs_no_network(monkeypatch):
    def refuse(self, address):
        raise AssertionError(f"network access to {address} while generating the definition")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    args = (TrainingConfig(max_steps=7), ServingConfig())
    first = finetune_definition(*args, region="eu-west-1", names=NAMES, serving_image="lmi")
    assert finetune_definition(*args, region="eu-west-1", names=NAMES, serving_image="lmi") == first


def test_only_known_placeholders_are_left_for_cloudformation():
    body = finetune_definition(TrainingConfig(), ServingConfig(), region="us-east-1", names=NAMES, serving_image="lmi")
    assert placeholders_in(body) == set(PLACEHOLDERS) | {"AWS::Partition", "AWS::AccountId"}
    with pytest.raises(ValueError, match=r"unknown placeholders \['Typo'\]"):
        placeholders_in(body + "${Typo}")


def staging(training: TrainingConfig | None = None, serving: ServingConfig | None = None) -> dict:
    return json.loads(
        staging_definition(training or TrainingConfig(), serving or ServingConfig(), region="us-east-1", names=NAMES)
    )


def bloom_int8() -> ServingConfig:
    return ServingConfig(
        model="bloom-176b",
        dtype="int8",
        tensor_parallel_degree=8,
        instance_type="ml.p4d.24xlarge",
        weights={"checkpoint": "deepspeed-int8-tp8"},
    )


def test_staging_pipeline_copies_the_hub_model_into_its_pretrained_prefix():
    # The default stage trains and serves GPT-J: one repository, staged once.
    defn = staging()
    assert {p["Name"]: p["DefaultValue"] for p in defn["Parameters"]} == {"Revision-gpt-j-6b": "main"}
    (stage,) = defn["Steps"]
    assert stage["Name"] == "Stage-gpt-j-6b"
    args = stage["Arguments"]
    assert args["AppSpecification"]["ContainerEntrypoint"][-1] == "stage_model.py"
    assert args["AppSpecification"]["ContainerArguments"] == [
        "--model_id", "EleutherAI/gpt-j-6b", "--revision", {"Get": "Parameters.Revision-gpt-j-6b"},
    ]  # fmt: skip
    (output,) = args["ProcessingOutputConfig"]["Outputs"]
    assert output["S3Output"]["S3Uri"] == "s3://${ModelsBucket}/pretrained/gpt-j-6b/"
    assert output["S3Output"]["LocalPath"] == "/opt/ml/processing/output/model"
    assert args["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] == 45  # 6 B parameters at fp32, + margin


def test_staging_pipeline_stages_the_served_presharded_checkpoint_next_to_the_training_model():
    defn = staging(serving=bloom_int8())
    steps = {s["Name"]: s["Arguments"] for s in defn["Steps"]}
    assert list(steps) == ["Stage-gpt-j-6b", "Stage-bloom-176b-deepspeed-int8-tp8"]
    bloom = steps["Stage-bloom-176b-deepspeed-int8-tp8"]
    assert bloom["AppSpecification"]["ContainerArguments"] == [
        "--model_id", "microsoft/bloom-deepspeed-inference-int8",
        "--revision", {"Get": "Parameters.Revision-bloom-176b-deepspeed-int8-tp8"},
        "--deepspeed_tp_size", "8", "--deepspeed_dtype", "int8",
    ]  # fmt: skip
    (output,) = bloom["ProcessingOutputConfig"]["Outputs"]
    assert output["S3Output"]["S3Uri"] == "s3://${ModelsBucket}/pretrained/bloom-176b-deepspeed-int8-tp8/"
    # The whole checkpoint (167.5 GiB) sits on the volume until SageMaker uploads it; the SDK's default is 30 GB.
    assert bloom["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] == 205
    revisions = {p["Name"]: p["DefaultValue"] for p in defn["Parameters"]}
    assert revisions["Revision-bloom-176b-deepspeed-int8-tp8"] == "aa00a6626f6484a2eef68e06d1e089e4e32aa571"
    # Names SageMaker accepts (botocore's PipelineParameterName and StepName shapes).
    sagemaker = botocore.session.get_session().get_service_model("sagemaker")
    for shape, names in (("PipelineParameterName", revisions), ("StepName", steps)):
        rule = sagemaker.shape_for(shape).metadata
        for name in names:
            assert re.fullmatch(rule["pattern"], name) and rule.get("min", 0) <= len(name) <= rule["max"], name


def test_staging_pipeline_stages_nothing_for_weights_that_are_not_staged():
    external = ServingConfig(weights={"source": "s3", "s3_uri": "s3://shared/gpt-j/"})
    assert [s["Name"] for s in staging(TrainingConfig(), external)["Steps"]] == ["Stage-gpt-j-6b"]
    opt = ServingConfig(model="opt-30b", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge")
    assert [s["Name"] for s in staging(TrainingConfig(), opt)["Steps"]] == ["Stage-gpt-j-6b", "Stage-opt-30b"]


def test_staging_definition_is_deterministic_and_needs_no_network(monkeypatch):
    def refuse(self, address):
        raise AssertionError(f"network access to {address} while generating the definition")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    first = staging_definition(TrainingConfig(max_steps=3), bloom_int8(), region="eu-west-1", names=NAMES)
    assert staging_definition(TrainingConfig(max_steps=3), bloom_int8(), region="eu-west-1", names=NAMES) == first
    assert placeholders_in(first) <= set(PLACEHOLDERS) | {"AWS::Partition", "AWS::AccountId"}


def test_synthesized_pipeline_resolves_every_placeholder(assembly):
    pipelines = assembly.resources("dev", "Training", "AWS::SageMaker::Pipeline")
    assert len(pipelines) == 2
    for pipeline in pipelines.values():
        body, variables = pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Sub"]
        assert placeholders_in(body) - {"AWS::Partition", "AWS::AccountId"} == set(variables)


def test_default_config_training_plan_is_the_reference():
    dev = load_config(REPO / "config" / "default.yaml").stages["dev"].training
    assert (dev.instance_type, dev.smp.tensor_parallel_degree, dev.precision, dev.smp.shard_optimizer_state) == (
        "ml.p4d.24xlarge",
        8,
        "fp16",
        True,
    )
