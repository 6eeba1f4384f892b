"""The promotion pipeline's smoke test streams: each stage's smoke-test role may call
InvokeEndpointWithResponseStream on that stage's endpoint (and nothing else new), and the pipeline tells the smoke
test which engine's response formats to expect."""

from __future__ import annotations

import json

from stacks.config import load_config
from tests.cdk_assembly import APP, REPO

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
