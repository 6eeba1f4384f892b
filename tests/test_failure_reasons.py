"""A failure whose message spans several lines keeps its reason on the default path (no DEBUG=1): a construct
validation error of the CDK, a jsii error with one line per broken rule, a config error with one line per field."""

from __future__ import annotations

import pytest

from core import failures
from infrastructure import validation_report
from tests.test_app import run_app, run_patched

# aws-cdk-lib's bucket-name check raises through jsii one line per rule the name breaks.
BAD_BUCKET_NAME = """
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
import core.config
core.config.load_config = lambda *args, **kwargs: None

def build(app, config, **kwargs):
    s3.Bucket(cdk.Stack(cdk.Stage(app, "dev"), "Tiny"), "Data", bucket_name="Data_Bucket")

app_py.build_app = build
"""


@pytest.mark.bad_input("config")
def test_a_construct_validation_error_keeps_the_resource_type_and_the_regions_that_have_it(tmp_path):
    """A stage in cn-northwest-1: CloudFormation there has no AWS::SageMaker::ModelPackageGroup, and the app's region
    check (core/region_support.py) fails synth with the CDK's "Validation failed with the following errors:" and
    the reason on the lines after it."""
    china = tmp_path / "china.yaml"
    china.write_text("stages:\n  dev: {region: cn-northwest-1, removal_policy: destroy}\n")
    result = run_app(tmp_path / "out", config=str(china))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(
        "synth stopped: the CDK's validation of the constructs found 1 error:\n"
        "  - llm-platform-dev-training: CloudFormation in cn-northwest-1 has no AWS::SageMaker::ModelPackageGroup "
        "(cfn-lint "
    ), result.stderr
    offered = result.stderr.split("; regions with every resource type of this stack: ", 1)[1].split("\n", 1)[0]
    assert {"us-east-1", "us-gov-west-1"} <= set(offered.split(", ")), offered
    assert "cn-northwest-1" not in offered


def test_a_multi_line_jsii_error_keeps_every_rule_broken(tmp_path):
    result = run_patched(tmp_path, BAD_BUCKET_NAME)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "Invalid S3 bucket name (value: Data_Bucket)" in result.stderr
    assert "Bucket name must only contain lowercase characters" in result.stderr, result.stderr
    assert "Bucket name must start with a lowercase character or number" in result.stderr, result.stderr


@pytest.mark.bad_input("config")
def test_a_multi_line_config_error_keeps_every_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  dev:\n    region: mars-north-1\n    removal_policy: sometimes\n")
    result = run_app(tmp_path / "out", config=str(bad))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"{bad}: invalid configuration")
    assert "stages.dev.region: not an AWS region" in result.stderr
    assert "stages.dev.removal_policy" in result.stderr, result.stderr


def test_describe_keeps_each_line_of_a_message_and_cuts_only_what_is_too_long():
    error = RuntimeError("first line\n\n  the reason, on line two\n" + "x" * 10_000)
    lines = failures.describe(error, program="app.py").splitlines()
    assert lines[0] == "app.py: RuntimeError: first line; DEBUG=1 shows the traceback"
    assert lines[1] == "  the reason, on line two"
    assert lines[2].startswith("  xxx") and lines[2].endswith("...") and len(lines[2]) < 1100
    assert len(lines) == 3


def test_describe_lists_a_bounded_number_of_lines():
    error = RuntimeError("many problems:\n" + "\n".join(f"problem {n}" for n in range(1, 101)))
    lines = failures.describe(error, program="app.py").splitlines()
    assert lines[1] == "  problem 1"
    assert lines[failures.MAX_LINES] == f"  problem {failures.MAX_LINES}"
    assert lines[-1] == f"  ... and {100 - failures.MAX_LINES} more lines"
    assert len(lines) == failures.MAX_LINES + 2


def test_construct_validation_errors_are_listed_with_their_paths_and_every_line():
    error = RuntimeError(
        f"{validation_report.CONSTRUCT_ERRORS}\n  [dev/Serving] endpoint too small\n  needs 2 GPUs\n  [] region lacks X"
    )
    refused = validation_report.construct_errors(error)
    assert str(refused) == (
        "synth stopped: the CDK's validation of the constructs found 2 errors:\n"
        "  - dev/Serving: endpoint too small\n"
        "    needs 2 GPUs\n"
        "  - region lacks X"
    )
    assert validation_report.construct_errors(RuntimeError("Invalid S3 bucket name\nmust be lowercase")) is None
