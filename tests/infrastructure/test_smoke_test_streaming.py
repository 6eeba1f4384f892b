"""The promotion pipeline's smoke test streams: each stage's smoke-test role may call
InvokeEndpointWithResponseStream on that stage's endpoint (and nothing else new), and the pipeline tells the smoke
test which engine's response formats to expect."""

from __future__ import annotations

import json

import pytest

from core.config import ConfigError, load_config
from infrastructure.pipeline_stack import smoke_test_command
from tests.cdk_assembly import APP, REPO, synthesize

PROMOTION = REPO / "config" / "examples" / "promotion.yaml"


def _smoke_test_role_statements(assembly, stage: str) -> list[dict]:
    roles = assembly.resources(stage, "Serving", "AWS::IAM::Role")
    (role_id,) = [key for key, role in roles.items() if "SmokeTestRole" in key]
    policies = assembly.resources(stage, "Serving", "AWS::IAM::Policy").values()
    return [
        statement
        for policy in policies
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_smoke_test_role_may_stream_from_its_own_endpoint_only(promotion_assembly):
    for stage in ("dev", "staging"):
        statements = _smoke_test_role_statements(promotion_assembly, stage)
        (invoke,) = [s for s in statements if "sagemaker:InvokeEndpointWithResponseStream" in s["Action"]]
        assert sorted(invoke["Action"]) == [
            "sagemaker:DescribeEndpoint",
            "sagemaker:InvokeEndpoint",
            "sagemaker:InvokeEndpointWithResponseStream",
        ]
        resource = json.dumps(invoke["Resource"])
        assert ":endpoint/" in resource and "*" not in resource


def test_the_pipeline_runs_the_smoke_test_for_the_stages_engine(promotion_assembly):
    config = load_config(PROMOTION)
    projects = promotion_assembly.resources(APP, "Pipeline", "AWS::CodeBuild::Project").values()
    commands = [
        " ".join(json.loads(project["Properties"]["Source"]["BuildSpec"])["phases"]["build"]["commands"])
        for project in projects
        if "scripts/smoke_test.py" in project["Properties"]["Source"]["BuildSpec"]
    ]
    assert len(commands) == len(config.pipeline.smoke_test_after)
    engines = {config.stages[name].serving.engine for name in config.pipeline.smoke_test_after}
    assert all(any(f"--engine {engine}" in command for engine in engines) for command in commands)


# --- a stage that serves inference components -------------------------------------------------------------------

COMPONENTS_STAGE = """
project: llm-platform
stages:
  dev:
    region: us-east-1
    removal_policy: destroy
    serving:
      engine: vllm
      model: qwen2.5-7b
      dtype: bf16
      instance_type: ml.g5.12xlarge
      context_tokens: 8192
      max_batch_size: 4
      autoscaling: {{min_instances: 1, max_instances: 2}}
      components:
        - name: base
          min_copies: {min_copies}
          adapters:
            - {{name: sql, rank: 16, weights: {{source: s3, s3_uri: "s3://adapters/sql/adapter.tar.gz"}}}}
        - name: tuned
          weights: {{source: latest_approved}}
pipeline:
  account: "111111111111"
  region: us-east-1
  source: {{bucket: b-src, key: src.zip}}
  smoke_test_after: [dev]
"""


def components_config(tmp_path, min_copies: int):
    path = tmp_path / "components.yaml"
    path.write_text(COMPONENTS_STAGE.format(min_copies=min_copies))
    return load_config(path)


def test_the_smoke_test_checks_every_component_and_adapter_by_name(tmp_path):
    # An endpoint of components refuses a request that names none (InvokeEndpoint's InferenceComponentName).
    command = smoke_test_command(components_config(tmp_path, 1), "dev")
    assert command.endswith(
        "--engine vllm --component llm-platform-dev-base --component llm-platform-dev-tuned "
        "--component llm-platform-dev-sql"
    )


def test_a_classic_endpoint_is_smoke_tested_without_component_names():
    config = load_config(PROMOTION)
    assert all("--component" not in smoke_test_command(config, name) for name in config.pipeline.smoke_test_after)


def test_a_smoke_tested_stage_may_not_scale_a_component_to_zero(tmp_path):
    with pytest.raises(ConfigError) as error:
        components_config(tmp_path, 0)
    message = str(error.value)
    assert "pipeline.smoke_test_after" in message and "base (min_copies 0)" in message
    assert "min_copies to 1" in message


def test_the_smoke_test_role_may_invoke_each_component_and_adapter_of_its_endpoint_by_name(tmp_path):
    """Invoked by name, a component is allowed through its own ARN as well as the endpoint's: whichever IAM checks."""
    config = tmp_path / "components.yaml"
    config.write_text(COMPONENTS_STAGE.format(min_copies=1))
    assembly = synthesize(config, tmp_path / "out", only_stage="dev")
    (invoke,) = [s for s in _smoke_test_role_statements(assembly, "dev") if "sagemaker:InvokeEndpoint" in s["Action"]]
    names = sorted(json.dumps(resource).split(":", 5)[-1].rstrip('"]}') for resource in invoke["Resource"])
    assert names == [
        "endpoint/llm-platform-dev",
        "inference-component/llm-platform-dev-base",
        "inference-component/llm-platform-dev-sql",
        "inference-component/llm-platform-dev-tuned",
    ]
