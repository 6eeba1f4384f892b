"""register_weights.py: copies a training job's output (trained/<job>/output/model/) into registered/<execution id>/,
each file from the exact version HeadObject read, skipping inference/ folders, and writes .registered.json after the
last file. S3 is moto's, on a versioned bucket as the models bucket is. What is tested is what is copied, from which
version, the order of the writes, and the refusals."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
import register_weights

BUCKET = "models"
SOURCE_PREFIX = "trained/llm-ft-job-1/output/model/"
SOURCE = f"s3://{BUCKET}/{SOURCE_PREFIX}"
DESTINATION_PREFIX = "registered/exec-abc123/"
DESTINATION = f"s3://{BUCKET}/{DESTINATION_PREFIX}"
RECORD_KEY = DESTINATION_PREFIX + ".registered.json"
JOB_OUTPUT = {
    "config.json": b'{"model_type": "gptj"}',
    "tokenizer.json": b'{"version": "1.0"}',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 40,
    "model-00002-of-00002.safetensors": b"\x01\x02" * 3000,
    "model.safetensors.index.json": b'{"weight_map": {}}',
    "checkpoints/extra/state.json": b"{}",  # nested: copied with its relative key
    "inference/model.py": b"import os  # a job's own handler",
    "code/inference/serving.properties": b"engine=Python",  # an inference/ folder further down
}
CARRIED = sorted(k for k in JOB_OUTPUT if "inference/" not in k)


class Recording:
    """moto's S3 client, recording the keys written, in order; `fail_copy` (a 1-based count) fails that copy as a lost
    connection would, `after_head` runs after each HeadObject of a source key, and `sizes` ({key: bytes}) makes
    HeadObject report those sizes (moto cannot hold a 5 GiB object)."""

    def __init__(self, client, fail_copy: int | None = None, after_head=None, sizes=None) -> None:
        self.client = client
        self.writes: list[str] = []
        self.fail_copy = fail_copy
        self.after_head = after_head
        self.sizes = sizes or {}
        self.operations: list[str] = []
        client.meta.events.register("before-call.s3.*", lambda model, **_: self.operations.append(model.name))

    def copy_object(self, **kwargs):
        if self.fail_copy is not None and len(self.writes) + 1 == self.fail_copy:
            raise ConnectionError("connection reset during the copy")
        response = self.client.copy_object(**kwargs)
        self.writes.append(kwargs["Key"])
        return response

    def put_object(self, **kwargs):
        self.client.put_object(**kwargs)
        self.writes.append(kwargs["Key"])

    def head_object(self, **kwargs):
        head = self.client.head_object(**kwargs)
        head["ContentLength"] = self.sizes.get(kwargs["Key"], head["ContentLength"])
        if self.after_head is not None and kwargs["Key"].startswith(SOURCE_PREFIX):
            self.after_head(kwargs["Key"])
        return head

    def __getattr__(self, name):
        return getattr(self.client, name)


@pytest.fixture
def client():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        for name, data in JOB_OUTPUT.items():
            s3.put_object(Bucket=BUCKET, Key=SOURCE_PREFIX + name, Body=data)
        yield s3


def sha256(data: bytes) -> str:
    """The base64 SHA-256 S3 reports as ChecksumSHA256."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def keys(s3, prefix: str) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])}


def body(s3, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_copies_every_file_byte_for_byte_and_writes_the_record_last(client, capsys):
    s3 = Recording(client)
    record = register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert keys(client, DESTINATION_PREFIX) == {*CARRIED, ".registered.json"}
    for name in CARRIED:
        assert body(client, DESTINATION_PREFIX + name) == JOB_OUTPUT[name], name
    # The record after every file: a reader that finds it finds every file it lists.
    assert s3.writes == [*(DESTINATION_PREFIX + name for name in CARRIED), RECORD_KEY]
    stored = json.loads(body(client, RECORD_KEY))
    assert stored == record
    assert stored["source"] == SOURCE and stored["registered_at"].endswith("+00:00")
    versions = {name: client.head_object(Bucket=BUCKET, Key=SOURCE_PREFIX + name)["VersionId"] for name in CARRIED}
    assert stored["files"] == {
        name: {"bytes": len(JOB_OUTPUT[name]), "source_version": versions[name], "sha256": sha256(JOB_OUTPUT[name])}
        for name in CARRIED
    }
    out = capsys.readouterr().out
    assert f"model-00002-of-00002.safetensors: {len(JOB_OUTPUT['model-00002-of-00002.safetensors'])} bytes" in out
    total = sum(len(JOB_OUTPUT[name]) for name in CARRIED)
    assert f"{len(CARRIED)} files, {total} bytes" in out.splitlines()[-1]


def test_never_carries_an_inference_folder(client):
    record = register_weights.run(SOURCE, DESTINATION, s3=client)
    assert not any("inference" in name for name in record["files"])
    assert not any("inference" in name for name in keys(client, DESTINATION_PREFIX))
    assert register_weights.is_carried("inference.json")  # a file of that name is not a folder
    assert not register_weights.is_carried("a/b/inference/c.py")


def test_copies_the_version_it_read_even_when_the_source_is_overwritten_meanwhile(client):
    name = "model-00001-of-00002.safetensors"
    first = client.head_object(Bucket=BUCKET, Key=SOURCE_PREFIX + name)["VersionId"]

    def overwrite(key):  # the training role writing over the job's output between the HeadObject and the copy
        if key == SOURCE_PREFIX + name:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"tampered")

    record = register_weights.run(SOURCE, DESTINATION, s3=Recording(client, after_head=overwrite))
    assert body(client, SOURCE_PREFIX + name) == b"tampered"  # the overwrite did happen
    assert body(client, DESTINATION_PREFIX + name) == JOB_OUTPUT[name]
    assert record["files"][name] == {
        "bytes": len(JOB_OUTPUT[name]),
        "source_version": first,
        "sha256": sha256(JOB_OUTPUT[name]),
    }


def test_each_file_is_one_copy_object_whose_sha256_s3_computed_is_recorded(client):
    # Above boto3's managed-transfer threshold (8 MiB) too: one CopyObject, never UploadPartCopy, so S3 computes the
    # SHA-256 of the whole object, the one a promotion verifies its copies against.
    name, big = "model-00003-of-00003.safetensors", bytes(range(251)) * (9 * 2**20 // 251)
    client.put_object(Bucket=BUCKET, Key=SOURCE_PREFIX + name, Body=big)
    s3 = Recording(client)
    record = register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert "UploadPartCopy" not in s3.operations
    assert s3.operations.count("CopyObject") == len(CARRIED) + 1
    assert record["files"][name] == {
        "bytes": len(big),
        "source_version": client.head_object(Bucket=BUCKET, Key=SOURCE_PREFIX + name)["VersionId"],
        "sha256": sha256(big),
    }
    head = client.head_object(Bucket=BUCKET, Key=DESTINATION_PREFIX + name, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == sha256(big)


def test_a_file_above_5_gib_is_refused_before_anything_is_copied(client):
    name = "model-00002-of-00002.safetensors"
    s3 = Recording(client, sizes={SOURCE_PREFIX + name: 5 * 2**30 + 1})
    with pytest.raises(register_weights.RegistrationError, match=r"model-00002-of-00002\.safetensors holds 5368709121 "
                       r"bytes .*more than the 5 GiB one CopyObject copies: .*max_shard_size"):  # fmt: skip
        register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert s3.writes == [] and "CopyObject" not in s3.operations


def test_a_file_of_exactly_5_gib_is_copied(client):
    name = "model-00002-of-00002.safetensors"
    # The size HeadObject reports before the copy is 5 GiB; the copy itself then finds moto's real size.
    s3 = Recording(client, sizes={SOURCE_PREFIX + name: 5 * 2**30})
    with pytest.raises(register_weights.RegistrationError, match=r"holds 6000 bytes after the copy, but version"):
        register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert DESTINATION_PREFIX + name in s3.writes


def test_a_run_that_fails_half_way_writes_no_record(client):
    s3 = Recording(client, fail_copy=3)
    with pytest.raises(ConnectionError):
        register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert s3.writes == [DESTINATION_PREFIX + name for name in CARRIED[:2]]
    assert ".registered.json" not in keys(client, DESTINATION_PREFIX)
    # The pipeline's retry of the same execution writes over what the first try left, then the record.
    register_weights.run(SOURCE, DESTINATION, s3=client)
    assert keys(client, DESTINATION_PREFIX) == {*CARRIED, ".registered.json"}


def test_a_destination_with_a_record_is_never_rewritten(client):
    register_weights.run(SOURCE, DESTINATION, s3=client)
    before = body(client, RECORD_KEY)
    client.put_object(Bucket=BUCKET, Key=SOURCE_PREFIX + "config.json", Body=b"{}")
    s3 = Recording(client)
    with pytest.raises(register_weights.RegistrationError, match=r"registered/exec-abc123/\.registered\.json exists: "
                       r".*never rewritten; register into a new prefix"):  # fmt: skip
        register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert s3.writes == [] and body(client, RECORD_KEY) == before


def test_a_half_written_destination_holding_other_files_is_refused(client):
    client.put_object(Bucket=BUCKET, Key=DESTINATION_PREFIX + "model.bin", Body=b"left by another try")
    s3 = Recording(client)
    with pytest.raises(register_weights.RegistrationError, match=r"already holds 1 file\(s\) the source does not "
                       r"have \(model\.bin\)"):  # fmt: skip
        register_weights.run(SOURCE, DESTINATION, s3=s3)
    assert s3.writes == []


def test_an_empty_source_is_refused(client):
    s3 = Recording(client)
    with pytest.raises(register_weights.RegistrationError, match=r"trained/other-job/output/model/ holds no files "
                       r"to register.*ModelArtifacts\.S3ModelArtifacts"):  # fmt: skip
        register_weights.run(f"s3://{BUCKET}/trained/other-job/output/model/", DESTINATION, s3=s3)
    client.put_object(Bucket=BUCKET, Key="trained/handler-only/inference/model.py", Body=b"")
    with pytest.raises(register_weights.RegistrationError, match=r"holds no files to register \(only 1 skipped"):
        register_weights.run(f"s3://{BUCKET}/trained/handler-only/", DESTINATION, s3=s3)
    assert s3.writes == []


@pytest.mark.parametrize(
    ("source", "destination", "message"),
    [
        (SOURCE, "s3://other-bucket/registered/exec-abc123/", r"in bucket models and --destination in other-bucket"),
        (SOURCE, DESTINATION.rstrip("/"), r"--destination 's3://models/registered/exec-abc123' is not s3://"),
        (SOURCE, f"s3://{BUCKET}/", r"--destination 's3://models/' is not s3://<bucket>/<prefix>/"),
        ("/opt/ml/model/", DESTINATION, r"--source '/opt/ml/model/' is not s3://"),
        (SOURCE, SOURCE + "registered/", r"overlap"),
    ],
    ids=["cross-bucket", "destination-slash", "bucket-root", "local-path", "overlap"],
)  # fmt: skip
def test_refuses_a_source_or_destination_a_copy_may_not_use(client, source, destination, message):
    s3 = Recording(client)
    with pytest.raises(register_weights.RegistrationError, match=message):
        register_weights.run(source, destination, s3=s3)
    assert s3.writes == []


def test_a_source_without_its_slash_is_that_folder_and_never_a_sibling(client):
    """S3ModelArtifacts names the job's output folder; where it comes without the slash, the copy adds it."""
    client.put_object(Bucket=BUCKET, Key=SOURCE_PREFIX.rstrip("/") + "-old/model.safetensors", Body=b"sibling")
    record = register_weights.run(SOURCE.rstrip("/"), DESTINATION, s3=client)
    assert sorted(record["files"]) == CARRIED
    assert record["source"] == SOURCE


def test_lists_every_page_of_the_source(client, monkeypatch):
    monkeypatch.setattr(register_weights, "PAGE_SIZE", 2)
    record = register_weights.run(SOURCE, DESTINATION, s3=client)
    assert sorted(record["files"]) == CARRIED


def test_an_unversioned_bucket_is_refused_before_anything_is_copied():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key=SOURCE_PREFIX + "config.json", Body=b"{}")
        s3 = Recording(client)
        with pytest.raises(register_weights.RegistrationError, match=r"has no VersionId: .*enable versioning"):
            register_weights.run(SOURCE, DESTINATION, s3=s3)
        assert s3.writes == []


def test_main_passes_what_the_pipeline_step_says(client, capsys):
    session = boto3.Session(region_name="us-east-1")
    argv = ["--source", SOURCE, "--destination", DESTINATION, "--region", "us-east-1"]
    assert register_weights.main(argv, session=session) == 0
    assert ".registered.json" in keys(client, DESTINATION_PREFIX)
    assert register_weights.main(argv, session=session) == 2  # the record exists now
    assert "register_weights.py: error: " in capsys.readouterr().err
    with pytest.raises(SystemExit):
        register_weights.main(argv[:4])  # --region is required
