"""app.py end to end: deterministic, offline synthesis; config errors stop it with a readable message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stacks.config import load_config
from stacks.plan import render as render_plan
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
    # The CDK's own template validation runs in app.py (not in the in-process synth); its report is not compared.
    templates = sorted(
        p.relative_to(tmp_path / "again")
        for p in (tmp_path / "again").rglob("*.json")
        if p.name != "validation-report.json"
    )
    assert templates
    mismatched = [
        str(t) for t in templates if (assembly.outdir / t).read_bytes() != (tmp_path / "again" / t).read_bytes()
    ]
    assert mismatched == []


def test_invalid_config_stops_synthesis_with_the_field_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  dev:\n    region: mars-north-1\n")
    result = run_app(tmp_path / "out", config=str(bad))
    assert result.returncode != 0
    assert f"{bad}: invalid configuration" in result.stderr
    assert "stages.dev.region: not an AWS region" in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_one_stage_can_be_synthesized_alone(tmp_path):
    # app.main() in this process, given the context the CLI would pass: another app.py process would take 15 s.
    from aws_cdk import App

    import app as cdk_app

    cdk_app.main(App(context={**cdk_context(), "stage": "staging"}, outdir=str(tmp_path / "out")))
    assert sorted(p.name for p in (tmp_path / "out").glob("assembly-*")) == ["assembly-staging"]


def test_china_region_gets_its_partition_and_registry(tmp_path):
    config = tmp_path / "cn.yaml"
    config.write_text("stages:\n  dev:\n    region: cn-north-1\n    removal_policy: destroy\n")
    cn = synthesize(config, tmp_path / "out")
    assert cn.error is None, cn.findings()
    policies = json.dumps(cn.resources("dev", "Storage", "AWS::IAM::Policy"))
    assert "arn:aws-cn:ecr:cn-north-1:727897471807:repository/pytorch-training" in policies
    assert "arn:aws-cn:ecr:cn-north-1:727897471807:repository/djl-inference" in policies
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
    assert "    cost: $3.03/h at 2, $9.09/h at 6 (reference on-demand price)" in plan


def test_plan_shows_copies_per_instance_when_tensor_parallelism_leaves_gpus(tmp_path):
    from stacks.config import ServingConfig
    from stacks.plan import describe_serving

    lines = describe_serving(ServingConfig(model="gpt-j-6b", tensor_parallel_degree=2, instance_type="ml.g5.12xlarge"))
    assert "tensor parallel 2, 2 copies per instance" in lines[1]


def test_plan_says_where_latest_approved_weights_come_from():
    from stacks.config import ServingConfig
    from stacks.plan import describe_weights

    assert "newest approved model package of the stage's own group" in describe_weights(
        ServingConfig(weights={"source": "latest_approved"})
    )
