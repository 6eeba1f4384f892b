"""The fine-tuning pipeline's definition: generated offline and deterministically, and saying exactly what the
stage config and train.py agree on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache

import botocore.session
import pytest

from core.catalog import images
from core.config import ConfigError, ServingConfig, TrainingConfig, load_config
from core.naming import PipelineNames
from core.serving_properties import environment as environment_of
from core.training_job import smp_parameters
from infrastructure.constructs.training_pipeline.finetune_pipeline import finetune_definition
from infrastructure.constructs.training_pipeline.offline_sdk import PLACEHOLDERS, placeholders_in
from infrastructure.constructs.training_pipeline.staging_pipeline import staging_definition
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


def staged_at(prefix: str, record: str) -> dict:
    """s3://<models>/<prefix><commit>/, the commit read from <record> when the run reaches the step."""
    record_uri = {"Std:Join": {"On": "", "Values": [f"s3://${{ModelsBucket}}/{record}"]}}
    commit = {"Std:JsonGet": {"Path": "commit", "S3Uri": record_uri}}
    return {"Std:Join": {"On": "", "Values": [f"s3://${{ModelsBucket}}/{prefix}", commit, "/"]}}


MAIN_RECORD = staged_at("pretrained/gpt-j-6b/", "pretrained/gpt-j-6b/main.json")


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
    assert [(s["Name"], s["Type"]) for s in check["IfSteps"]] == [
        ("CopyToRegistry", "Processing"),
        ("Register-RegisterModel", "RegisterModel"),
    ]
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
    # Two hosts: the reference layout's optimizer state sharded over 2 (one host of 16 GB V100s cannot hold it).
    p3 = TrainingConfig(instance_type="ml.p3.16xlarge", instance_count=2)
    on_p3 = decoded(step(definition(p3), "Train")["Arguments"]["HyperParameters"])["sagemaker_mpi_custom_mpi_options"]
    assert "efa" not in on_p3.lower() and "NCCL_DEBUG=WARN" in on_p3


def _exported_mpi_variables(training: TrainingConfig | None = None) -> dict[str, str]:
    """The `-x NAME=VALUE` variables of the SMP v1 job's custom MPI options."""
    hyperparameters = decoded(step(definition(training), "Train")["Arguments"]["HyperParameters"])
    words = hyperparameters["sagemaker_mpi_custom_mpi_options"].split()
    assert all(flag == "-x" for flag in words[::2]), words
    return dict(word.split("=", 1) for word in words[1::2])


SMP_D2D_OFF = {"SMP_DISABLE_D2D": "1", "SMP_D2D_GPU_BUFFER_SIZE_BYTES": "1"}


@pytest.mark.parametrize(
    ("smp", "expected", "absent"),
    [
        # The default layout (TP 8 x PP 1 on p4d), as AWS's GPT-J example passes them.
        ({}, {**SMP_D2D_OFF, "SMP_NCCL_THROTTLE_LIMIT": "1"}, set()),
        # No tensor parallelism: the throttle governs only SMP's tensor-parallel collectives.
        ({"tensor_parallel_degree": 1}, SMP_D2D_OFF, {"SMP_NCCL_THROTTLE_LIMIT"}),
        # A pipeline: D2D carries the partitions' activations, so it stays on.
        (
            {"tensor_parallel_degree": 4, "pipeline_parallel_degree": 2, "microbatches": 2},
            {"SMP_NCCL_THROTTLE_LIMIT": "1"},
            set(SMP_D2D_OFF),
        ),
    ],
    ids=["tp8-pp1", "tp1-pp1", "tp4-pp2"],
)
def test_smp_v1_mpi_options_are_aws_gptj_examples_where_they_apply(smp, expected, absent):
    exported = _exported_mpi_variables(TrainingConfig(smp=smp) if smp else None)
    assert {name: exported.get(name) for name in expected} == expected
    assert not absent & set(exported)
    assert exported["NCCL_DEBUG"] == "WARN" and exported["FI_PROVIDER"] == "efa"  # p4d: the EFA options stay


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
        "model": MAIN_RECORD,  # exactly the commit main's record names, read when the run gets here
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
    training = TrainingConfig(
        instance_type="ml.p3.16xlarge", instance_count=2, spot={"enabled": True, "max_wait_hours": 30}
    )
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
        "tensor_parallel_degree": 1,
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
        "model": ("/opt/ml/processing/input/model", MAIN_RECORD),
        "code": ("/opt/ml/processing/input/code", "s3://${ArtifactsBucket}/${TrainingCodeKey}"),
    }
    assert prepare["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == "${KeyArn}"  # m5 has EBS
    evaluate = step(defn, "Evaluate")["Arguments"]
    assert evaluate["AppSpecification"]["ImageUri"].endswith("pytorch-training:1.13.1-gpu-py39")
    assert "VolumeKmsKeyId" not in evaluate["ProcessingResources"]["ClusterConfig"]  # g5: local NVMe
    assert step(defn, "Evaluate")["PropertyFiles"] == [
        {"FilePath": "evaluation.json", "OutputName": "evaluation", "PropertyFileName": "EvaluationReport"}
    ]


TRAINED = {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifacts"}
# The registry's copy of the job's weights: what a model package names (CopyToRegistry).
REGISTERED = {
    "Std:Join": {
        "On": "/",
        "Values": ["s3://${ModelsBucket}/registered", {"Get": "Execution.PipelineExecutionId"}, ""],
    }
}


def registered_container(defn: dict) -> dict:
    (container,) = step(defn, "Register-RegisterModel")["Arguments"]["InferenceSpecification"]["Containers"]
    return container


def test_the_registered_package_is_the_model_the_endpoint_runs_and_no_job_writes_its_handler():
    defn = definition()
    register = step(defn, "Register-RegisterModel")["Arguments"]
    container = registered_container(defn)
    # What lmi_model builds: the fine-tuned folder delivered uncompressed, the engine's keys as OPTION_* variables,
    # the handler named by its path inside that folder. No code archive, no WEIGHTS_S3_URI (the handler refuses it).
    assert container == {
        "Image": "lmi",
        "ModelDataSource": {"S3DataSource": {"S3Uri": REGISTERED, "S3DataType": "S3Prefix", "CompressionType": "None"}},
        "Environment": environment_of(ServingConfig(), entry_point="/opt/ml/model/${HandlerFolder}model.py"),
    }
    assert register["ModelApprovalStatus"] == "PendingManualApproval"
    assert register["ModelPackageGroupName"] == "p-dev"
    assert register["InferenceSpecification"]["SupportedRealtimeInferenceInstanceTypes"] == ["ml.g5.2xlarge"]
    # No job writes the handler there: the Evaluate job runs with the training role, and only the code-packaging
    # function may write a handler folder (the models bucket's policy); the serving stack writes it at deploy time.
    evaluate = step(defn, "Evaluate")["Arguments"]
    assert "handler" not in {i["InputName"] for i in evaluate["ProcessingInputs"]}
    assert [o["OutputName"] for o in evaluate["ProcessingOutputConfig"]["Outputs"]] == ["evaluation"]
    assert "cp -R" not in evaluate["AppSpecification"]["ContainerEntrypoint"][2]


def test_a_vllm_package_carries_no_handler_and_the_engines_keys():
    serving = ServingConfig(engine="vllm", model="gpt-j-6b", instance_type="ml.g5.2xlarge")
    defn = definition(TrainingConfig(), serving)
    container = registered_container(defn)
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == REGISTERED
    assert container["Environment"] == environment_of(serving)  # LMI's own vLLM service, no handler path
    evaluate = step(defn, "Evaluate")["Arguments"]
    assert "handler" not in {i["InputName"] for i in evaluate["ProcessingInputs"]}
    assert "cp -R" not in evaluate["AppSpecification"]["ContainerEntrypoint"][2]
    assert "HandlerFolder" not in placeholders_in(json.dumps(defn))


def test_the_serving_stack_reads_the_weights_where_the_package_records_them():
    # infrastructure/serving_stack.py looks the weights prefix up in DescribeModelPackage's output at this path.
    from infrastructure.serving_stack import PACKAGE_WEIGHTS

    container = registered_container(definition())
    node = {"InferenceSpecification": {"Containers": [container]}}
    for key in PACKAGE_WEIGHTS.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    assert node == REGISTERED


def test_the_registry_role_copies_the_jobs_weights_before_the_package_names_the_copy():
    """The training role can still change trained/ after a version is approved; the package names registered/, which
    only the registry role writes (the models bucket's policy), copied from exactly the job's output."""
    defn = definition()
    copy = step(defn, "CopyToRegistry")["Arguments"]
    assert copy["RoleArn"].endswith(":role/${RegistryRoleName}")
    arguments = copy["AppSpecification"]["ContainerArguments"]
    assert arguments[:4] == ["--source", TRAINED, "--destination", REGISTERED]
    assert "register_weights.py" in copy["AppSpecification"]["ContainerEntrypoint"][2]
    assert step(defn, "Register-RegisterModel")["DependsOn"] == ["CopyToRegistry"]


def test_current_models_prepare_and_evaluate_in_the_smp_v2_image_and_staging_stays_on_the_pytorch_image():
    # transformers 4.21 (the PyTorch 1.13.1 image's lock line) cannot read Llama 3.1's config or tokenizer.
    llama = TrainingConfig(
        model="llama-3.1-8b",
        precision="bf16",
        smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8},
    )
    defn = definition(llama)
    for name in ("PrepareData", "Evaluate"):
        assert step(defn, name)["Arguments"]["AppSpecification"]["ImageUri"] == images.training_image("us-east-1", 2)
    # Staging runs in the image the staging role may pull (stage.py: processing_image), whatever the method.
    lora = TrainingConfig(
        model="llama-3.1-8b", method="lora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=1
    )
    for config in (llama, lora):
        body = staging_definition(config, ServingConfig(), region="us-east-1", names=NAMES, token_secret="hf-token")
        for stage in json.loads(body)["Steps"]:
            image = stage["Arguments"]["AppSpecification"]["ImageUri"]
            assert image == images.processing_image("us-east-1", config.processing_instance_type), stage["Name"]
    # SMP v1 (GPT-J) keeps the PyTorch 1.13.1 image.
    assert step(definition(), "Evaluate")["Arguments"]["AppSpecification"]["ImageUri"] == images.processing_image(
        "us-east-1", "ml.g5.2xlarge"
    )


# Both definitions, generated by the SDK (not read from core/synth_cache.py) in a fresh process that may not
# connect anywhere; printed as JSON {"finetune": ..., "staging": ...}.
GENERATE_IN_A_CHILD = """
import json, socket

def refuse(self, address):
    raise AssertionError(f"network access to {address} while generating the definition")

socket.socket.connect = refuse
from core.config import ServingConfig
from core.config import TrainingConfig
from infrastructure.constructs.training_pipeline.finetune_pipeline import finetune_definition
from infrastructure.constructs.training_pipeline.staging_pipeline import staging_definition
from tests.infrastructure.test_training_pipeline import NAMES, bloom_int8

print(json.dumps({
    "finetune": finetune_definition(
        TrainingConfig(max_steps=7), ServingConfig(), region="eu-west-1", names=NAMES, serving_image="lmi"
    ),
    "staging": staging_definition(TrainingConfig(max_steps=3), bloom_int8(), region="eu-west-1", names=NAMES),
}))
"""


@cache
def definitions_by_hash_seed() -> dict[str, dict[str, str]]:
    """The definitions from two processes with different PYTHONHASHSEED: any output that follows the iteration
    order of a set or of a dict built from one differs between them (one process would always agree with itself)."""
    generated = {}
    for seed in ("1", "2"):
        environ = {**os.environ, "PYTHONHASHSEED": seed, "SYNTH_CACHE": "off", "PYTHONPATH": str(REPO)}
        result = subprocess.run(
            [sys.executable, "-c", GENERATE_IN_A_CHILD], cwd=REPO, env=environ, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr[-3000:]
        generated[seed] = json.loads(result.stdout.splitlines()[-1])
    return generated


def test_generation_is_deterministic_and_needs_no_network():
    first, second = definitions_by_hash_seed().values()
    assert first["finetune"] == second["finetune"]
    assert json.loads(first["finetune"])["Parameters"]  # a whole definition, not an empty one twice


def test_only_known_placeholders_are_left_for_cloudformation():
    body = finetune_definition(TrainingConfig(), ServingConfig(), region="us-east-1", names=NAMES, serving_image="lmi")
    # Every deploy-time value but the staging role, which only the staging pipeline's steps run with.
    assert placeholders_in(body) == set(PLACEHOLDERS) - {"StagingRoleName"} | {"AWS::Partition", "AWS::AccountId"}
    staging_body = staging_definition(TrainingConfig(), ServingConfig(), region="us-east-1", names=NAMES)
    assert "StagingRoleName" in placeholders_in(staging_body) and "TrainingRoleName" not in placeholders_in(
        staging_body
    )
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
        weights={"checkpoint": "deepspeed-int8-tp8", "allow_pickle": True},
    )


COMMIT = "0123456789abcdef0123456789abcdef01234567"  # any 40-hex value: a config's pin


def test_staging_pipeline_copies_the_hub_model_at_one_commit_into_its_own_prefix():
    # The default stage trains and serves GPT-J: one repository, staged once, following main.
    defn = staging()
    # No run parameters: what is staged (repository, commit or main, pickles or not) is the config's, and a run
    # cannot stage, say, refs/pr/1 where the endpoint reads.
    assert defn["Parameters"] == []
    (stage,) = defn["Steps"]
    assert stage["Name"] == "Stage-gpt-j-6b"
    args = stage["Arguments"]
    assert args["AppSpecification"]["ContainerEntrypoint"][-1] == "stage_model.py"
    assert args["AppSpecification"]["ContainerArguments"] == [
        "--model_id", "EleutherAI/gpt-j-6b", "--revision", "main",
        "--destination", "s3://${ModelsBucket}/pretrained/gpt-j-6b/", "--region", "us-east-1",
        # The oldest reader: SMP v1's transformers 4.21.0 (the endpoint's LMI 0.27.0 has 4.39.0).
        "--readers", "tokenizers=0.12.1,transformers=4.21.0",
    ]  # fmt: skip
    # The step writes the files and then the record itself; a ProcessingOutput is uploaded in no particular order.
    assert "ProcessingOutputConfig" not in args
    assert [i["InputName"] for i in args["ProcessingInputs"]] == ["code"]
    assert args["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] == 45  # 6 B parameters at fp32, + margin


def test_staging_pipeline_stages_the_served_presharded_checkpoint_at_its_pinned_commit():
    defn = staging(serving=bloom_int8())
    steps = {s["Name"]: s["Arguments"] for s in defn["Steps"]}
    assert list(steps) == ["Stage-gpt-j-6b", "Stage-bloom-176b-deepspeed-int8-tp8"]
    bloom = steps["Stage-bloom-176b-deepspeed-int8-tp8"]
    assert bloom["AppSpecification"]["ContainerArguments"] == [
        "--model_id", "microsoft/bloom-deepspeed-inference-int8",
        "--revision", "aa00a6626f6484a2eef68e06d1e089e4e32aa571",  # the commit the LMI reference staged
        "--destination", "s3://${ModelsBucket}/pretrained/bloom-176b-deepspeed-int8-tp8/", "--region", "us-east-1",
        "--allow_pickle",  # the config said so: its shards are .pt pickles
        "--readers", "tokenizers=0.15.2,transformers=4.39.0",  # only the LMI 0.27.0 image reads it
        "--deepspeed_tp_size", "8", "--deepspeed_dtype", "int8",
    ]  # fmt: skip
    # The whole checkpoint (167.5 GiB) sits on the volume until it is uploaded; the SDK's default is 30 GB.
    assert bloom["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] == 205
    assert_sagemaker_accepts_the_step_names(steps)


def assert_sagemaker_accepts_the_step_names(names) -> None:
    # botocore's StepName shape: the pattern and length SageMaker enforces.
    rule = botocore.session.get_session().get_service_model("sagemaker").shape_for("StepName").metadata
    for name in names:
        assert re.fullmatch(rule["pattern"], name) and rule.get("min", 0) <= len(name) <= rule["max"], name


def test_a_config_that_accepts_pickles_stages_them_apart():
    # A reader that does not accept pickles (here: training) never reads the prefix a pickle staging could fill.
    defn = staging(serving=ServingConfig(weights={"allow_pickle": True, "revision": COMMIT}))
    steps = {s["Name"]: s["Arguments"]["AppSpecification"]["ContainerArguments"] for s in defn["Steps"]}
    assert list(steps) == ["Stage-gpt-j-6b", "Stage-gpt-j-6b-pickle"]
    assert "--allow_pickle" not in steps["Stage-gpt-j-6b"]
    pickle = steps["Stage-gpt-j-6b-pickle"]
    assert "--allow_pickle" in pickle
    assert pickle[pickle.index("--destination") + 1] == "s3://${ModelsBucket}/pretrained/gpt-j-6b-pickle/"


def test_training_and_serving_one_repository_at_two_revisions_stage_both():
    training = TrainingConfig(pretrained={"revision": COMMIT})
    defn = staging(training, ServingConfig())
    steps = {s["Name"]: s["Arguments"]["AppSpecification"]["ContainerArguments"] for s in defn["Steps"]}
    assert list(steps) == [f"Stage-gpt-j-6b-{COMMIT[:12]}", "Stage-gpt-j-6b-main"]
    assert [args[args.index("--revision") + 1] for args in steps.values()] == [COMMIT, "main"]
    assert_sagemaker_accepts_the_step_names(steps)
    # The same revision twice is staged once.
    same = staging(training, ServingConfig(weights={"revision": COMMIT}))
    assert [s["Name"] for s in same["Steps"]] == ["Stage-gpt-j-6b"]


def test_staging_pipeline_stages_nothing_for_weights_that_are_not_staged():
    external = ServingConfig(weights={"source": "s3", "s3_uri": "s3://shared/gpt-j/"})
    assert [s["Name"] for s in staging(TrainingConfig(), external)["Steps"]] == ["Stage-gpt-j-6b"]
    opt = ServingConfig(model="opt-30b", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge")
    assert [s["Name"] for s in staging(TrainingConfig(), opt)["Steps"]] == ["Stage-gpt-j-6b", "Stage-opt-30b"]


def test_a_pinned_training_commit_is_read_through_its_own_record():
    # The commit's record exists only once its staging finished: a run never trains on half a staging.
    defn = definition(TrainingConfig(pretrained={"revision": COMMIT}))
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in step(defn, "Train")["Arguments"]["InputDataConfig"]}  # fmt: skip
    assert channels["model"] == staged_at("pretrained/gpt-j-6b/", f"pretrained/gpt-j-6b/{COMMIT}.json")
    # Pickles accepted: a prefix of their own.
    defn = definition(TrainingConfig(pretrained={"allow_pickle": True, "revision": COMMIT}))
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in step(defn, "Train")["Arguments"]["InputDataConfig"]}  # fmt: skip
    assert channels["model"] == staged_at("pretrained/gpt-j-6b-pickle/", f"pretrained/gpt-j-6b-pickle/{COMMIT}.json")


def test_the_registered_model_names_the_commit_it_was_fine_tuned_from():
    register = step(definition(), "Register-RegisterModel")["Arguments"]
    assert register["CustomerMetadataProperties"] == {
        "PretrainedModel": "EleutherAI/gpt-j-6b",
        "PretrainedCommit": MAIN_RECORD["Std:Join"]["Values"][1],
    }


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"pretrained": {"revision": "main"}}, r"training\.pretrained\.revision: a revision is a full commit"),
        ({"pretrained": {"revision": "aa00a66"}}, r"training\.pretrained\.revision: a revision is a full commit"),
        ({"pretrained": {"allow_pickles": True}}, r"training\.pretrained\.allow_pickles.*unknown key"),
    ],
    ids=["branch", "short-commit", "typo"],
)
def test_training_pins_only_full_commits(tmp_path, config, message):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"project": "p", "stages": {"dev": {"region": "us-east-1", "training": config}}}))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_staging_definition_is_deterministic_and_needs_no_network():
    first, second = definitions_by_hash_seed().values()
    assert first["staging"] == second["staging"]
    assert placeholders_in(first["staging"]) <= set(PLACEHOLDERS) | {"AWS::Partition", "AWS::AccountId"}


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


def test_every_processing_step_installs_the_hashed_lock_with_hash_checking_and_wheels_only():
    """The jobs can write to the stage's buckets: pip installs only files the lock hashes, never an sdist, and keeps
    checking dependencies (the lock leaves what the image ships to it). tests/training/test_requirements_lock.py
    runs this command against tampered and unhashed requirements."""
    import shlex

    processing = [step(definition(), "PrepareData"), step(definition(), "Evaluate"), *staging()["Steps"]]
    assert len(processing) >= 3
    for job in processing:
        entrypoint = job["Arguments"]["AppSpecification"]["ContainerEntrypoint"]
        (install,) = [shlex.split(part) for part in entrypoint[2].split("&&") if " pip install " in part]
        assert install[:4] == ["python3", "-m", "pip", "install"], job["Name"]
        assert {"--require-hashes", "--only-binary=:all:"} <= set(install), job["Name"]
        assert install[-2:] == ["-r", "requirements.txt"] and "--no-deps" not in install, job["Name"]


def readers_of(defn: dict) -> dict[str, str | None]:
    found = {}
    for step in defn["Steps"]:
        args = step["Arguments"]["AppSpecification"]["ContainerArguments"]
        found[step["Name"]] = args[args.index("--readers") + 1] if "--readers" in args else None
    return found


def test_each_repository_is_checked_against_the_oldest_library_versions_that_read_it_in_the_stage():
    # SMP v2 jobs read with the lock's Python 3.11 pins; the endpoint's vllm engine has no limit of its own.
    smp_v2 = TrainingConfig(
        model="qwen2.5-7b", smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8}, precision="bf16"
    )
    vllm = ServingConfig(model="gpt-j-6b", engine="vllm", instance_type="ml.g5.2xlarge")
    assert readers_of(staging(smp_v2, vllm)) == {
        "Stage-qwen2.5-7b": "tokenizers=0.20.3,transformers=4.46.3",
        "Stage-gpt-j-6b": None,  # weights only vLLM reads: a folder transformers 5 wrote is staged
    }


def test_the_deepspeed_images_readers_are_the_versions_its_environment_locks():
    """core/catalog/images.py states LMI 0.27.0's transformers and tokenizers; requirements/images/lmi-0.27.txt is
    the record make test-containers runs the handler on."""
    from scripts import venv_sync

    lock = (REPO / "requirements" / "images" / "lmi-0.27.txt").read_text()
    pins = venv_sync.locked([lock], {"python_version": "3.10", "python_full_version": "3.10.0"})
    assert dict(images.lmi_image("deepspeed").folder_readers) == {
        "transformers": pins["transformers"],
        "tokenizers": pins["tokenizers"],
    }
