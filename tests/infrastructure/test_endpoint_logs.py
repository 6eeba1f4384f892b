"""The log groups SageMaker writes the serving containers' output to belong to the stage: a retention and the stage
key, created before the endpoint and its components so SageMaker never creates them itself (issue 26, finding 5)."""

from __future__ import annotations

import pytest

from tests.cdk_assembly import REPO, Assembly, render
from tests.conftest import synthesized_once

STAGES = ["dev", "staging", "prod"]
ONE_YEAR = 365


@pytest.fixture(scope="session")
def components_example(tmp_path_factory) -> Assembly:
    """config/examples/inference-components.yaml (the synthesis test_inference_components.py shares)."""
    assembly = synthesized_once(
        tmp_path_factory, "inference-components-assembly", REPO / "config" / "examples" / "inference-components.yaml"
    )
    assert assembly.error is None, assembly.error
    return assembly


def log_groups(assembly: Assembly, stage: str) -> dict[str, tuple[str, dict]]:
    """The serving stack's log groups by name: (logical id, properties)."""
    return {
        render(r["Properties"]["LogGroupName"]): (logical_id, r["Properties"])
        for logical_id, r in assembly.resources(stage, "Serving", "AWS::Logs::LogGroup").items()
        if "LogGroupName" in r["Properties"]
    }


def assert_owned(assembly: Assembly, stage: str, name: str, dependent_type: str, dependent_name: str) -> None:
    groups = log_groups(assembly, stage)
    assert name in groups, sorted(groups)
    logical_id, properties = groups[name]
    assert properties["RetentionInDays"] == ONE_YEAR
    # The stage key, exported by the storage stack (its logical id is Key961B73FD there).
    assert "Key961B73FD" in str(properties["KmsKeyId"])
    (dependent,) = [
        r
        for r in assembly.resources(stage, "Serving", dependent_type).values()
        if render(
            r["Properties"].get("EndpointName" if dependent_type.endswith("Endpoint") else "InferenceComponentName")
        )
        == dependent_name
    ]
    assert logical_id in dependent.get("DependsOn", []), dependent.get("DependsOn")


@pytest.mark.parametrize("stage", STAGES)
def test_the_endpoint_log_group_is_the_stages_with_a_retention_and_the_stage_key(assembly, stage):
    (endpoint,) = assembly.resources(stage, "Serving", "AWS::SageMaker::Endpoint").values()
    name = render(endpoint["Properties"]["EndpointName"])
    assert_owned(assembly, stage, f"/aws/sagemaker/Endpoints/{name}", "AWS::SageMaker::Endpoint", name)


def test_each_inference_component_logs_to_a_group_of_its_own_owned_alike(components_example):
    stage = next(iter(components_example.templates))
    components = components_example.resources(stage, "Serving", "AWS::SageMaker::InferenceComponent").values()
    names = [render(c["Properties"]["InferenceComponentName"]) for c in components]
    assert len(names) >= 2
    for name in names:
        assert_owned(
            components_example,
            stage,
            f"/aws/sagemaker/InferenceComponents/{name}",
            "AWS::SageMaker::InferenceComponent",
            name,
        )
    (endpoint,) = components_example.resources(stage, "Serving", "AWS::SageMaker::Endpoint").values()
    endpoint_name = render(endpoint["Properties"]["EndpointName"])
    assert_owned(
        components_example,
        stage,
        f"/aws/sagemaker/Endpoints/{endpoint_name}",
        "AWS::SageMaker::Endpoint",
        endpoint_name,
    )


@pytest.mark.parametrize("stage", STAGES)
def test_the_hosting_role_writes_the_endpoint_and_component_log_groups(assembly, stage):
    """SageMaker writes the containers' logs as the hosting role, into /aws/sagemaker/Endpoints/<endpoint> (and one
    group per inference component): the role's log statement names those groups, not the bare prefix."""
    policies = assembly.resources(stage, "Storage", "AWS::IAM::Policy")
    (hosting,) = [p for p in policies.values() if "HostingRole" in str(p["Properties"]["Roles"])]
    (logs,) = [s for s in hosting["Properties"]["PolicyDocument"]["Statement"] if s["Sid"] == "WriteLogs"]
    endpoint = f"llm-platform-{stage}"
    resources = ["".join(str(render(part)) for part in r["Fn::Join"][1]) for r in logs["Resource"]]
    assert [r.split(":log-group:")[1] for r in resources] == [
        f"/aws/sagemaker/Endpoints/{endpoint}:*",
        f"/aws/sagemaker/InferenceComponents/{endpoint}-*:*",
    ]
