"""The record beside a version's weights, and the one digest that names those weights.

Two writers, one shape of "files" (the record is each prefix's last write: a reader that finds it finds every file):

    .registered.json   training/register_weights.py, in registered/<pipeline execution id>/ of the models bucket:
                       {"source", "files": {<relative key>: {"bytes", "source_version", "sha256"}}, "registered_at"}
    .promoted.json     promotion/promote.py, in <destination root><source group>/<source version>/ of the target stage's
                       models bucket: {"source_package", "source_version", "source_prefix",
                       "files": {<relative key>: {"bytes", "sha256"}}, "digest", "promoted_at"}

"sha256" is the base64 SHA-256 of the whole object as S3 computed it when it wrote the copy (CopyObject with
ChecksumAlgorithm SHA256; HeadObject with ChecksumMode ENABLED reads it back as ChecksumSHA256).

A version's digest (files_digest), the same in every stage a version is promoted to:

    "sha256:" + hex SHA-256 of the UTF-8 lines f"{relative key}\\t{bytes}\\t{sha256}\\n", sorted by relative key

Stdlib only: S3 clients are passed in (the Lambda, scripts/smoke_test.py and the CLI each bring their own).
"""

from __future__ import annotations

import hashlib
import json
import re

REGISTERED_RECORD = ".registered.json"
PROMOTED_RECORD = ".promoted.json"
RECORDS = (PROMOTED_RECORD, REGISTERED_RECORD)  # read in this order: a promoted prefix has no registered record
HANDLER_FOLDER = "inference"  # the serving stack writes the handler into a weights prefix; never part of a record
PREFIX_URI = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/((?:[^/]+/)+)")
REREGISTER = "register the version again by re-running the fine-tuning pipeline"


class RecordError(Exception):
    """A weights prefix, or its record, is not what a promotion can copy from."""


def parse_prefix(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of s3://bucket/prefix/ (the prefix ends with '/')."""
    match = PREFIX_URI.fullmatch(uri)
    if not match:
        raise RecordError(
            f"{uri!r} is not s3://<bucket>/<prefix>/ (a weights prefix ends with '/'): give the folder the model "
            "package names"
        )
    return match.group(1), match.group(2)


def files_digest(files: dict) -> str:
    """The version's digest over its record's files (the module docstring gives the definition)."""
    lines = []
    for relative in sorted(files):
        entry = files[relative]
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or not entry.get("sha256"):
            raise RecordError(
                f"the record lists {relative} without its bytes or sha256 (a record made before the registry step "
                f"recorded SHA-256s): {REREGISTER}"
            )
        lines.append(f"{relative}\t{entry['bytes']}\t{entry['sha256']}\n")
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def read_record(s3, bucket: str, prefix: str) -> dict:
    """The prefix's .promoted.json if it has one, else its .registered.json. A missing record is told apart from a
    denied one only with s3:ListBucket on the bucket (GetObject answers 403 instead of 404 without it)."""
    for name in RECORDS:
        try:
            body = s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()
        except s3.exceptions.NoSuchKey:
            continue
        return _checked(body, f"s3://{bucket}/{prefix}{name}")
    raise RecordError(
        f"s3://{bucket}/{prefix} holds neither {PROMOTED_RECORD} nor {REGISTERED_RECORD}: it is not a registered or "
        f"promoted copy of a version's weights (or its copy stopped half-way); {REREGISTER}"
    )


def _checked(body: bytes, uri: str) -> dict:
    """The record in `body`, or a RecordError naming `uri` when it is not a JSON object with a non-empty "files"
    object of objects."""
    try:
        record = json.loads(body)
    except ValueError as error:
        raise RecordError(f"{uri} is not JSON ({error}): {REREGISTER}") from None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not files or not all(isinstance(entry, dict) for entry in files.values()):
        raise RecordError(f'{uri} has no "files" object of {{"bytes", "sha256"}} entries: {REREGISTER}')
    return record


def file_problem(s3, bucket: str, key: str, entry: dict) -> str | None:
    """What is wrong with s3://bucket/key against its record entry (missing, size, SHA-256), or None."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return f"s3://{bucket}/{key} is missing"
        raise
    if head["ContentLength"] != entry.get("bytes"):
        return f"s3://{bucket}/{key} holds {head['ContentLength']} bytes, the record {entry.get('bytes')}"
    found = head.get("ChecksumSHA256")
    if found != entry.get("sha256"):
        has = f"SHA-256 {found}" if found else "no SHA-256"
        return f"s3://{bucket}/{key} has {has}, the record {entry.get('sha256')}"
    return None


def verify_prefix(s3, bucket: str, prefix: str, record: dict) -> list[str]:
    """Every problem with the files the record lists (missing, wrong size, wrong or no ChecksumSHA256); [] when each
    is there as recorded. Files the record does not list are stray_files' concern."""
    files = sorted(record["files"].items())
    problems = (file_problem(s3, bucket, prefix + relative, entry) for relative, entry in files)
    return [problem for problem in problems if problem]


def is_weights_file(relative: str) -> bool:
    """Whether a key below a weights prefix is one a record lists (not a record, folder marker or handler folder)."""
    if not relative or relative.endswith("/") or relative in RECORDS:
        return False
    return HANDLER_FOLDER not in relative.split("/")[:-1]


def stray_files(s3, bucket: str, prefix: str, record: dict) -> list[str]:
    """The weights files under the prefix that the record does not list, sorted (every page of the listing)."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    found = (obj["Key"][len(prefix) :] for page in pages for obj in page.get("Contents", []))
    return sorted(relative for relative in found if is_weights_file(relative) and relative not in record["files"])
