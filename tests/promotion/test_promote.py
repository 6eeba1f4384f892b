"""promote: a version approved in one account's stage copied into another account's models bucket, verified, and
registered in that stage's group. Both accounts are moto's (STS AssumeRole credentials map to the role's account); the
source weights are registered by training/register_weights.py itself, so its record is the one promotion reads."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from promotion import package_spec, promote
from promotion.promote import PromotionError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
import register_weights

DEV, PROD, THIRD = "111111111111", "444444444444", "555555555555"
SOURCE_REGION, TARGET_REGION = "us-east-1", "eu-west-1"
SOURCE_BUCKET, TARGET_BUCKET, THIRD_BUCKET = f"llmp-dev-models-{DEV}", f"llmp-prod-models-{PROD}", f"llmp-qa-{THIRD}"
SOURCE_GROUP, TARGET_GROUP, THIRD_GROUP = "llmp-dev-models", "llmp-prod-models", "llmp-qa-models"
SOURCE_GROUP_ARN = f"arn:aws:sagemaker:{SOURCE_REGION}:{DEV}:model-package-group/{SOURCE_GROUP}"
PROD_IMAGE = f"763104351884.dkr.ecr.{TARGET_REGION}.amazonaws.com/djl-inference:0.29.0-lmi11.0.0-cu124"
ROOT = "promoted/"
WEIGHTS = {
    "config.json": b'{"model_type": "llama"}',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 64,
    "model-00002-of-00002.safetensors": b"\x07" * 5000,
    "tokenizer.json": b'{"version": "1.0"}',
}
ADAPTER = {"adapter.tar.gz": b"\x1f\x8b" + b"a" * 900, "adapter_config.json": b'{"r": 16}'}
BASE_WEIGHTS = f"s3://{SOURCE_BUCKET}/pretrained/meta-llama/Llama-3.1-8B/abc123/"


def sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def clients(account: str, region: str) -> dict:
    """s3 and sagemaker clients with credentials moto maps to `account`."""
    role = f"arn:aws:iam::{account}:role/promotion"
    credentials = boto3.client("sts", region_name=region).assume_role(RoleArn=role, RoleSessionName="tests")[
        "Credentials"
    ]
    keys = {
        "aws_access_key_id": credentials["AccessKeyId"],
        "aws_secret_access_key": credentials["SecretAccessKey"],
        "aws_session_token": credentials["SessionToken"],
    }
    return {name: boto3.client(name, region_name=region, **keys) for name in ("s3", "sagemaker")}


def full_spec(weights_uri: str) -> dict:
    return {
        "Containers": [
            {
                "Image": f"763104351884.dkr.ecr.{SOURCE_REGION}.amazonaws.com/djl-inference:0.29.0-lmi11.0.0-cu124",
                "ModelDataSource": {
                    "S3DataSource": {"S3Uri": weights_uri, "S3DataType": "S3Prefix", "CompressionType": "None"}
                },
                "Environment": {
                    "OPTION_ENTRYPOINT": "/opt/ml/model/inference/0f0f/model.py",
                    "OPTION_TENSOR_PARALLEL_DEGREE": "1",
                },
            }
        ],
        "SupportedContentTypes": ["application/json"],
        "SupportedResponseMIMETypes": ["application/json"],
        "SupportedRealtimeInferenceInstanceTypes": ["ml.g5.2xlarge"],
    }


def adapter_spec(weights_uri: str) -> dict:
    return {
        "Containers": [
            {
                "Image": f"763104351884.dkr.ecr.{SOURCE_REGION}.amazonaws.com/djl-inference:0.29.0-lmi11.0.0-cu124",
                "ModelDataUrl": weights_uri + "adapter.tar.gz",
                "Environment": {
                    "ADAPTER_S3_URI": weights_uri,
                    "ADAPTER_METHOD": "lora",
                    "BASE_MODEL": "llama-3.1-8b",
                    "BASE_MODEL_COMMIT": "abc123",
                    "BASE_WEIGHTS_S3_URI": BASE_WEIGHTS,
                    "TENSOR_PARALLEL_DEGREE": "1",
                },
            }
        ],
        "SupportedContentTypes": ["application/json"],
        "SupportedResponseMIMETypes": ["application/json"],
    }


@dataclass
class World:
    dev: dict
    prod: dict
    third: dict
    copies: list  # the keys every promotion's CopyObject wrote, in any account

    def register(self, execution: str, files: dict, spec, *, status: str = "Approved", metadata=None) -> str:
        """Weights registered by register_weights into registered/<execution>/, and a package naming them."""
        s3 = self.dev["s3"]
        for name, data in files.items():
            s3.put_object(Bucket=SOURCE_BUCKET, Key=f"trained/{execution}/output/model/{name}", Body=data)
        uri = f"s3://{SOURCE_BUCKET}/registered/{execution}/"
        register_weights.run(f"s3://{SOURCE_BUCKET}/trained/{execution}/output/model/", uri, s3=s3)
        self.copies.clear()  # the registry step's copies: only promotion's are counted
        return self.dev["sagemaker"].create_model_package(
            ModelPackageGroupName=SOURCE_GROUP,
            InferenceSpecification=spec(uri),
            ModelApprovalStatus=status,
            CustomerMetadataProperties=metadata or {"PretrainedModel": "meta-llama/Llama-3.1-8B"},
        )["ModelPackageArn"]

    def versions(self, account: dict, group: str) -> list[dict]:
        sagemaker = account["sagemaker"]
        listed = sagemaker.list_model_packages(ModelPackageGroupName=group)["ModelPackageSummaryList"]
        return [sagemaker.describe_model_package(ModelPackageName=s["ModelPackageArn"]) for s in listed]


@pytest.fixture
def world():
    with mock_aws():
        dev, prod, third = clients(DEV, SOURCE_REGION), clients(PROD, TARGET_REGION), clients(THIRD, SOURCE_REGION)
        dev["s3"].create_bucket(Bucket=SOURCE_BUCKET)
        dev["s3"].put_bucket_versioning(Bucket=SOURCE_BUCKET, VersioningConfiguration={"Status": "Enabled"})
        prod["s3"].create_bucket(Bucket=TARGET_BUCKET, CreateBucketConfiguration={"LocationConstraint": TARGET_REGION})
        third["s3"].create_bucket(Bucket=THIRD_BUCKET)
        for account, group in ((dev, SOURCE_GROUP), (prod, TARGET_GROUP), (third, THIRD_GROUP)):
            account["sagemaker"].create_model_package_group(ModelPackageGroupName=group)
        copies: list[str] = []
        for account in (dev, prod, third):
            account["s3"].meta.events.register(
                "provide-client-params.s3.CopyObject", lambda params, **_: copies.append(params["Key"])
            )
        yield World(dev=dev, prod=prod, third=third, copies=copies)


def promote_all(source: dict, target: dict, *, group_arn=SOURCE_GROUP_ARN, version="", bucket=TARGET_BUCKET,
                group=TARGET_GROUP, stage="dev", release="release-42") -> promote.Result:  # fmt: skip
    """The handler's two steps in one go, with no deadline."""
    package = promote.resolve_package(source["sagemaker"], group_arn=group_arn, version=version, stage=stage)
    plan = promote.plan(source["s3"], promote.source_of(package), target_bucket=bucket, destination_root=ROOT)
    assert promote.copy_until(target["s3"], plan, deadline=math.inf) == 0
    return promote.finish(target["s3"], target["sagemaker"], plan, target_group=group, image_uri=PROD_IMAGE,
                          release=release)  # fmt: skip


def body(s3, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def keys(s3, bucket: str, prefix: str = "") -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}


def expected_digest(files: dict) -> str:
    lines = "".join(f"{name}\t{len(files[name])}\t{sha256(files[name])}\n" for name in sorted(files))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def test_promotes_a_full_fine_tune_into_the_target_accounts_bucket_and_group(world):
    arn = world.register("exec-1", WEIGHTS, full_spec)
    result = promote_all(world.dev, world.prod)
    prefix = f"{ROOT}{SOURCE_GROUP}/1/"
    assert result == promote.Result(
        package_arn=f"arn:aws:sagemaker:{TARGET_REGION}:{PROD}:model-package/{TARGET_GROUP}/1",
        source_package_arn=arn,
        source_version=1,
        digest=expected_digest(WEIGHTS),
        weights_uri=f"s3://{TARGET_BUCKET}/{prefix}",
    )
    s3 = world.prod["s3"]
    assert keys(s3, TARGET_BUCKET) == {prefix + name for name in [*WEIGHTS, ".promoted.json"]}
    for name, data in WEIGHTS.items():
        assert body(s3, TARGET_BUCKET, prefix + name) == data
    record = json.loads(body(s3, TARGET_BUCKET, prefix + ".promoted.json"))
    assert {k: v for k, v in record.items() if k != "promoted_at"} == {
        "source_package": arn,
        "source_version": 1,
        "source_prefix": f"s3://{SOURCE_BUCKET}/registered/exec-1/",
        "files": {name: {"bytes": len(data), "sha256": sha256(data)} for name, data in WEIGHTS.items()},
        "digest": expected_digest(WEIGHTS),
    }
    (package,) = world.versions(world.prod, TARGET_GROUP)
    container = package["InferenceSpecification"]["Containers"][0]
    assert package["ModelApprovalStatus"] == "Approved"
    assert container["Image"] == PROD_IMAGE
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == result.weights_uri
    assert container["Environment"]["OPTION_ENTRYPOINT"] == "/opt/ml/model/inference/0f0f/model.py"
    assert package["ModelPackageDescription"] == f"version 1 of {SOURCE_GROUP} promoted by release-42"
    assert package["CustomerMetadataProperties"] == {
        "promoted_from": arn,
        "source_version": "1",
        "weights_digest": expected_digest(WEIGHTS),
        "release": "release-42",
        "PretrainedModel": "meta-llama/Llama-3.1-8B",
    }


def test_promotes_an_adapter_and_moves_its_source_base_uri_to_metadata(world):
    world.register("exec-1", ADAPTER, adapter_spec)
    result = promote_all(world.dev, world.prod)
    (package,) = world.versions(world.prod, TARGET_GROUP)
    container = package["InferenceSpecification"]["Containers"][0]
    assert container["ModelDataUrl"] == result.weights_uri + "adapter.tar.gz"
    assert container["Environment"] == {
        "ADAPTER_S3_URI": result.weights_uri,
        "ADAPTER_METHOD": "lora",
        "BASE_MODEL": "llama-3.1-8b",
        "BASE_MODEL_COMMIT": "abc123",
        "TENSOR_PARALLEL_DEGREE": "1",
    }
    assert package["CustomerMetadataProperties"]["source_base_weights_s3_uri"] == BASE_WEIGHTS
    assert body(world.prod["s3"], TARGET_BUCKET, f"{ROOT}{SOURCE_GROUP}/1/adapter.tar.gz") == ADAPTER["adapter.tar.gz"]


@pytest.mark.parametrize("spec", [full_spec, adapter_spec], ids=["full", "adapter"])
def test_nothing_the_target_package_serves_names_the_source_bucket_or_account(world, spec):
    world.register("exec-1", {**WEIGHTS, **ADAPTER}, spec)
    promote_all(world.dev, world.prod)
    (package,) = world.versions(world.prod, TARGET_GROUP)
    served = json.dumps(package["InferenceSpecification"])
    assert SOURCE_BUCKET not in served and DEV not in served and SOURCE_REGION not in served


def test_a_promoted_version_promotes_on_to_a_third_account(world):
    world.register("exec-1", ADAPTER, adapter_spec)
    first = promote_all(world.dev, world.prod)
    prod_group_arn = f"arn:aws:sagemaker:{TARGET_REGION}:{PROD}:model-package-group/{TARGET_GROUP}"
    second = promote_all(world.prod, world.third, group_arn=prod_group_arn, bucket=THIRD_BUCKET, group=THIRD_GROUP,
                         stage="prod", release="release-43")  # fmt: skip
    assert second.source_package_arn == first.package_arn
    assert second.digest == first.digest == expected_digest(ADAPTER)  # one digest in every stage
    assert second.weights_uri == f"s3://{THIRD_BUCKET}/{ROOT}{TARGET_GROUP}/1/"
    (package,) = world.versions(world.third, THIRD_GROUP)
    served = json.dumps(package["InferenceSpecification"])
    assert TARGET_BUCKET not in served and SOURCE_BUCKET not in served
    metadata = package["CustomerMetadataProperties"]
    assert metadata["promoted_from"] == first.package_arn and metadata["release"] == "release-43"
    assert metadata["source_base_weights_s3_uri"] == BASE_WEIGHTS  # carried from the first hop


def test_a_promoted_record_whose_digest_disagrees_with_its_files_is_refused(world):
    world.register("exec-1", WEIGHTS, full_spec)
    first = promote_all(world.dev, world.prod)
    key = f"{ROOT}{SOURCE_GROUP}/1/.promoted.json"
    record = json.loads(body(world.prod["s3"], TARGET_BUCKET, key))
    world.prod["s3"].put_object(Bucket=TARGET_BUCKET, Key=key, Body=json.dumps({**record, "digest": "sha256:0"}))
    prod_group_arn = f"arn:aws:sagemaker:{TARGET_REGION}:{PROD}:model-package-group/{TARGET_GROUP}"
    with pytest.raises(PromotionError, match=rf"states digest sha256:0, but its files give {first.digest}"):
        promote_all(world.prod, world.third, group_arn=prod_group_arn, bucket=THIRD_BUCKET, group=THIRD_GROUP)
    assert world.copies[len(WEIGHTS) :] == []


def test_a_pinned_version_is_promoted_rather_than_the_newest(world):
    first = world.register("exec-1", WEIGHTS, full_spec)
    world.register("exec-2", {**WEIGHTS, "config.json": b"{}"}, full_spec)
    result = promote_all(world.dev, world.prod, version="1")
    assert result.source_package_arn == first and result.source_version == 1
    assert result.weights_uri.endswith(f"{SOURCE_GROUP}/1/")
    newest = promote_all(world.dev, world.prod)
    assert newest.source_version == 2 and newest.digest != result.digest


def test_a_pinned_version_that_is_not_approved_is_refused(world):
    world.register("exec-1", WEIGHTS, full_spec, status="PendingManualApproval")
    with pytest.raises(PromotionError, match=r"model-package/llmp-dev-models/1 is PendingManualApproval, not "
                       r"Approved: .*llmp approve 1 --stage dev"):  # fmt: skip
        promote_all(world.dev, world.prod, version="1")
    assert world.copies == [] and world.versions(world.prod, TARGET_GROUP) == []


def test_a_group_with_no_approved_version_is_refused_with_the_approve_command(world):
    world.register("exec-1", WEIGHTS, full_spec, status="PendingManualApproval")
    with pytest.raises(PromotionError, match=r"has no Approved version to promote: approve one in stage dev "
                       r"\(llmp approve <version> --stage dev\)"):  # fmt: skip
        promote_all(world.dev, world.prod)
    assert world.copies == [] and world.versions(world.prod, TARGET_GROUP) == []


@pytest.mark.parametrize("version", ["v1", "0", "-1"])
def test_a_version_that_is_not_a_number_is_refused(world, version):
    with pytest.raises(PromotionError, match=rf"version '{version}' is not a version number of llmp-dev-models"):
        promote_all(world.dev, world.prod, version=version)


@pytest.mark.parametrize(
    ("tampered", "message"),
    [
        (b"\x07" * 4999, r"model-00002-of-00002\.safetensors holds 4999 bytes, the record 5000"),
        (b"\x08" * 5000, r"model-00002-of-00002\.safetensors has no SHA-256, the record"),
    ],
    ids=["size", "content"],
)
def test_source_weights_changed_after_their_record_are_refused_and_nothing_is_registered(world, tampered, message):
    world.register("exec-1", WEIGHTS, full_spec)
    key = "registered/exec-1/model-00002-of-00002.safetensors"
    world.dev["s3"].put_object(Bucket=SOURCE_BUCKET, Key=key, Body=tampered)
    with pytest.raises(PromotionError, match=rf"weights no longer match their record \(1 file\(s\): .*{message}"):
        promote_all(world.dev, world.prod)
    assert world.copies == [] and keys(world.prod["s3"], TARGET_BUCKET) == set()
    assert world.versions(world.prod, TARGET_GROUP) == []


def test_same_size_content_with_a_forged_sha256_is_still_refused(world):
    """A rewrite that S3 checksums too has another SHA-256 than the record's."""
    world.register("exec-1", WEIGHTS, full_spec)
    s3, key = world.dev["s3"], "registered/exec-1/config.json"
    s3.put_object(Bucket=SOURCE_BUCKET, Key="tmp", Body=b'{"model_type": "gpt2!"}')
    s3.copy_object(Bucket=SOURCE_BUCKET, Key=key, CopySource={"Bucket": SOURCE_BUCKET, "Key": "tmp"},
                   ChecksumAlgorithm="SHA256")  # fmt: skip
    with pytest.raises(PromotionError, match=r"config\.json has SHA-256 .*, the record"):
        promote_all(world.dev, world.prod)
    assert world.versions(world.prod, TARGET_GROUP) == []


def test_a_source_changed_during_the_copy_is_refused_naming_the_file(world):
    world.register("exec-1", WEIGHTS, full_spec)
    package = promote.resolve_package(world.dev["sagemaker"], group_arn=SOURCE_GROUP_ARN, version="", stage="dev")
    plan = promote.plan(world.dev["s3"], promote.source_of(package), target_bucket=TARGET_BUCKET, destination_root=ROOT)
    world.dev["s3"].put_object(Bucket=SOURCE_BUCKET, Key="registered/exec-1/tokenizer.json", Body=b'{"v": "2.0"}')
    with pytest.raises(PromotionError, match=r"tokenizer\.json did not copy as recorded \(.*holds 12 bytes, the "
                       r"record 18\)"):  # fmt: skip
        promote.copy_until(world.prod["s3"], plan, deadline=math.inf)
    with pytest.raises(PromotionError, match=r"lacks 1 file\(s\) as recorded \(tokenizer\.json\)"):
        promote.finish(world.prod["s3"], world.prod["sagemaker"], plan, target_group=TARGET_GROUP,
                       image_uri=PROD_IMAGE, release="r")  # fmt: skip
    assert f"{ROOT}{SOURCE_GROUP}/1/.promoted.json" not in keys(world.prod["s3"], TARGET_BUCKET)
    assert world.versions(world.prod, TARGET_GROUP) == []


def test_a_record_without_sha256s_is_refused_with_the_reregister_hint(world):
    world.register("exec-1", WEIGHTS, full_spec)
    s3, key = world.dev["s3"], "registered/exec-1/.registered.json"
    record = json.loads(body(s3, SOURCE_BUCKET, key))
    for entry in record["files"].values():
        del entry["sha256"]
    s3.put_object(Bucket=SOURCE_BUCKET, Key=key, Body=json.dumps(record).encode())
    with pytest.raises(PromotionError, match=r"without its bytes or sha256 .*re-running the fine-tuning pipeline"):
        promote_all(world.dev, world.prod)
    assert world.copies == []


def test_a_destination_holding_a_file_the_version_lacks_is_refused(world):
    world.register("exec-1", WEIGHTS, full_spec)
    world.prod["s3"].put_object(Bucket=TARGET_BUCKET, Key=f"{ROOT}{SOURCE_GROUP}/1/model-00003.safetensors", Body=b"x")
    with pytest.raises(PromotionError, match=r"holds 1 file\(s\) that version 1 of llmp-dev-models does not have "
                       r"\(model-00003\.safetensors\): delete them"):  # fmt: skip
        promote_all(world.dev, world.prod)
    assert world.copies == [] and world.versions(world.prod, TARGET_GROUP) == []


def test_the_handler_folder_the_serving_stack_writes_is_neither_copied_nor_stray(world):
    world.register("exec-1", WEIGHTS, full_spec)
    handler = "inference/0f0f/model.py"  # written by each stage's serving stack into the prefix its package names
    world.dev["s3"].put_object(Bucket=SOURCE_BUCKET, Key=f"registered/exec-1/{handler}", Body=b"dev handler")
    promote_all(world.dev, world.prod)
    prefix = f"{ROOT}{SOURCE_GROUP}/1/"
    assert prefix + handler not in keys(world.prod["s3"], TARGET_BUCKET)
    world.prod["s3"].put_object(Bucket=TARGET_BUCKET, Key=prefix + handler, Body=b"prod handler")
    promote_all(world.dev, world.prod)  # a re-run after the target deployed it


def test_a_rerun_returns_the_same_package_and_copies_nothing(world):
    world.register("exec-1", WEIGHTS, full_spec)
    first = promote_all(world.dev, world.prod)
    copied = list(world.copies)
    record_key = f"{ROOT}{SOURCE_GROUP}/1/.promoted.json"
    record = body(world.prod["s3"], TARGET_BUCKET, record_key)
    second = promote_all(world.dev, world.prod, release="release-43")
    assert second == first
    assert world.copies == copied and len(copied) == len(WEIGHTS)
    assert body(world.prod["s3"], TARGET_BUCKET, record_key) == record
    assert len(world.versions(world.prod, TARGET_GROUP)) == 1


def test_a_different_record_at_the_destination_is_refused(world):
    world.register("exec-1", WEIGHTS, full_spec)
    promote_all(world.dev, world.prod)
    key = f"{ROOT}{SOURCE_GROUP}/1/.promoted.json"
    record = json.loads(body(world.prod["s3"], TARGET_BUCKET, key))
    world.prod["s3"].put_object(Bucket=TARGET_BUCKET, Key=key, Body=json.dumps({**record, "digest": "sha256:0"}))
    with pytest.raises(PromotionError, match=r"\.promoted\.json records another promotion .*digest sha256:0"):
        promote_all(world.dev, world.prod)


def test_a_copy_cut_short_by_the_deadline_resumes_without_copying_a_file_twice(world, monkeypatch):
    world.register("exec-1", WEIGHTS, full_spec)
    monkeypatch.setattr(promote, "COPY_WORKERS", 1)
    package = promote.resolve_package(world.dev["sagemaker"], group_arn=SOURCE_GROUP_ARN, version="", stage="dev")
    plan = promote.plan(world.dev["s3"], promote.source_of(package), target_bucket=TARGET_BUCKET, destination_root=ROOT)
    clock = lambda: 100.0 if world.copies else 0.0  # noqa: E731 - the deadline passes once one copy has started
    assert promote.copy_until(world.prod["s3"], plan, deadline=50.0, clock=clock) == len(WEIGHTS) - 1
    assert len(world.copies) == 1
    assert promote.copy_until(world.prod["s3"], plan, deadline=math.inf) == 0
    assert sorted(world.copies) == sorted(plan.prefix + name for name in WEIGHTS)


def test_metadata_keeps_ours_first_within_the_api_limits():
    ours = {"promoted_from": "arn:aws:sagemaker:us-east-1:111111111111:model-package/g/1", "release": "r#1 (ci)"}
    provenance = {"BASE_WEIGHTS_S3_URI": "s3://b/" + "k" * 300}
    carried = {f"key{i:02d}": "v" for i in range(60)} | {"release": "old", "empty": ""}
    result = package_spec.metadata(ours, provenance, carried)
    assert len(result) == 50
    assert result["promoted_from"] == ours["promoted_from"] and result["release"] == "r_1 _ci_"
    assert len(result["source_base_weights_s3_uri"]) == 256 and "empty" not in result
    assert package_spec.fitted("k" * 200, package_spec.METADATA_KEY_CHARS) == "k" * 128


def test_the_description_fits_its_limit():
    assert len(package_spec.description(3, "g" * 63, "r" * 2000)) == 1024
    assert package_spec.description(3, "g", "a\nb") == "version 3 of g promoted by ab"
    assert package_spec.description(3, "g", "") == "version 3 of g promoted"


def test_a_spec_naming_the_source_bucket_elsewhere_is_refused(world):
    def spec(uri: str) -> dict:
        full = full_spec(uri)
        full["Containers"][0]["AdditionalS3DataSource"] = {
            "S3DataType": "S3Object",
            "S3Uri": f"s3://{SOURCE_BUCKET}/other/draft.tar.gz",
        }
        return full

    world.register("exec-1", WEIGHTS, spec)
    with pytest.raises(PromotionError, match=rf"names bucket {SOURCE_BUCKET} outside its weights prefix"):
        promote_all(world.dev, world.prod)
    assert world.versions(world.prod, TARGET_GROUP) == []


def test_a_group_arn_that_is_not_one_is_refused():
    with pytest.raises(PromotionError, match=r"is not a model package group ARN"):
        promote.group_name("llmp-dev-models")
