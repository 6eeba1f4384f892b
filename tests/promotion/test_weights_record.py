"""weights_record: the one digest of a version's weights, the record read from a weights prefix, and the check of a
prefix against it. S3 is moto's."""

from __future__ import annotations

import base64
import hashlib
import json
import sys

import boto3
import pytest
from moto import mock_aws

from promotion import weights_record
from promotion.weights_record import RecordError

BUCKET = "models"
PREFIX = "registered/exec-1/"


def sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def put_copied(s3, key: str, data: bytes) -> None:
    """An object whose ChecksumSHA256 S3 computed, as register_weights' and promote's copies have."""
    s3.put_object(Bucket=BUCKET, Key="staging/" + key, Body=data)
    s3.copy_object(
        Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": "staging/" + key}, ChecksumAlgorithm="SHA256"
    )


def put_record(s3, name: str, record) -> None:
    body = record if isinstance(record, bytes) else json.dumps(record).encode()
    s3.put_object(Bucket=BUCKET, Key=PREFIX + name, Body=body)


def test_the_digest_of_a_two_file_record_is_the_documented_one():
    files = {"b.bin": {"bytes": 3, "sha256": "BBB=", "source_version": "v2"}, "a.json": {"bytes": 2, "sha256": "AAA="}}
    # sha256 of b"a.json\t2\tAAA=\nb.bin\t3\tBBB=\n", computed apart from the code under test
    assert (
        weights_record.files_digest(files) == "sha256:96b2a0636f87bcbb94e461dbb54ae0e27565dc8cf3f69c1b53328df48b48109e"
    )
    assert weights_record.files_digest(dict(reversed(files.items()))) == weights_record.files_digest(files)


def test_the_digest_changes_with_any_size_or_sha256():
    files = {"a.json": {"bytes": 2, "sha256": "AAA="}}
    digest = weights_record.files_digest(files)
    assert weights_record.files_digest({"a.json": {"bytes": 3, "sha256": "AAA="}}) != digest
    assert weights_record.files_digest({"a.json": {"bytes": 2, "sha256": "AAB="}}) != digest
    assert weights_record.files_digest({"b.json": {"bytes": 2, "sha256": "AAA="}}) != digest


def test_a_record_made_before_sha256s_were_recorded_has_no_digest():
    with pytest.raises(RecordError, match=r"lists config\.json without its bytes or sha256 .*re-running the "
                       r"fine-tuning pipeline"):  # fmt: skip
        weights_record.files_digest({"config.json": {"bytes": 2, "source_version": "v1"}})


@pytest.mark.parametrize(
    ("uri", "expected"),
    [("s3://models/registered/exec-1/", ("models", "registered/exec-1/")), ("s3://a-b.c/x/", ("a-b.c", "x/"))],
)
def test_parses_a_prefix(uri, expected):
    assert weights_record.parse_prefix(uri) == expected


@pytest.mark.parametrize("uri", ["s3://models/registered/exec-1", "s3://models/", "/opt/ml/model/", "s3://Models/x/"])
def test_refuses_what_is_not_a_prefix(uri):
    with pytest.raises(RecordError, match=r"is not s3://<bucket>/<prefix>/"):
        weights_record.parse_prefix(uri)


def test_reads_the_promoted_record_before_the_registered_one(s3):
    put_record(s3, ".registered.json", {"files": {"a": {"bytes": 1, "sha256": "r"}}})
    assert weights_record.read_record(s3, BUCKET, PREFIX)["files"]["a"]["sha256"] == "r"
    put_record(s3, ".promoted.json", {"files": {"a": {"bytes": 1, "sha256": "p"}}})
    assert weights_record.read_record(s3, BUCKET, PREFIX)["files"]["a"]["sha256"] == "p"


def test_a_prefix_without_a_record_is_refused_with_its_uri(s3):
    with pytest.raises(RecordError, match=r"s3://models/registered/exec-1/ holds neither \.promoted\.json nor "
                       r"\.registered\.json"):  # fmt: skip
        weights_record.read_record(s3, BUCKET, PREFIX)


@pytest.mark.parametrize("body", [b"{not json", b"[1]", b'{"files": {}}', b'{"files": {"a": 1}}', b'{"source": "x"}'])
def test_a_malformed_record_is_refused_with_its_uri(s3, body):
    put_record(s3, ".registered.json", body)
    with pytest.raises(RecordError, match=r"s3://models/registered/exec-1/\.registered\.json (is not JSON|has no "
                       r"\"files\")"):  # fmt: skip
        weights_record.read_record(s3, BUCKET, PREFIX)


def test_a_prefix_holding_what_its_record_lists_has_no_problems(s3):
    put_copied(s3, PREFIX + "config.json", b"{}")
    put_copied(s3, PREFIX + "nested/model.bin", b"\x00" * 100)
    record = {"files": {"config.json": {"bytes": 2, "sha256": sha256(b"{}")},
                        "nested/model.bin": {"bytes": 100, "sha256": sha256(b"\x00" * 100)}}}  # fmt: skip
    assert weights_record.verify_prefix(s3, BUCKET, PREFIX, record) == []


def test_names_every_missing_resized_or_changed_file(s3):
    put_copied(s3, PREFIX + "resized.bin", b"abc")
    put_copied(s3, PREFIX + "changed.bin", b"xyz")
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "unchecked.bin", Body=b"xyz")  # boto3's default checksum: CRC32 only
    record = {
        "files": {
            "missing.bin": {"bytes": 3, "sha256": sha256(b"abc")},
            "resized.bin": {"bytes": 4, "sha256": sha256(b"abc")},
            "changed.bin": {"bytes": 3, "sha256": sha256(b"abc")},
            "unchecked.bin": {"bytes": 3, "sha256": sha256(b"xyz")},
        }
    }
    assert weights_record.verify_prefix(s3, BUCKET, PREFIX, record) == [
        f"s3://models/{PREFIX}changed.bin has SHA-256 {sha256(b'xyz')}, the record {sha256(b'abc')}",
        f"s3://models/{PREFIX}missing.bin is missing",
        f"s3://models/{PREFIX}resized.bin holds 3 bytes, the record 4",
        f"s3://models/{PREFIX}unchecked.bin has no SHA-256, the record {sha256(b'xyz')}",
    ]


def test_stray_files_leave_out_records_and_the_handler_folder(s3):
    for key in ("config.json", "extra.bin", "inference/abc/model.py", ".promoted.json", ".registered.json", "d/"):
        s3.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=b"")
    record = {"files": {"config.json": {"bytes": 0, "sha256": "x"}}}
    assert weights_record.stray_files(s3, BUCKET, PREFIX, record) == ["extra.bin"]


def test_imports_nothing_but_the_standard_library():
    """scripts/smoke_test.py and the CLI import it: boto3 stays theirs."""
    source = weights_record.__file__
    with open(source) as lines:
        imported = [line.split()[1] for line in lines if line.startswith(("import ", "from "))]
    assert all(name.split(".")[0] in sys.stdlib_module_names or name == "__future__" for name in imported), imported
