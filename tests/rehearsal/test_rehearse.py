"""The whole rehearsal, as `make rehearse` runs it: the real CDK CLI against moto's server (about a minute)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rehearsal.server import is_listening

REPO = Path(__file__).resolve().parents[2]

CHECKS = [
    "stacks created",
    "assets published",
    "KMS keys",
    "S3 buckets",
    "IAM roles",
    "IAM policies",
    "SageMaker model",
    "SageMaker endpoint config",
    "SageMaker endpoint",
    "redeploy is a no-op",
    "stacks deleted",
    "removal policy kept",
    "data as the removal policy promises",
    "endpoint deleted",
]


@pytest.fixture(scope="module")
def rehearsal() -> tuple[int, str]:
    """(exit status, stdout and stderr) of one `python -m rehearsal.rehearse`."""
    completed = subprocess.run(
        [sys.executable, "-m", "rehearsal.rehearse"],
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return completed.returncode, completed.stdout + completed.stderr


def test_every_check_passes_and_each_is_reported(rehearsal):
    status, output = rehearsal
    results = re.findall(r"^  (PASS|FAIL)  ([^:]+):", output, re.MULTILINE)
    assert results == [("PASS", name) for name in CHECKS], output
    assert f"Result: {len(CHECKS)} checks, {len(CHECKS)} passed, 0 failed" in output
    assert status == 0


def test_steps_run_in_order_through_the_cli(rehearsal):
    _, output = rehearsal
    steps = re.findall(r"^\[\s*[\d.]+s\] (\w+)", output, re.MULTILINE)
    assert steps == ["emulator", "synth", "bootstrap", "deploy", "redeploy", "put", "destroy", "emulator"], output
    assert "bootstrap: cdk bootstrap aws://123456789012/us-east-1" in output
    assert "deploy: cdk deploy 'staging/*' (3 stacks)" in output


def test_retained_buckets_key_and_data_survive_the_destroy(rehearsal):
    _, output = rehearsal
    assert "checks after destroy (removal_policy: retain):" in output
    assert re.search(
        r"PASS  removal policy kept: retain: all \d+ marked Retain are there: .*4 Bucket \(KMS keys Enabled, not pending "
        r"deletion\)",
        output,
    )
    assert re.search(
        r"PASS  data as the removal policy promises: retain: s3://llm-platform-staging-storage-data\S+ is there, byte "
        r"for byte",
        output,
    )
    assert "PASS  redeploy is a no-op: 3 stacks report no changes; no stack event was added" in output
    assert "emptied" not in output  # a stage that retains its data has no Custom::S3AutoDeleteObjects


def test_output_says_why_staging_and_that_it_is_deployed_as_configured(rehearsal):
    _, output = rehearsal
    assert "why staging: staging is the first stage in promotion order that keeps its data" in output
    assert "overlay, for this rehearsal only: no changes" in output
    assert "1 x ml.g5.2xlarge" in output


def test_output_says_what_moto_does_not_emulate(rehearsal):
    _, output = rehearsal
    gaps = output.split("What moto does not emulate", 1)[1]
    for expected in [
        "the endpoint was deployed on its configured ml.g5.2xlarge, which the emulator accepts",
        "AWS::SageMaker::Pipeline (2)",
        "AWS::S3::BucketPolicy (4)",
        "AWS::CloudWatch::Alarm (4)",
        "AWS::SageMaker::ModelPackageGroup (1)",
        "custom resources Custom::AWS (1), Custom::CodePackage (3): never run",
        "staging/Serving/Endpoint/Model: PrimaryContainer.Environment.OPTION_ENTRYPOINT[1][1] <- "
        "staging/Serving/InferenceCode/Files/Default.Sha256 (Custom::CodePackage)",
        "the SageMaker model's weights prefix (PrimaryContainer.ModelDataSource of staging/Serving/Endpoint/Model)",
        "the IAM policy staging/Serving/CodePackaging/HandlerRole/DefaultPolicy/Resource",
        "staging/Serving output InferenceCodeUri <- ",
        "the SageMaker model's network isolation (EnableNetworkIsolation of staging/Serving/Endpoint/Model)",
        "the template sets True; moto created the model with False",
        "moto ignores the EndpointName property",
        "fixed in the emulator (kms-key-from-template)",
        "fixed in the emulator (change-set-outputs)",
        "fixed in the emulator (imports-in-change-sets)",
        "fixed in the emulator (endpoint-instance-types)",
    ]:
        assert expected in gaps, expected


def test_leaves_no_emulator_running_and_no_work_directory(rehearsal):
    _, output = rehearsal
    port = int(re.search(r"moto's server on 127\.0\.0\.1:(\d+)", output).group(1))
    assert not is_listening(port)
    work_dir = Path(re.search(r"work directory \(logs, cloud assembly\): (\S+)", output).group(1))
    assert not work_dir.exists()
