"""The fine-tuning pipeline of a LoRA / QLoRA stage: plain PyTorch in the SMP v2 image without SMP, the base's commit
recorded with the adapter, evaluation over the base, and a model package that names its base."""

from __future__ import annotations

import json
from functools import cache

from core.catalog import images
from core.config import TrainingConfig
from core.config.lora_serving import ADAPTER_ARCHIVE
from tests.infrastructure.test_training_pipeline import REGISTERED, decoded, definition, staged_at, step
from training.finetune.hyperparameters import HYPERPARAMETER_NAMES, parse_hyperparameters

LLAMA_RECORD = staged_at("pretrained/llama-3.1-8b/", "pretrained/llama-3.1-8b/main.json")
LLAMA_COMMIT = LLAMA_RECORD["Std:Join"]["Values"][1]


def llama_lora(**fields) -> TrainingConfig:
    return TrainingConfig.model_validate(
        {
            "model": "llama-3.1-8b",
            "method": "lora",
            "instance_type": "ml.g5.2xlarge",
            "precision": "bf16",
            "train_batch_size": 1,
            "val_batch_size": 2,
            **fields,
        }
    )


def parsed_flags(hyperparameters: dict) -> object:
    """train.py's parse of a Train step's hyperparameters (the SMP layout aside), each a flag it knows."""
    ours = {k for k in hyperparameters if not k.startswith("sagemaker_") and k != "mp_parameters"}
    assert ours <= set(HYPERPARAMETER_NAMES)
    argv = []
    for name in sorted(ours):
        value = hyperparameters[name]
        # Pipeline variables: a stand-in value, 1, within every limit (a batch of 1 fits wherever the stage does).
        value = "1" if isinstance(value, dict) else str(json.loads(value))
        argv += [f"--{name}", value]
    parsed, _ = parse_hyperparameters([*argv, "--pretrained_dir", "/opt/ml/input/data/model"], environ={})
    return parsed


@cache
def lora_definition() -> dict:
    return definition(llama_lora(lora={"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}))


def test_one_gpu_trains_in_one_process_without_smp_in_the_smp_v2_image() -> None:
    args = step(lora_definition(), "Train")["Arguments"]
    assert args["AlgorithmSpecification"]["TrainingImage"] == images.training_image("us-east-1", 2)
    hyperparameters = decoded(args["HyperParameters"])
    assert not {"mp_parameters", "sagemaker_mpi_enabled", "sagemaker_torch_distributed_enabled"} & set(hyperparameters)
    assert {name: hyperparameters[name] for name in ("backend", "method", "lora_r", "lora_alpha")} == {
        "backend": "torch",
        "method": "lora",
        "lora_r": 8,
        "lora_alpha": 16,
    }
    assert hyperparameters["lora_target_modules"] == "q_proj,v_proj"
    assert hyperparameters["base_model_id"] == "meta-llama/Llama-3.1-8B"
    # The commit the run reads from the staging record, JSON-quoted so the toolkit decodes it to the same string.
    assert hyperparameters["base_model_revision"] == {"Std:Join": {"On": "", "Values": ['"', LLAMA_COMMIT, '"']}}


def test_several_gpus_train_under_torchrun() -> None:
    config = llama_lora(instance_type="ml.g5.12xlarge")
    hyperparameters = decoded(step(definition(config), "Train")["Arguments"]["HyperParameters"])
    assert hyperparameters["sagemaker_torch_distributed_enabled"] is True
    assert "mp_parameters" not in hyperparameters and "sagemaker_mpi_enabled" not in hyperparameters


def test_every_flag_of_an_adapter_stage_is_one_train_py_accepts() -> None:
    hyperparameters = step(lora_definition(), "Train")["Arguments"]["HyperParameters"]
    parsed = parsed_flags(hyperparameters)
    assert parsed.method == "lora" and parsed.lora_r == 8 and parsed.bf16 is True


def test_prepare_and_evaluate_run_in_the_training_image_and_evaluate_reads_the_base() -> None:
    defn = lora_definition()
    for name in ("PrepareData", "Evaluate"):
        assert step(defn, name)["Arguments"]["AppSpecification"]["ImageUri"] == images.training_image("us-east-1", 2)
    inputs = {i["InputName"]: i["S3Input"] for i in step(defn, "Evaluate")["Arguments"]["ProcessingInputs"]}
    assert inputs["base"]["LocalPath"] == "/opt/ml/processing/base"  # evaluate.py's --base_model_dir default
    assert inputs["base"]["S3Uri"] == LLAMA_RECORD
    assert inputs["model"]["S3Uri"] == {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifacts"}


def test_the_registered_adapter_names_its_base_and_no_whole_model_weights() -> None:
    register = step(lora_definition(), "Register-RegisterModel")["Arguments"]
    (container,) = register["InferenceSpecification"]["Containers"]
    # The package records the adapter archive its inference component loads (ArtifactUrl), not the stage's
    # inference code, and nothing SageMaker would deliver as a whole model: in the registry's copy of the job's folder.
    assert container["ModelDataUrl"] == {"Std:Join": {"On": "", "Values": [REGISTERED, ADAPTER_ARCHIVE]}}
    assert "ModelDataSource" not in container
    assert container["Environment"] == {
        "ADAPTER_S3_URI": REGISTERED,
        "ADAPTER_METHOD": "lora",
        "BASE_MODEL": "llama-3.1-8b",
        "BASE_MODEL_ID": "meta-llama/Llama-3.1-8B",
        "BASE_MODEL_COMMIT": LLAMA_COMMIT,
        "BASE_WEIGHTS_S3_URI": LLAMA_RECORD,
        "TENSOR_PARALLEL_DEGREE": "1",
    }
    assert register["CustomerMetadataProperties"] == {
        "PretrainedModel": "meta-llama/Llama-3.1-8B",
        "PretrainedCommit": LLAMA_COMMIT,
        "Method": "lora",
        "BaseModel": "llama-3.1-8b",
    }
    assert register["ModelPackageDescription"] == "LORA adapter (r=8) for llama-3.1-8b"


@cache
def sharded_definition() -> dict:
    config = llama_lora(
        instance_type="ml.p4d.24xlarge", train_batch_size=4, smp={"version": 2, "hybrid_shard_degree": 8}
    )
    return definition(config)


def test_lora_over_a_sharded_base_is_launched_like_an_smp_v2_job() -> None:
    args = step(sharded_definition(), "Train")["Arguments"]
    assert args["AlgorithmSpecification"]["TrainingImage"] == images.training_image("us-east-1", 2)
    hyperparameters = decoded(args["HyperParameters"])
    assert (
        hyperparameters["sagemaker_torch_distributed_enabled"] is True
        and "sagemaker_mpi_enabled" not in hyperparameters
    )
    assert hyperparameters["mp_parameters"] == {
        "tensor_parallel_degree": 1,
        "hybrid_shard_degree": 8,
        "sm_activation_offloading": False,
        "activation_loading_horizon": 4,
    }
    assert {name: hyperparameters[name] for name in ("backend", "method", "lora_r", "lora_target_modules")} == {
        "backend": "smp_v2",
        "method": "lora",
        "lora_r": 16,
        "lora_target_modules": "auto",
    }
    assert hyperparameters["base_model_revision"] == {"Std:Join": {"On": "", "Values": ['"', LLAMA_COMMIT, '"']}}
    # The rest of the pipeline is the adapter pipeline's: evaluation over the base, an adapter package.
    inputs = {
        i["InputName"]: i["S3Input"] for i in step(sharded_definition(), "Evaluate")["Arguments"]["ProcessingInputs"]
    }
    assert inputs["base"]["S3Uri"] == LLAMA_RECORD
    register = step(sharded_definition(), "Register-RegisterModel")["Arguments"]
    assert register["ModelPackageDescription"] == "LORA adapter (r=16) for llama-3.1-8b"


def test_train_py_starts_a_sharded_adapter_job_with_what_the_pipeline_passes() -> None:
    from training.finetune.hyperparameters import PlatformArguments
    from training.finetune.layout import check_layout, parse_layout, read_mp_parameters, resolve_backend

    hyperparameters = step(sharded_definition(), "Train")["Arguments"]["HyperParameters"]
    parsed = parsed_flags(hyperparameters)
    # The toolkit hands mp_parameters over as SM_HP_MP_PARAMETERS, the JSON the definition holds.
    environ = {"SM_HP_MP_PARAMETERS": hyperparameters["mp_parameters"]}
    layout = parse_layout(read_mp_parameters(environ, PlatformArguments()))
    backend, note = resolve_backend(parsed.backend, layout)
    assert (parsed.method, backend, note, layout.smp_version, layout.hybrid_shard_degree) == (
        "lora",
        "smp_v2",
        None,
        "v2",
        8,
    )
    check_layout(parsed, layout, backend, world_size=8)
