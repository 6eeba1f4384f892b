"""app.py end to end: deterministic, offline synthesis; any failure stops it with one readable message, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import synth_record
from core.config import load_config
from generators.plan import render as render_plan
from tests.cdk_assembly import REPO, cdk_context, synthesize


def run_app(outdir: Path, **context: str) -> subprocess.CompletedProcess:
    """Run app.py the way the CDK CLI does: context in CDK_CONTEXT_JSON, output dir in CDK_OUTDIR."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "CDK_VALIDATION"},
        "CDK_CONTEXT_JSON": json.dumps({**cdk_context(), **context}),
        "CDK_OUTDIR": str(outdir),
        # No credentials and no way out: synthesis must not need either.
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_EC2_METADATA_DISABLED": "true",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    return subprocess.run([sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, check=False)


def test_synthesis_is_byte_identical_across_processes_and_needs_no_network(assembly, tmp_path):
    result = run_app(tmp_path / "again")
    assert result.returncode == 0, result.stderr
    # The CDK's own template validation runs in app.py (not in the in-process synth); its report is not compared, nor
    # the record of which config was synthesized (app.py's, for llmp plan: core/synth_record.py).
    templates = sorted(
        p.relative_to(tmp_path / "again")
        for p in (tmp_path / "again").rglob("*.json")
        if p.name not in ("validation-report.json", synth_record.RECORD)
    )
    assert templates
    mismatched = [
        str(t) for t in templates if (assembly.outdir / t).read_bytes() != (tmp_path / "again" / t).read_bytes()
    ]
    assert mismatched == []


@pytest.mark.bad_input("config")
def test_invalid_config_stops_synthesis_with_the_field_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  dev:\n    region: mars-north-1\n")
    result = run_app(tmp_path / "out", config=str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith(f"{bad}: invalid configuration")
    assert "stages.dev.region: not an AWS region" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


# --- any failure: one message, exit status 2; DEBUG=1 shows the traceback ---------------------------------------

ONE_STAGE = "stages:\n  dev: {region: us-east-1, removal_policy: destroy}\n"

# app.py's main() with one part replaced: the way a broken install, or a bug deep inside a construct, shows. Where
# the app is built, the config is not read (validating it imports the SageMaker SDK, seconds per process): these
# tests are about what happens after.
BROKEN_IMPORT = """
sys.modules["core.config"] = None  # `import core.config` now raises ImportError
"""
CONSTRUCT_RAISES = """
import aws_cdk as cdk
import core.config
core.config.load_config = lambda *args, **kwargs: None

def bucket_name(prefix):
    raise ValueError("bucket name too long: " + prefix * 10_000)

def build(app, config, **kwargs):
    cdk.Stack(cdk.Stage(app, "dev"), "Tiny").node.add_metadata("name", bucket_name("x"))

app_py.build_app = build
"""
# One resource CloudFormation refuses (51 tags), which only the CDK's template validation sees.
TOO_MANY_TAGS = """
import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
import core.config
core.config.load_config = lambda *args, **kwargs: None

def build(app, config, **kwargs):
    tags = [cdk.CfnTag(key=f"k{i}", value="v") for i in range(51)]
    cloudwatch.CfnDashboard(cdk.Stack(cdk.Stage(app, "dev"), "Tiny"), "Board", dashboard_body="{}", tags=tags)

app_py.build_app = build
"""


def patched_app(tmp_path: Path, patch: str) -> Path:
    """A script that runs app.py's main() as `python app.py` does (the repository first on the path), `patch` first."""
    script = tmp_path / "patched_app.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nimport app as app_py\n{textwrap.dedent(patch)}\n"
        "app_py.main()\n"
    )
    return script


def app_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The Makefile's quiet, offline environment, with the CDK's template validation on (as the CLI runs it)."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("CDK_VALIDATION", "DEBUG")},
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_HOME": str(tmp_path / ".cdk-home"),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
        **extra,
    }


def run_patched(tmp_path: Path, patch: str, **extra: str) -> subprocess.CompletedProcess:
    env = {
        **app_env(tmp_path, **extra),
        "CDK_CONTEXT_JSON": json.dumps(cdk_context()),
        "CDK_OUTDIR": str(tmp_path / "out"),
    }
    script = patched_app(tmp_path, patch)
    return subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, check=False)


def cdk_synth(tmp_path: Path, patch: str) -> subprocess.CompletedProcess:
    """`cdk synth` through the pinned CLI, as `make synth` runs it, of app.py with `patch` applied."""
    command = [
        str(REPO / "node_modules" / ".bin" / "cdk"), "synth", "--quiet",
        "-a", f"{sys.executable} {patched_app(tmp_path, patch)}", "-o", str(tmp_path / "out"),
    ]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=app_env(tmp_path), capture_output=True, text=True, check=False)


def test_any_failure_is_one_line_and_exit_status_2(tmp_path):
    result = run_patched(tmp_path, BROKEN_IMPORT)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("app.py: ModuleNotFoundError: import of core.config halted"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "DEBUG=1" in result.stderr

    debug = run_patched(tmp_path, BROKEN_IMPORT, DEBUG="1")
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == result.stderr.strip()


def test_cdk_synth_prints_the_line_and_fails(tmp_path):
    result = cdk_synth(tmp_path, CONSTRUCT_RAISES)
    assert result.returncode != 0
    ours, cli = result.stderr.strip().splitlines()  # our line, then the CLI's "...: Subprocess exited with error 2"
    assert ours.startswith("app.py: ValueError: bucket name too long: xxx") and len(ours) < 300, ours
    assert cli.endswith("Subprocess exited with error 2")


def test_an_error_in_the_cdk_validation_report_fails_cdk_synth(tmp_path):
    # The CLI asks the app not to fail on its validation report (@aws-cdk/core:failSynthOnValidationErrors false)
    # and then does not fail `cdk synth` on it either: app.py reads the report it wrote.
    result = cdk_synth(tmp_path, TOO_MANY_TAGS)
    assert result.returncode != 0, result.stderr
    report = tmp_path / "out" / "validation-report.json"
    assert result.stderr.startswith(
        f"{report}: the CDK's validation of the synthesized templates found 1 error:\n"
        "  - F3032 Tags: expected maximum item count: 50, found: 51 (CloudFormation Validate): dev/Tiny/Board\n"
    ), result.stderr
    assert "Traceback" not in result.stderr


def test_the_plan_fails_with_one_line_and_exit_status_2(tmp_path):
    config, assembly = tmp_path / "one.yaml", tmp_path / "assembly"
    config.write_text(ONE_STAGE)
    plan = [sys.executable, "-m", "generators.plan", "--config", str(config), "--assembly", str(assembly)]
    result = subprocess.run(plan, cwd=REPO, env=app_env(tmp_path), capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr == f"{assembly}: no cloud assembly here; run `make synth` first\n"
    assembly.mkdir()
    (assembly / "manifest.json").write_text("{}")
    config.write_text(ONE_STAGE + ONE_STAGE)
    result = subprocess.run(plan, cwd=REPO, env=app_env(tmp_path), capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{config}: invalid configuration") and "stages: duplicate key" in result.stderr


def test_one_stage_can_be_synthesized_alone(tmp_path):
    # app.main() in this process, given the context the CLI would pass: another app.py process would take 15 s.
    from aws_cdk import App

    import app as cdk_app

    cdk_app.main(App(context={**cdk_context(), "stage": "staging"}, outdir=str(tmp_path / "out")))
    assert sorted(p.name for p in (tmp_path / "out").glob("assembly-*")) == ["assembly-staging"]


def test_govcloud_region_gets_its_partition_and_registry(tmp_path):
    # China regions are refused at synth (CloudFormation there has no AWS::SageMaker::ModelPackageGroup:
    # tests/core/test_region_support.py); GovCloud (US-West) has every image and resource type a stage uses.
    config = tmp_path / "gov.yaml"
    config.write_text("stages:\n  dev:\n    region: us-gov-west-1\n    removal_policy: destroy\n")
    gov = synthesize(config, tmp_path / "out")
    assert gov.error is None, gov.findings()
    policies = json.dumps(gov.resources("dev", "Storage", "AWS::IAM::Policy"))
    assert "arn:aws-us-gov:ecr:us-gov-west-1:442386744353:repository/pytorch-training" in policies
    assert "arn:aws-us-gov:ecr:us-gov-west-1:442386744353:repository/djl-inference" in policies
    assert "arn:aws:" not in policies


def test_plan_lists_each_stage_with_its_stacks_and_resource_counts(assembly):
    plan = render_plan(load_config(REPO / "config" / "default.yaml"), assembly.outdir)
    assert plan.splitlines()[0] == "Plan for llm-platform: 3 stage(s), in promotion order"
    assert "dev: the deploying credentials' account, us-east-1; data and key deleted with the stack" in plan
    assert "prod: the deploying credentials' account, us-east-1; data and key kept when the stack is deleted" in plan
    for stage in ["dev", "staging", "prod"]:
        for stack in ["storage", "training", "serving"]:
            assert f"llm-platform-{stage}-{stack}" in plan
    assert "4 S3::Bucket" in plan and "1 KMS::Key" in plan
    assert "  endpoint: 2-6 x ml.g5.2xlarge (1 x A10G 24 GB), engine deepspeed" in plan
    assert "    model gpt-j-6b (6.1 B parameters) in fp16, tensor parallel 1, 1 copy per instance" in plan
    assert "    memory per GPU: 16.8 GiB of 21.6 GiB usable per GPU (weights 11.3 + KV cache 3.5 + runtime 2.0)" in plan
    assert "    cost: $3.03/h at 2 instance(s), $9.09/h at 6 (maximum) (reference on-demand price)" in plan


def test_plan_shows_copies_per_instance_when_tensor_parallelism_leaves_gpus(tmp_path):
    from core.config import ServingConfig
    from generators.plan import describe_serving

    lines = describe_serving(ServingConfig(model="gpt-j-6b", tensor_parallel_degree=2, instance_type="ml.g5.12xlarge"))
    assert "tensor parallel 2, 2 copies per instance" in lines[1]


def test_plan_says_where_latest_approved_weights_come_from():
    from core.config import ServingConfig
    from generators.plan import describe_weights

    assert "newest approved model package of the stage's own group" in describe_weights(
        ServingConfig(weights={"source": "latest_approved"})
    )
