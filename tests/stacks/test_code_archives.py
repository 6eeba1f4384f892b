"""Each stack packages the code archives it uses, under its own prefix, with the stage's rendered serving.properties."""

from __future__ import annotations

import pytest

from stacks.config import load_config
from stacks.serving_properties import render as render_properties
from tests.cdk_assembly import REPO, render, short_id

STAGES = ["dev", "staging", "prod"]


def packages(assembly, stage: str, stack: str) -> dict[str, dict]:
    found = assembly.resources(stage, stack, "Custom::CodePackage")
    return {short_id(k).removesuffix("Archive"): render(v["Properties"]) for k, v in found.items()}


@pytest.mark.parametrize("stage", STAGES)
def test_training_stack_packages_the_flat_sourcedir_and_the_registry_inference_code(assembly, stage):
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
    registry = found["RegistryInferenceCode"]
    assert (registry["TargetPrefix"], registry["ArchiveName"], registry["TopLevelDirectory"]) == (
        "code/registry-deepspeed/",
        "model.tar.gz",
        "code",
    )


@pytest.mark.parametrize("stage", STAGES)
def test_serving_stack_packages_the_handler_with_the_stage_rendered_serving_properties(assembly, stage):
    inference = packages(assembly, stage, "Serving")["InferenceCode"]
    assert (inference["TargetPrefix"], inference["ArchiveName"], inference["TopLevelDirectory"]) == (
        "code/inference-deepspeed/",
        "model.tar.gz",
        "code",
    )
    assert inference["RequiredFiles"] == ["model.py", "serving.properties"]
    serving = load_config(REPO / "config" / "default.yaml").stages[stage].serving
    assert inference["RenderedFiles"] == {"serving.properties": render_properties(serving, stage_name=stage)}


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
