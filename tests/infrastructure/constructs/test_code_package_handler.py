"""The code-package custom resource handler, run in-process against moto's S3 with the events CloudFormation sends."""

from __future__ import annotations

import hashlib
import io
import os
import re
import sys
import tarfile
import zipfile

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from infrastructure.constructs.code_package import RUNTIME_DIR

sys.path.insert(0, str(RUNTIME_DIR))
# The Lambda's own module, imported the way the Lambda imports it.
import code_package_handler as handler

ASSETS, ARTIFACTS = "cdk-hnb659fds-assets-111111111111-us-east-1", "artifacts"
SOURCE = {
    "model.py": "def handle(inputs):\n    return None\n",
    "requirements.txt": "",
    "serving.properties": "engine=DeepSpeed\n",
}


@pytest.fixture
def s3(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=ASSETS)
        client.create_bucket(Bucket=ARTIFACTS)
        yield client


def put_asset(s3, files: dict[str, str | bytes], key: str = "asset.zip") -> str:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as z:
        for name, content in files.items():
            z.writestr(name, content)
    s3.put_object(Bucket=ASSETS, Key=key, Body=data.getvalue())
    return key


def event(request: str, source_key: str = "asset.zip", physical_id: str | None = None, **overrides) -> dict:
    props = {
        "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:framework",
        "SourceBucket": ASSETS,
        "SourceKey": source_key,
        "TargetBucket": ARTIFACTS,
        "TargetPrefix": "code/inference-deepspeed/",
        "ArchiveName": "model.tar.gz",
        "TopLevelDirectory": "deepspeed",
        "RenderedFiles": {},
        "RequiredFiles": ["model.py", "serving.properties"],
        **overrides,
    }
    body = {"RequestType": request, "LogicalResourceId": "InferenceCode", "ResourceProperties": props}
    if physical_id:
        body["PhysicalResourceId"] = physical_id
    return body


def archive_at(s3, uri: str) -> tuple[bytes, dict[str, bytes]]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return data, {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def objects(s3) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=ARTIFACTS).get("Contents", []))


def count_uploads(monkeypatch) -> list[str]:
    """Record every S3 write the handler makes (PutObject and multipart creation)."""
    calls: list[str] = []
    real_client = boto3.client

    def client(*args, **kwargs):
        c = real_client(*args, **kwargs)
        for op in ("PutObject", "CreateMultipartUpload"):
            c.meta.events.register(f"before-call.s3.{op}", lambda model, **_: calls.append(model.name))
        return c

    monkeypatch.setattr(handler.boto3, "client", client)
    return calls


def test_create_publishes_the_archive_under_its_own_hash(s3):
    put_asset(s3, SOURCE)
    result = handler.on_event(event("Create"))
    data, files = archive_at(s3, result["Data"]["Uri"])
    sha256 = hashlib.sha256(data).hexdigest()
    assert result["Data"]["Sha256"] == sha256
    assert result["Data"]["SizeBytes"] == str(len(data))
    assert result["Data"]["Key"] == f"code/inference-deepspeed/{sha256}/model.tar.gz"
    assert result["PhysicalResourceId"] == result["Data"]["Uri"] == f"s3://{ARTIFACTS}/{result['Data']['Key']}"
    assert files == {f"deepspeed/{k}": v.encode() for k, v in SOURCE.items()}


def test_repeating_an_event_gives_the_same_answer_and_uploads_nothing_new(s3, monkeypatch):
    put_asset(s3, SOURCE)
    first = handler.on_event(event("Create"))
    uploads = count_uploads(monkeypatch)
    assert handler.on_event(event("Create")) == first
    assert handler.on_event(event("Update", physical_id=first["PhysicalResourceId"])) == first
    assert uploads == []
    assert objects(s3) == [first["Data"]["Key"]]


def test_same_content_from_another_asset_key_gives_the_same_archive(s3):
    first = handler.on_event(event("Create", source_key=put_asset(s3, SOURCE, "one.zip")))
    again = handler.on_event(event("Update", source_key=put_asset(s3, dict(reversed(SOURCE.items())), "two.zip")))
    assert again == first


def test_update_with_changed_source_publishes_a_new_key_and_keeps_the_old(s3):
    old = handler.on_event(event("Create", source_key=put_asset(s3, SOURCE, "v1.zip")))
    new = handler.on_event(event("Update", source_key=put_asset(s3, {**SOURCE, "model.py": "# v2\n"}, "v2.zip")))
    assert new["PhysicalResourceId"] != old["PhysicalResourceId"]
    assert objects(s3) == sorted([old["Data"]["Key"], new["Data"]["Key"]])
    assert archive_at(s3, new["Data"]["Uri"])[1]["deepspeed/model.py"] == b"# v2\n"


def test_rendered_files_replace_source_files_and_change_the_key(s3):
    put_asset(s3, SOURCE)
    plain = handler.on_event(event("Create"))
    rendered = handler.on_event(
        event("Update", RenderedFiles={"serving.properties": "engine=DeepSpeed\noption.tensor_parallel_degree=8\n"})
    )
    assert rendered["Data"]["Key"] != plain["Data"]["Key"]
    files = archive_at(s3, rendered["Data"]["Uri"])[1]
    assert files["deepspeed/serving.properties"] == b"engine=DeepSpeed\noption.tensor_parallel_degree=8\n"


def test_delete_keeps_the_object_and_tags_it_superseded_until_it_is_used_again(s3):
    put_asset(s3, SOURCE)
    created = handler.on_event(event("Create"))
    key = created["Data"]["Key"]
    handler.on_event(event("Delete", physical_id=created["PhysicalResourceId"]))
    assert objects(s3) == [key]
    assert s3.get_object_tagging(Bucket=ARTIFACTS, Key=key)["TagSet"] == [{"Key": "superseded", "Value": "true"}]
    handler.on_event(event("Create"))  # e.g. a rollback to the version that uses it
    assert s3.get_object_tagging(Bucket=ARTIFACTS, Key=key)["TagSet"] == []


@pytest.mark.parametrize(
    "physical_id", ["InferenceCode-placeholder-after-failed-create", f"s3://{ARTIFACTS}/code/gone.tar.gz"]
)
def test_delete_never_fails(s3, physical_id):
    assert handler.on_event(event("Delete", physical_id=physical_id)) == {"PhysicalResourceId": physical_id}


def test_missing_asset_fails_with_what_to_do(s3):
    with pytest.raises(
        handler.PackagingError, match=r"source asset s3://.*/asset\.zip not found; `cdk deploy` publishes"
    ):
        handler.on_event(event("Create"))
    assert objects(s3) == []


def test_corrupt_asset_fails_with_what_to_do(s3):
    s3.put_object(Bucket=ASSETS, Key="asset.zip", Body=b"this is not a zip file")
    with pytest.raises(handler.PackagingError, match="is not a zip archive; re-run `cdk deploy`"):
        handler.on_event(event("Create"))
    assert objects(s3) == []


def test_missing_required_file_fails_naming_it(s3):
    put_asset(s3, {"model.py": "x"})
    with pytest.raises(handler.PackagingError, match=r"missing required file\(s\) serving\.properties"):
        handler.on_event(event("Create"))
    assert objects(s3) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TargetPrefix": "code/training"}, "must be relative and end with '/'"),
        ({"ArchiveName": "model.zip"}, "must be a file name ending in .tar.gz"),
        ({"RenderedFiles": {"../escape.txt": "x"}}, "must be relative and stay inside the archive"),
        ({"RenderedFiles": {"serving.properties": 8}}, "RenderedFiles must map file names to their text"),
        ({"TargetBucket": ""}, "missing resource properties: TargetBucket"),
    ],
)
def test_bad_properties_are_rejected_before_any_work(s3, overrides, message):
    put_asset(s3, SOURCE)
    with pytest.raises(handler.PackagingError, match=message.replace("(", r"\(").replace(".", r"\.")):
        handler.on_event(event("Create", **overrides))


# (S3 operation that fails, which call of it fails, a large (multipart) archive?, the error the resource reports)
S3_FAULTS = [
    ("UploadPart", 2, True, "could not upload s3://artifacts/code/inference-deepspeed/"),
    ("CompleteMultipartUpload", 1, True, "could not upload s3://artifacts/code/inference-deepspeed/"),
    ("PutObject", 1, False, "could not upload s3://artifacts/code/inference-deepspeed/"),
    ("HeadObject", 2, False, "could not check s3://artifacts/code/inference-deepspeed/"),  # the 1st reads the asset
    ("GetObject", 1, False, "could not read source asset s3://cdk-hnb659fds-assets-111111111111-us-east-1/asset.zip"),
]


@pytest.mark.bad_input("s3_fault")
@pytest.mark.parametrize(("operation", "nth", "large", "message"), S3_FAULTS, ids=[f"{f[0]}#{f[1]}" for f in S3_FAULTS])
def test_an_s3_failure_leaves_nothing_at_the_final_key_and_a_retry_succeeds(
    s3, monkeypatch, operation, nth, large, message
):
    # Incompressible data makes a multipart upload (over boto3's 8 MiB threshold) where the case needs one.
    put_asset(s3, {**SOURCE, "weights.bin": os.urandom(10 * 1024 * 1024)} if large else SOURCE)
    real_client = boto3.client
    calls = []

    def flaky_client(*args, **kwargs):
        c = real_client(*args, **kwargs)

        def fail_nth(**_):
            calls.append(operation)
            if len(calls) == nth:
                raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, operation)

        c.meta.events.register(f"before-call.s3.{operation}", fail_nth)
        return c

    monkeypatch.setattr(handler.boto3, "client", flaky_client)
    with pytest.raises(handler.PackagingError, match=re.escape(message)):
        handler.on_event(event("Create"))
    assert len(calls) >= nth
    assert objects(s3) == []
    assert s3.list_multipart_uploads(Bucket=ARTIFACTS).get("Uploads", []) == []

    monkeypatch.setattr(handler.boto3, "client", real_client)  # S3 recovers; CloudFormation's retry succeeds
    result = handler.on_event(event("Create"))
    assert objects(s3) == [result["Data"]["Key"]]


def folder_event(request: str = "Create", **overrides) -> dict:
    props = {
        "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:framework",
        "SourceBucket": ASSETS,
        "SourceKey": "asset.zip",
        "TargetUri": f"s3://{ARTIFACTS}/pretrained/gpt-j-6b/0123abc/",
        "Subfolder": "inference/",
        "RequiredFiles": ["model.py"],
        **overrides,
    }
    return {"RequestType": request, "LogicalResourceId": "InferenceCode", "ResourceProperties": props}


def test_a_handler_folder_is_published_as_plain_files_beside_the_weights_once(s3):
    put_asset(s3, {"model.py": "def handle(inputs):\n    return None\n", "lmi_config.py": "X = 1\n"})
    s3.put_object(Bucket=ARTIFACTS, Key="pretrained/gpt-j-6b/0123abc/config.json", Body=b"{}")  # the weights
    first = handler.on_event(folder_event())
    folder = f"pretrained/gpt-j-6b/0123abc/inference/{first['Data']['Sha256']}/"
    assert first["PhysicalResourceId"] == first["Data"]["Uri"] == f"s3://{ARTIFACTS}/{folder}"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=ARTIFACTS)["Contents"]}
    assert keys == {"pretrained/gpt-j-6b/0123abc/config.json", folder + "model.py", folder + "lmi_config.py"}
    assert s3.get_object(Bucket=ARTIFACTS, Key=folder + "lmi_config.py")["Body"].read() == b"X = 1\n"
    versions = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=ARTIFACTS)["Contents"]}
    again = handler.on_event(folder_event("Update"))
    assert again == first  # same files, same folder; nothing written again
    assert {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=ARTIFACTS)["Contents"]} == versions
    handler.on_event({**folder_event("Delete"), "PhysicalResourceId": first["PhysicalResourceId"]})
    assert {o["Key"] for o in s3.list_objects_v2(Bucket=ARTIFACTS)["Contents"]} == keys  # a Model may still name it


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TargetUri": "s3://Bucket/prefix"}, r"TargetUri 's3://Bucket/prefix' is not an S3 prefix"),
        ({"Subfolder": "../code/"}, r"Subfolder '\.\./code/' must be a relative folder"),
        ({"ArchiveName": "model.tar.gz"}, r"TargetUri publishes plain files: ArchiveName"),
    ],
)
def test_a_folder_target_that_is_not_a_prefix_inside_the_weights_is_refused(s3, overrides, message):
    put_asset(s3, {"model.py": ""})
    with pytest.raises(handler.PackagingError, match=message):
        handler.on_event(folder_event(**overrides))


def test_a_planted_handler_file_with_forged_metadata_is_overwritten_with_the_packaged_bytes(s3):
    """Whoever writes an object chooses its x-amz-meta-*: a file carrying the packaged file's hash in its metadata but
    other bytes must not survive a deploy (issue 26, finding 1)."""
    packaged = b"def handle(inputs):\n    return None\n"
    put_asset(s3, {"model.py": packaged.decode(), "lmi_config.py": "X = 1\n"})
    folder = f"pretrained/gpt-j-6b/0123abc/inference/{handler.on_event(folder_event())['Data']['Sha256']}/"
    planted = b"import os\ndef handle(inputs):\n    os.system('exfiltrate')\n"
    s3.put_object(
        Bucket=ARTIFACTS,
        Key=folder + "model.py",
        Body=planted,
        Metadata={"sha256": hashlib.sha256(packaged).hexdigest()},  # the packaged file's hash, forged
    )
    handler.on_event(folder_event("Update"))
    assert s3.get_object(Bucket=ARTIFACTS, Key=folder + "model.py")["Body"].read() == packaged
    assert s3.get_object(Bucket=ARTIFACTS, Key=folder + "lmi_config.py")["Body"].read() == b"X = 1\n"
