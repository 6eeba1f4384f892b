"""Served LoRA adapters, the endpoint half: adapter inference components over the base component in the synthesized
Llama LoRA example, a promotion that leaves the base untouched, and the unknown-adapter answer the clients give."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from botocore.stub import Stubber

from core import component_lookup
from tests.cdk_assembly import REPO, Assembly, render, short_id, synthesize
from tests.conftest import synthesized_once

EXAMPLE = REPO / "config" / "examples" / "llama-lora.yaml"
BASE, ADAPTER = "llamalora-dev-base", "llamalora-dev-tuned"


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Assembly:
    assembly = synthesized_once(tmp_path_factory, "llama-lora-assembly", EXAMPLE)
    assert assembly.error is None, assembly.error
    return assembly


def resources(assembly: Assembly, type_: str) -> dict[str, dict]:
    return assembly.resources("dev", "Serving", type_)


def test_the_adapter_is_a_component_over_the_base_naming_only_the_base_and_its_archive(example):
    components = {
        r["Properties"]["InferenceComponentName"]: r
        for r in resources(example, "AWS::SageMaker::InferenceComponent").values()
    }
    assert sorted(components) == [BASE, ADAPTER]
    adapter = components[ADAPTER]
    spec = adapter["Properties"]["Specification"]
    # No Model, no compute, no copies of its own: it runs in the base component's copies.
    assert set(spec) == {"BaseInferenceComponentName", "Container"}
    assert "RuntimeConfig" not in adapter["Properties"]
    assert spec["BaseInferenceComponentName"] == BASE
    base_id = next(
        k for k, r in resources(example, "AWS::SageMaker::InferenceComponent").items() if r is components[BASE]
    )
    assert adapter["DependsOn"] == [base_id]
    # The archive in the approved package's adapter folder, read when the stack deploys.
    url = render(spec["Container"]["ArtifactUrl"])
    assert (
        url
        == "<AdaptersTunedAdapterLookup.InferenceSpecification.Containers.0.Environment.ADAPTER_S3_URI>adapter.tar.gz"
    )
    lookups = {short_id(k): r["Properties"] for k, r in resources(example, "Custom::AWS").items()}
    listed = json.loads("".join(str(p) for p in render(lookups["AdaptersTunedLatestApprovedAdapter"]["Create"])))
    assert listed["parameters"]["ModelPackageGroupName"] == "llamalora-dev"
    assert listed["parameters"]["ModelApprovalStatus"] == "Approved"


def test_the_base_models_container_runs_vllm_with_lora_slots_for_its_adapter(example):
    (model,) = resources(example, "AWS::SageMaker::Model").values()
    env = model["Properties"]["PrimaryContainer"]["Environment"]
    assert {k: v for k, v in env.items() if "LORA" in k} == {
        "OPTION_ENABLE_LORA": "true",
        "OPTION_MAX_LORAS": "1",
        "OPTION_MAX_LORA_RANK": "16",  # training.lora.r of the stage
        "OPTION_MAX_CPU_LORAS": "1",
    }
    outputs = example.template("dev", "Serving")["Outputs"]
    assert outputs["AdapterComponentNames"]["Value"] == ADAPTER


def test_promoting_a_new_adapter_changes_the_adapter_alone(example, tmp_path):
    """A pipeline execution (release) after a new adapter is approved: the lookup runs again and the adapter component
    may get a new archive; the base component, its Model and the endpoint config are the same resources."""
    promoted = synthesize(EXAMPLE, tmp_path / "promoted", release="execution-2", only_stage="dev")
    assert promoted.error is None, promoted.error

    def unchanged(assembly: Assembly) -> dict:
        kept = ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint")
        found = {k: v for t in kept for k, v in resources(assembly, t).items()}
        found |= {
            k: v
            for k, v in resources(assembly, "AWS::SageMaker::InferenceComponent").items()
            if v["Properties"]["InferenceComponentName"] == BASE
        }
        return found

    assert unchanged(promoted) == unchanged(example)
    assert len(unchanged(example)) == 4

    def lookup(assembly: Assembly) -> str:
        (props,) = [
            r["Properties"] for k, r in resources(assembly, "Custom::AWS").items() if "LatestApprovedAdapter" in k
        ]
        return json.dumps(props["Create"])

    # What does change: the adapter's lookup of the newest approved package runs again for the new release.
    assert "llamalora-dev@execution-2" in lookup(promoted)
    assert "llamalora-dev@manual" in lookup(example)


# --- the unknown adapter ------------------------------------------------------------------------------------------

ENDPOINT = "llamalora-dev"


def clients():
    runtime = boto3.client(
        "sagemaker-runtime", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    sagemaker = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
    return runtime, Stubber(runtime), sagemaker, Stubber(sagemaker)


def stub_components(stub: Stubber) -> None:
    stub.add_response(
        "list_inference_components",
        {
            "InferenceComponents": [
                {
                    "InferenceComponentName": name,
                    "InferenceComponentArn": f"arn:aws:sagemaker:us-east-1:111111111111:inference-component/{name}",
                    "EndpointName": ENDPOINT,
                    "EndpointArn": f"arn:aws:sagemaker:us-east-1:111111111111:endpoint/{ENDPOINT}",
                    "VariantName": "AllTraffic",
                    "CreationTime": "2026-01-01T00:00:00Z",
                    "LastModifiedTime": "2026-01-01T00:00:00Z",
                }
                for name in (BASE, ADAPTER)
            ]
        },
        {"EndpointNameEquals": ENDPOINT},
    )
    for name, spec in ((BASE, {"ModelName": "m"}), (ADAPTER, {"BaseInferenceComponentName": BASE})):
        stub.add_response(
            "describe_inference_component",
            {
                "InferenceComponentName": name,
                "InferenceComponentArn": f"arn:aws:sagemaker:us-east-1:111111111111:inference-component/{name}",
                "EndpointName": ENDPOINT,
                "EndpointArn": f"arn:aws:sagemaker:us-east-1:111111111111:endpoint/{ENDPOINT}",
                "Specification": spec,
                "CreationTime": "2026-01-01T00:00:00Z",
                "LastModifiedTime": "2026-01-01T00:00:00Z",
            },
            {"InferenceComponentName": name},
        )


def refused(stub: Stubber, component: str, code: str = "ValidationError", status: int = 400) -> None:
    stub.add_client_error(
        "invoke_endpoint",
        service_error_code=code,
        service_message=f"Inference Component {component} not found.",
        http_status_code=status,
        expected_params={"EndpointName": ENDPOINT, "InferenceComponentName": component, "Body": b"{}"},
    )


def test_an_unknown_adapter_is_a_4xx_naming_the_adapters_and_models_there_are():
    runtime, runtime_stub, sagemaker, sagemaker_stub = clients()
    refused(runtime_stub, "llamalora-dev-tunde")
    stub_components(sagemaker_stub)
    with runtime_stub, sagemaker_stub, pytest.raises(component_lookup.UnknownComponent) as raised:
        component_lookup.invoke(runtime, sagemaker, endpoint_name=ENDPOINT, component="llamalora-dev-tunde", body=b"{}")
    assert raised.value.status == 400
    assert str(raised.value) == (
        "endpoint llamalora-dev has no adapter or model 'llamalora-dev-tunde' (HTTP 400); its adapters: "
        "llamalora-dev-tuned (over llamalora-dev-base); its base models: llamalora-dev-base. Name one of them as the "
        "inference component"
    )


def test_a_refusal_of_a_component_that_exists_and_other_errors_stay_sagemakers():
    runtime, runtime_stub, sagemaker, sagemaker_stub = clients()
    refused(runtime_stub, ADAPTER)
    stub_components(sagemaker_stub)
    with runtime_stub, sagemaker_stub, pytest.raises(runtime.exceptions.ValidationError):
        component_lookup.invoke(runtime, sagemaker, endpoint_name=ENDPOINT, component=ADAPTER, body=b"{}")
    # The model's own error (ModelError) is no question of names: nothing is listed.
    runtime, runtime_stub, sagemaker, sagemaker_stub = clients()
    refused(runtime_stub, ADAPTER, code="ModelError", status=424)
    with runtime_stub, sagemaker_stub, pytest.raises(runtime.exceptions.ModelError):
        component_lookup.invoke(runtime, sagemaker, endpoint_name=ENDPOINT, component=ADAPTER, body=b"{}")
    sagemaker_stub.assert_no_pending_responses()


def test_a_known_adapter_is_invoked_by_its_component_name():
    runtime, runtime_stub, sagemaker, _ = clients()
    runtime_stub.add_response(
        "invoke_endpoint",
        {"Body": io.BytesIO(b'{"generated_text": "hi"}'), "ContentType": "application/json"},
        {"EndpointName": ENDPOINT, "InferenceComponentName": ADAPTER, "Body": b"{}"},
    )
    with runtime_stub:
        reply = component_lookup.invoke(runtime, sagemaker, endpoint_name=ENDPOINT, component=ADAPTER, body=b"{}")
    assert json.loads(reply["Body"].read()) == {"generated_text": "hi"}
