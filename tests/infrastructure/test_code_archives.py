"""Each stack packages the code it uses: archives under its own prefix, and the endpoint's handler beside the weights."""

from __future__ import annotations

import json

import pytest

from core.config import load_config
from core.serving_properties import environment as environment_of
from tests.cdk_assembly import REPO, render, short_id

STAGES = ["dev", "staging", "prod"]


def packages(assembly, stage: str, stack: str) -> dict[str, dict]:
    found = assembly.resources(stage, stack, "Custom::CodePackage")
    return {short_id(k).removesuffix("Archive"): render(v["Properties"]) for k, v in found.items()}


@pytest.mark.parametrize("stage", STAGES)
def test_training_stack_packages_the_flat_sourcedir_and_the_registry_handler(assembly, stage):
    found = packages(assembly, stage, "Training")
    training = found["TrainingCode"]
    assert (training["TargetPrefix"], training["ArchiveName"], training["TopLevelDirectory"]) == (
        "code/training/",
        "sourcedir.tar.gz",
        "",
    )
    assert training["RequiredFiles"] == [
        "evaluate.py",
        "prepare_data.py",
        "requirements.txt",
        "stage_model.py",
        "train.py",
    ]
    # The handler a registered package's weights carry: plain files, copied beside them by the Evaluate job.
    registry = found["RegistryHandlerFiles"]
    assert (registry["TargetUri"].endswith("/code/registry-deepspeed/"), registry["Subfolder"]) == (True, "inference/")


@pytest.mark.parametrize("stage", STAGES)
def test_serving_stack_writes_the_handler_into_the_served_weights_prefix_without_serving_properties(assembly, stage):
    (inference,) = [v for k, v in packages_raw(assembly, stage, "Serving").items() if "InferenceCode" in k]
    (model,) = assembly.resources(stage, "Serving", "AWS::SageMaker::Model").values()
    served = model["Properties"]["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]["S3Uri"]
    assert (inference["TargetUri"], inference["Subfolder"]) == (served, "inference/")
    assert "ArchiveName" not in inference and "RenderedFiles" not in inference  # plain files, no archive
    assert "model.py" in inference["RequiredFiles"]
    # serving.properties stays out of the folder: its keys are the Model's OPTION_* environment.
    environment = dict(model["Properties"]["PrimaryContainer"]["Environment"])
    serving = load_config(REPO / "config" / "default.yaml").stages[stage].serving
    entry_point = environment.pop("OPTION_ENTRYPOINT")
    assert environment == {k: v for k, v in environment_of(serving).items() if k != "OPTION_ENTRYPOINT"}
    assert "/model.py" in json.dumps(entry_point)


def packages_raw(assembly, stage: str, stack: str) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in assembly.resources(stage, stack, "Custom::CodePackage").items()}


def test_archive_keys_stay_inside_their_stack(assembly):
    # A key changes with every code change; CloudFormation cannot change an export another stack imports.
    for stack in ["Training", "Serving"]:
        outputs = assembly.template("prod", stack).get("Outputs", {})
        assert not [k for k, v in outputs.items() if "Export" in v and "Archive" in str(v["Value"])]


def test_superseded_archives_expire_after_a_grace_longer_than_any_training_job(assembly):
    # SageMaker stops a training job after at most 28 days.
    buckets = assembly.resources("prod", "Storage", "AWS::S3::Bucket")
    artifacts = next(v for k, v in buckets.items() if short_id(k) == "Artifacts")
    rules = {r["Id"]: r for r in artifacts["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-superseded-code"] == {
        "Id": "expire-superseded-code",
        "Status": "Enabled",
        "Prefix": "code/",
        "TagFilters": [{"Key": "superseded", "Value": "true"}],
        "ExpirationInDays": 35,
    }


@pytest.mark.parametrize(
    ("requirements", "message"),
    [
        # The file as it was before the lock: pip would install it with no hash checked.
        ("transformers==4.21.0\n", r"lacks the line `--require-hashes`: the training toolkit passes pip no options"),
        (
            f"--require-hashes\n--only-binary :all:\ntransformers==4.21.0 --hash=sha256:{'a' * 64}\nsafetensors==0.4.5\n",
            r"requirements\.txt:4: safetensors==0\.4\.5 is not locked .*scripts/lock_training_requirements\.py",
        ),
        (
            f"--require-hashes\n--only-binary :all:\ntransformers>=4.21 --hash=sha256:{'a' * 64}\n",
            r"requirements\.txt:3: transformers>=4\.21 is not locked",
        ),
        (
            f"--require-hashes\n--only-binary :all:\n-r more.txt\ntransformers==4.21.0 --hash=sha256:{'a' * 64}\n",
            r"requirements\.txt:3: '-r more\.txt' brings in requirements this check cannot see",
        ),
    ],
)
def test_synth_refuses_training_requirements_pip_would_install_unhashed(tmp_path, monkeypatch, requirements, message):
    from aws_cdk import App, Stack
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3

    from infrastructure import code_archives

    (tmp_path / "requirements.txt").write_text(requirements)
    monkeypatch.setattr(code_archives, "TRAINING_SOURCE", tmp_path)
    stack = Stack(App(), "Test")
    with pytest.raises(ValueError, match=message):
        code_archives.training_code(stack, bucket=s3.Bucket(stack, "Bucket"), encryption_key=kms.Key(stack, "Key"))


def test_the_training_code_ships_the_hashed_lock_it_was_checked_against():
    from core.training_job import TRAINING_REQUIREMENTS, check_hash_locked
    from infrastructure import code_archives

    assert code_archives.TRAINING_SOURCE / "requirements.txt" == TRAINING_REQUIREMENTS
    check_hash_locked(TRAINING_REQUIREMENTS)
