"""scripts/smoke_test.py --expect-digest: the endpoint is followed through its control plane to the weights prefixes it
serves, and one of them must hold a record of the expected digest and exactly the recorded files. S3 and SageMaker's
models, endpoint configs and endpoints are moto's; an endpoint of inference components is botocore's Stubber (moto
5.2.5 has no inference components), with responses Stubber checks against the API's output shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import smoke_test

from promotion.weights_record import PROMOTED_RECORD, REGISTERED_RECORD, files_digest

REGION = "us-east-1"
ENDPOINT = "llm-platform-prod"
BUCKET = "llm-platform-prod-models"
PROMOTED = f"s3://{BUCKET}/promoted/llm-platform-staging/7/"  # what promotion copied into the stage
REGISTERED = f"s3://{BUCKET}/registered/execution-1/"  # a version the stage registered itself
ROLE = "arn:aws:iam::123456789012:role/llm-platform/prod/endpoint"
WEIGHTS = {
    "config.json": b'{"model_type": "gptj"}',
    "model-00001-of-00002.safetensors": b"\x01" * 2048,
    "model-00002-of-00002.safetensors": b"\x02" * 1024,
    "model.safetensors.index.json": b'{"weight_map": {}}',
}
OTHER_WEIGHTS = {**WEIGHTS, "model-00002-of-00002.safetensors": b"\x03" * 1024}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    """The smoke test's SageMaker endpoint (its sagemaker and s3 clients) against moto, with a models bucket."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        endpoint = smoke_test.SageMakerEndpoint(ENDPOINT, boto3.Session(region_name=REGION))
        endpoint.s3.create_bucket(Bucket=BUCKET)
        yield endpoint


def _key(uri: str) -> str:
    return uri.removeprefix(f"s3://{BUCKET}/")


def put_weights(s3, uri: str, files: dict[str, bytes], record: str = PROMOTED_RECORD) -> str:
    """Weights under `uri` as a registration or promotion leaves them: each file written with S3's SHA-256, the
    handler folder the serving stack adds, and the record last. Returns the version's digest."""
    prefix, entries = _key(uri), {}
    for relative, body in files.items():
        s3.put_object(Bucket=BUCKET, Key=prefix + relative, Body=body, ChecksumAlgorithm="SHA256")
        head = s3.head_object(Bucket=BUCKET, Key=prefix + relative, ChecksumMode="ENABLED")
        entries[relative] = {"bytes": head["ContentLength"], "sha256": head["ChecksumSHA256"]}
    # The serving stack writes the handler beside the weights (CodeFolder): never part of a record.
    s3.put_object(Bucket=BUCKET, Key=prefix + "inference/0a1b2c/model.py", Body=b"def handle(inputs): ...")
    digest = files_digest(entries)
    body = {"files": entries}
    if record == PROMOTED_RECORD:
        body |= {"source_package": "arn:aws:sagemaker:us-east-1:333333333333:model-package/llm-platform-staging/7"}
        body |= {"source_version": 7, "digest": digest}
    s3.put_object(Bucket=BUCKET, Key=prefix + record, Body=json.dumps(body).encode())
    return digest


def serve_classic(sagemaker, uri: str) -> None:
    """A classic endpoint whose one model serves `uri` (the serving stack's CfnModel: an uncompressed S3Prefix)."""
    sagemaker.create_model(
        ModelName="lmi",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121",
            "ModelDataSource": {"S3DataSource": {"S3Uri": uri, "S3DataType": "S3Prefix", "CompressionType": "None"}},
        },
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName="lmi",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": "lmi",
                "InitialInstanceCount": 1,
                "InstanceType": "ml.g4dn.xlarge",
            }
        ],
    )
    sagemaker.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="lmi")


def check(endpoint, expected: str) -> str:
    return smoke_test.check_served_weights(endpoint.sagemaker, endpoint.s3, ENDPOINT, expected)


# --- a classic endpoint ---------------------------------------------------------------------------------------------


def test_a_classic_endpoint_serving_the_promoted_copy_passes(aws):
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    serve_classic(aws.sagemaker, PROMOTED)
    assert smoke_test.served_prefixes(aws.sagemaker, ENDPOINT) == [PROMOTED]
    assert check(aws, digest) == ""


def test_another_digest_fails_naming_the_one_served(aws):
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    serve_classic(aws.sagemaker, PROMOTED)
    expected = "sha256:" + "0" * 64
    assert check(aws, expected) == f"expected {expected}; {PROMOTED} holds {digest}"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda s3, key: s3.put_object(Bucket=BUCKET, Key=key, Body=b"\x09" * 2048, ChecksumAlgorithm="SHA256"),
            "model-00001-of-00002.safetensors has SHA-256 ",
        ),
        (
            lambda s3, key: s3.put_object(Bucket=BUCKET, Key=key, Body=b"\x01" * 2047, ChecksumAlgorithm="SHA256"),
            "model-00001-of-00002.safetensors holds 2047 bytes, the record 2048",
        ),
        (lambda s3, key: s3.delete_object(Bucket=BUCKET, Key=key), "model-00001-of-00002.safetensors is missing"),
        (
            lambda s3, key: s3.put_object(Bucket=BUCKET, Key=key.replace("00001-of", "00003-of"), Body=b"\x01"),
            "model-00003-of-00002.safetensors is not in the record",
        ),
    ],
    ids=["same-size-other-bytes", "other-size", "deleted", "file-added"],
)
def test_weights_changed_after_the_record_fail(aws, change, problem):
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    serve_classic(aws.sagemaker, PROMOTED)
    change(aws.s3, _key(PROMOTED) + "model-00001-of-00002.safetensors")
    found = check(aws, digest)
    assert found.startswith(f"expected {digest}; {PROMOTED} holds {digest} but s3://{BUCKET}/")
    assert problem in found


def test_a_served_prefix_without_a_record_fails(aws):
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    aws.s3.delete_object(Bucket=BUCKET, Key=_key(PROMOTED) + PROMOTED_RECORD)
    serve_classic(aws.sagemaker, PROMOTED)
    assert check(aws, digest).startswith(f"expected {digest}; no record at {PROMOTED}: ")


def test_an_endpoint_serving_another_prefix_fails(aws):
    """The promoted copy is in the bucket, but the endpoint still serves a version the stage registered itself."""
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    other = put_weights(aws.s3, REGISTERED, OTHER_WEIGHTS, record=REGISTERED_RECORD)
    serve_classic(aws.sagemaker, REGISTERED)
    assert check(aws, digest) == f"expected {digest}; {REGISTERED} holds {other}"


def test_a_record_whose_digest_its_files_do_not_make_fails(aws):
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    key = _key(PROMOTED) + PROMOTED_RECORD
    record = json.loads(aws.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps({**record, "digest": "sha256:" + "1" * 64}).encode())
    serve_classic(aws.sagemaker, PROMOTED)
    assert f"but the record says sha256:{'1' * 64}, its files make {digest}" in check(aws, digest)


# --- an endpoint of inference components ----------------------------------------------------------------------------

ADAPTER_ARCHIVE = f"s3://{BUCKET}/promoted/llm-platform-staging-sql/2/adapter.tar.gz"


def stub_components(sagemaker) -> Stubber:
    """An endpoint of two components as the serving stack makes them: `base` on its own Model (the weights prefix),
    and the adapter `sql` over it, whose archive is the component's Container.ArtifactUrl."""
    stubber = Stubber(sagemaker)
    stubber.add_response(
        "describe_endpoint",
        {
            "EndpointName": ENDPOINT,
            "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{ENDPOINT}",
            "EndpointConfigName": "components",
            "EndpointStatus": "InService",
            "CreationTime": "2026-01-01",
            "LastModifiedTime": "2026-01-01",
        },
        {"EndpointName": ENDPOINT},
    )
    # An endpoint config for inference components: instances and routing, no model.
    stubber.add_response(
        "describe_endpoint_config",
        {
            "EndpointConfigName": "components",
            "EndpointConfigArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint-config/components",
            "ProductionVariants": [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.12xlarge"}],
            "CreationTime": "2026-01-01",
        },
        {"EndpointConfigName": "components"},
    )
    names = [f"{ENDPOINT}-base", f"{ENDPOINT}-sql"]
    stubber.add_response(
        "list_inference_components",
        {
            "InferenceComponents": [
                {
                    "InferenceComponentName": name,
                    "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:123456789012:inference-component/{name}",
                    "EndpointName": ENDPOINT,
                    "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{ENDPOINT}",
                    "VariantName": "AllTraffic",
                    "CreationTime": "2026-01-01",
                    "LastModifiedTime": "2026-01-01",
                }
                for name in names
            ]
        },
        {"EndpointNameEquals": ENDPOINT},
    )
    specifications = [
        {"ModelName": "base", "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 1024}},
        {"BaseInferenceComponentName": names[0], "Container": {"ArtifactUrl": ADAPTER_ARCHIVE}},
    ]
    for name, specification in zip(names, specifications, strict=True):
        stubber.add_response(
            "describe_inference_component",
            {
                "InferenceComponentName": name,
                "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:123456789012:inference-component/{name}",
                "EndpointName": ENDPOINT,
                "EndpointArn": f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/{ENDPOINT}",
                "Specification": specification,
                "CreationTime": "2026-01-01",
                "LastModifiedTime": "2026-01-01",
            },
            {"InferenceComponentName": name},
        )
    stubber.add_response(
        "describe_model",
        {
            "ModelName": "base",
            "ModelArn": f"arn:aws:sagemaker:{REGION}:123456789012:model/base",
            "CreationTime": "2026-01-01",
            "PrimaryContainer": {
                "Image": "lmi",
                "ModelDataSource": {
                    "S3DataSource": {"S3Uri": REGISTERED, "S3DataType": "S3Prefix", "CompressionType": "None"}
                },
            },
        },
        {"ModelName": "base"},
    )
    return stubber


def test_an_endpoint_of_components_serving_the_promoted_adapter_passes(aws):
    """The base component serves the stage's own weights; the adapter component serves the promoted adapter."""
    put_weights(aws.s3, REGISTERED, OTHER_WEIGHTS, record=REGISTERED_RECORD)
    adapter = put_weights(aws.s3, ADAPTER_ARCHIVE.rpartition("/")[0] + "/", {"adapter.tar.gz": b"\x1f\x8b" * 64})
    with stub_components(aws.sagemaker) as stubber:
        assert check(aws, adapter) == ""
        stubber.assert_no_pending_responses()


def test_an_endpoint_of_components_serving_the_promoted_base_model_passes(aws):
    digest = put_weights(aws.s3, REGISTERED, WEIGHTS, record=REGISTERED_RECORD)
    with stub_components(aws.sagemaker):
        assert check(aws, digest) == ""


def test_an_endpoint_of_components_names_each_prefix_it_serves_when_none_matches(aws):
    other = put_weights(aws.s3, REGISTERED, OTHER_WEIGHTS, record=REGISTERED_RECORD)
    expected = "sha256:" + "0" * 64
    with stub_components(aws.sagemaker):
        found = check(aws, expected)
    adapter_folder = ADAPTER_ARCHIVE.rpartition("/")[0] + "/"
    assert found.startswith(f"expected {expected}; {REGISTERED} holds {other}; no record at {adapter_folder}: ")


# --- the script -----------------------------------------------------------------------------------------------------


def test_the_check_runs_after_the_request_checks(aws, monkeypatch, capsys):
    digest = put_weights(aws.s3, PROMOTED, WEIGHTS)
    serve_classic(aws.sagemaker, PROMOTED)
    monkeypatch.setattr(
        smoke_test, "check_requests", lambda endpoint, report, engine, chat: report("a prompt answers", "")
    )
    assert smoke_test.run_checks(aws, expect_digest=digest) == []
    out = capsys.readouterr().out
    assert out.index("ok   a prompt answers") < out.index("ok   serves the promoted version")
    assert smoke_test.run_checks(aws, expect_digest="sha256:" + "0" * 64) == [
        f"serves the promoted version: expected sha256:{'0' * 64}; {PROMOTED} holds {digest}"
    ]


def test_without_expect_digest_the_weights_are_not_followed(aws, monkeypatch):
    serve_classic(aws.sagemaker, PROMOTED)  # no record: following it would fail
    monkeypatch.setattr(smoke_test, "check_requests", lambda *args: None)
    assert smoke_test.run_checks(aws) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://127.0.0.1:1", "--expect-digest", "sha256:00"], "use it with --endpoint-name"),
        (["--endpoint-name", ENDPOINT, "--expect-digest", "3f2a9c"], "expected sha256:<hex>"),
    ],
)
def test_expect_digest_is_refused_where_it_cannot_be_checked(args, message, capsys):
    with pytest.raises(SystemExit):
        smoke_test.main(args)
    assert message in capsys.readouterr().err
