"""ArtifactsStack: the training sourcedir and the LMI model.tar.gz of each stage, packaged at deploy time."""

from __future__ import annotations

import re

import pytest

from tests.cdk_assembly import render, short_id

STAGES = ["dev", "staging", "prod"]


def packages(assembly, stage: str) -> dict[str, dict]:
    found = assembly.resources(stage, "Artifacts", "Custom::CodePackage")
    return {short_id(k).removesuffix("Archive"): render(v["Properties"]) for k, v in found.items()}


@pytest.mark.parametrize("stage", STAGES)
def test_training_code_is_a_flat_sourcedir_with_the_entry_points(assembly, stage):
    training = packages(assembly, stage)["TrainingCode"]
    assert re.fullmatch(
        rf"llm-platform-{stage}-storage:ExportsOutputRefArtifacts[0-9A-F]{{8}}[0-9A-F]{{8}}",
        training["TargetBucket"]["Fn::ImportValue"],
    )
    assert (training["TargetPrefix"], training["ArchiveName"], training["TopLevelDirectory"]) == (
        "code/training/",
        "sourcedir.tar.gz",
        "",
    )
    assert training["RequiredFiles"] == ["evaluate.py", "prepare_data.py", "train.py"]


@pytest.mark.parametrize("stage", STAGES)
def test_inference_code_is_one_directory_with_serving_properties(assembly, stage):
    inference = packages(assembly, stage)["InferenceCode"]
    assert (inference["TargetPrefix"], inference["ArchiveName"], inference["TopLevelDirectory"]) == (
        "code/inference-deepspeed/",
        "model.tar.gz",
        "code",
    )
    assert inference["RequiredFiles"] == ["model.py", "serving.properties"]


def test_archive_uris_are_stack_outputs(assembly):
    outputs = render(assembly.template("prod", "Artifacts")["Outputs"])
    assert {short_id(k): v["Value"] for k, v in outputs.items() if "Export" not in v} == {
        "TrainingCodeUri": "<TrainingCodeArchive.Uri>",
        "InferenceCodeUri": "<InferenceCodeArchive.Uri>",
    }


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
