"""Copy a training job's weights into registered/, exactly the versions read: the fine-tuning pipeline's registry step.

    python register_weights.py --source s3://<models bucket>/trained/<job>/output/model/ \\
        --destination s3://<models bucket>/registered/<execution id>/ --region us-east-1

The Train job writes the fine-tuned model uncompressed under its ModelArtifacts.S3ModelArtifacts prefix (trained/...),
which the training role can still overwrite afterwards. This step runs as the registry role, the only one that may
write registered/, and copies the job's output into registered/<pipeline execution id>/; the model package names that
copy, so a registered version's weights are never the ones the training role can change.

What it writes under the destination prefix, in this order:

    <relative key>       every object under the source, each copied server-side from the version HeadObject read
    .registered.json     the record, once every file is there and has the size its source version has:
                         {"source": <source uri>,
                          "files": {<relative key>: {"bytes": n, "source_version": <VersionId>,
                                                     "sha256": <base64 SHA-256 of the copy, as S3 computed it>}},
                          "registered_at": <UTC ISO time>}

Each file is pinned by its VersionId (the models bucket is versioned): an overwrite of the source between the listing
and the copy changes nothing that is copied. Each is one server-side CopyObject with ChecksumAlgorithm SHA256, so S3
computes a full-object SHA-256 of what it wrote (ChecksumSHA256); the record keeps it, and a promotion to another stage
(promotion/) verifies every copy against it. A single CopyObject copies at most 5 GiB ("copy an object up to 5 GB in a
single atomic action", S3 API reference, CopyObject), so a larger file is refused before anything is copied; saving
with transformers' max_shard_size at most 5GB (its default) keeps every shard below it. The destination bucket's default
encryption, the stage's KMS key, applies to each copy. Nothing is written after the record, and a run that stops
half-way writes none (the pipeline then stops before Register). A destination that already holds a record is refused:
a registered copy is never rewritten.

Not copied: anything under an inference/ folder below the source (the platform writes the handler itself at deploy
time, never a job's), a .registered.json at the source's top (only this step writes a record), and zero-byte folder
markers (keys ending in '/').
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time

RECORD = ".registered.json"
HANDLER_FOLDER = "inference"  # never carried: the platform writes handlers itself at deploy time
PAGE_SIZE = 1000  # ListObjectsV2's largest page
PREFIX_URI = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/((?:[^/]+/)+)")
PIPELINE_HINT = "the registry step's arguments in the fine-tuning pipeline"
# CopyObject's largest object: "copy an object up to 5 GB in a single atomic action" (S3 API reference, CopyObject).
COPY_OBJECT_MAX_BYTES = 5 * 2**30


class RegistrationError(Exception):
    """The source or the destination is not what a registered copy may be made from or into."""


def parse_prefix(uri: str, flag: str) -> tuple[str, str]:
    """(bucket, prefix) of s3://bucket/prefix/, or a RegistrationError naming the flag."""
    match = PREFIX_URI.fullmatch(uri)
    if not match:
        raise RegistrationError(
            f"{flag} {uri!r} is not s3://<bucket>/<prefix>/ (a prefix ends with '/'; a key without one would also "
            f"match its siblings, e.g. model/ and model-old/): fix {PIPELINE_HINT}"
        )
    return match.group(1), match.group(2)


def is_carried(relative: str) -> bool:
    """Whether the object at `relative` (its key below the source) is part of the registered copy."""
    if not relative or relative.endswith("/") or relative == RECORD:
        return False
    return HANDLER_FOLDER not in relative.split("/")[:-1]


def list_source(s3, bucket: str, prefix: str) -> tuple[list[str], list[str]]:
    """The relative keys under `prefix` to copy, and those skipped, each sorted (every page of the listing)."""
    carried, skipped = [], []
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": PAGE_SIZE}
    )
    for page in pages:
        for obj in page.get("Contents", []):
            relative = obj["Key"][len(prefix) :]
            (carried if is_carried(relative) else skipped).append(relative)
    return sorted(carried), sorted(skipped)


def has_record(s3, bucket: str, key: str) -> bool:
    """Listed, not read: a role that may list the prefix but finds no object gets no 403."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("Contents", [])
    return bool(listed) and listed[0]["Key"] == key


def read_version(s3, bucket: str, key: str) -> tuple[int, str]:
    """(bytes, VersionId) of the current version of `key`: the version the copy is pinned to."""
    head = s3.head_object(Bucket=bucket, Key=key)
    version, size = head.get("VersionId"), head["ContentLength"]
    if not version:
        raise RegistrationError(
            f"s3://{bucket}/{key} has no VersionId: the models bucket is not versioned, so the copy cannot be "
            "pinned to the version read; enable versioning on the bucket (the storage stack does)"
        )
    if size > COPY_OBJECT_MAX_BYTES:
        raise RegistrationError(
            f"s3://{bucket}/{key} holds {size} bytes ({size / 2**30:.2f} GiB), more than the 5 GiB one CopyObject "
            "copies: save the model in shards of at most 5GB (transformers' save_pretrained max_shard_size, whose "
            "default is 5GB) and run the pipeline again"
        )
    return size, version


def copy_file(s3, bucket: str, source_key: str, destination_key: str, *, size: int, version: str) -> str:
    """Copy `version` of `source_key` (`size` bytes) to `destination_key` in one CopyObject; return the base64
    SHA-256 S3 computed of what it wrote."""
    s3.copy_object(
        Bucket=bucket,
        Key=destination_key,
        CopySource={"Bucket": bucket, "Key": source_key, "VersionId": version},
        ChecksumAlgorithm="SHA256",
    )
    head = s3.head_object(Bucket=bucket, Key=destination_key, ChecksumMode="ENABLED")
    copied, sha256 = head["ContentLength"], head.get("ChecksumSHA256")
    if copied != size or not sha256:
        raise RegistrationError(
            f"s3://{bucket}/{destination_key} holds {copied} bytes{'' if sha256 else ' and no SHA-256'} after the "
            f"copy, but version {version} of s3://{bucket}/{source_key} has {size}: the copy is incomplete; no record "
            "was written, run the pipeline again"
        )
    return sha256


def run(source: str, destination: str, *, s3) -> dict:
    """Copy every carried object under `source` into `destination` (both s3://bucket/prefix/, one bucket), then write
    the record; return it."""
    started = time.monotonic()
    # The Train job's ModelArtifacts.S3ModelArtifacts names its output folder; the slash that makes it a prefix is
    # added where AWS leaves it out (the SDK adds it too, estimator.py model_data), so no sibling folder can match.
    source = source if source.endswith("/") else source + "/"
    source_bucket, source_prefix = parse_prefix(source, "--source")
    bucket, prefix = parse_prefix(destination, "--destination")
    if source_bucket != bucket:
        raise RegistrationError(
            f"--source is in bucket {source_bucket} and --destination in {bucket}: a registered copy stays in the "
            f"stage's models bucket (and its KMS key); give both in the same bucket ({PIPELINE_HINT})"
        )
    if source_prefix.startswith(prefix) or prefix.startswith(source_prefix):
        raise RegistrationError(
            f"--source {source} and --destination {destination} overlap: the copy would list or overwrite itself; "
            f"give the job's output prefix and registered/<execution id>/ ({PIPELINE_HINT})"
        )
    record_key = prefix + RECORD
    if has_record(s3, bucket, record_key):
        raise RegistrationError(
            f"s3://{bucket}/{record_key} exists: {destination} is already a registered copy, which is never "
            "rewritten; register into a new prefix (a new pipeline execution)"
        )
    files, skipped = list_source(s3, source_bucket, source_prefix)
    if not files:
        raise RegistrationError(
            f"{source} holds no files to register{f' (only {len(skipped)} skipped: {skipped[:3]})' if skipped else ''}"
            ": is it the Train job's ModelArtifacts.S3ModelArtifacts, and did the job save the model there?"
        )
    # A run of this execution that stopped half-way may have left files (no record): they are overwritten, but a file
    # the source no longer has would stay in the prefix the model package names.
    stray = sorted(set(list_source(s3, bucket, prefix)[0]) - set(files))
    if stray:
        raise RegistrationError(
            f"{destination} already holds {len(stray)} file(s) the source does not have ({', '.join(stray[:3])}"
            f"{', ...' if len(stray) > 3 else ''}) and no record: a run that stopped half-way, from other weights; "
            "register into a new prefix (a new pipeline execution)"
        )
    for relative in skipped:
        print(f"register_weights: skipping {relative} (not part of a registered copy)", flush=True)
    # Every file's size and version first: a file no CopyObject can copy is refused before anything is copied.
    versions = {relative: read_version(s3, source_bucket, source_prefix + relative) for relative in files}
    copied, total = {}, 0
    for relative in files:
        size, version = versions[relative]
        sha256 = copy_file(s3, bucket, source_prefix + relative, prefix + relative, size=size, version=version)
        copied[relative] = {"bytes": size, "source_version": version, "sha256": sha256}
        total += size
        print(f"register_weights: {relative}: {size} bytes ({size / 2**20:.1f} MiB), version {version}", flush=True)
    record = {
        "source": source,
        "files": copied,
        "registered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    # The last write: a reader that finds the record finds every file it lists.
    s3.put_object(
        Bucket=bucket,
        Key=record_key,
        Body=json.dumps(record, indent=2, sort_keys=True).encode(),
        ContentType="application/json",
    )
    print(
        f"register_weights: {len(copied)} files, {total} bytes ({total / 2**30:.2f} GiB) registered in {destination} "
        f"in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    return record


def main(argv: list[str] | None = None, *, session=None) -> int:
    """The job's entry point; `session` (a boto3 Session) for tests."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--source",
        required=True,
        help="the Train job's ModelArtifacts.S3ModelArtifacts: s3://<models bucket>/trained/<job>/output/model/",
    )
    parser.add_argument("--destination", required=True, help="s3://<models bucket>/registered/<pipeline execution id>/")
    parser.add_argument("--region", required=True, help="the models bucket's region")
    args = parser.parse_args(argv)

    if session is None:
        import boto3

        session = boto3.Session(region_name=args.region)
    try:
        run(args.source, args.destination, s3=session.client("s3", region_name=args.region))
    except RegistrationError as error:
        print(f"register_weights.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
