"""Custom resource handler (behind the CDK Provider framework): package a code folder into a content-addressed archive,
or publish it as a content-addressed folder of plain files.

Create / Update (archive: ArchiveName set)
    Read the source folder (a CDK asset zip), add the files rendered from stage config (they replace source files of
    the same name), check the required files are there, build a deterministic tar.gz while streaming (bounded
    memory), and upload it to s3://<bucket>/<prefix><sha256>/<archive name>. The key is the archive's own hash, so
    unchanged inputs give the same key and the same answer, and running the same event twice uploads nothing new.
    S3 makes an object visible only once its upload completed, so a failure never leaves a partial archive at the
    final key.
Create / Update (folder: TargetUri set)
    The same files, uncompressed, under <TargetUri><Subfolder><sha256>/ (the hash of the archive the same files would
    make): the handler beside the weights SageMaker delivers to /opt/ml/model. A file already there holding the same
    bytes (compared by their SHA-256, never by the object's metadata, which its writer chooses) is left as it is;
    any other object at the key is overwritten, so a deploy always leaves the packaged bytes. A Model names its own
    hash, so an older Model (blue/green, rollback) keeps finding its own handler.
Delete
    Keep the object: a rollback, a running training job or an endpoint scaling out may still read it. Tag an archive
    `superseded=true`; the artifacts bucket's lifecycle rule expires superseded objects after a grace period. If it
    is in use again (a rollback re-creates the same key), Create removes the tag. A folder stays as it is (a few KB
    inside the weights prefix, which belongs to whoever staged the weights).

Limits: the asset zip and the archive are both written to the Lambda's /tmp (ephemeral storage, set by the
construct); memory use does not grow with their size. Errors raise with a message a person can act on; the Provider
framework reports them to CloudFormation as the resource's failure reason, so the stack never waits.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError
from deterministic_archive import Member, check_path, members_from_text, members_from_zip, merge, write_archive

logger = logging.getLogger()
logger.setLevel(logging.INFO)

SUPERSEDED_TAG = {"Key": "superseded", "Value": "true"}
_S3_PREFIX = re.compile(r"^s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/((?:[^/]+/)*)$")


class PackagingError(Exception):
    """A failure CloudFormation shows as the resource's status reason."""


@dataclass(frozen=True)
class Properties:
    source_bucket: str
    source_key: str
    target_bucket: str
    target_prefix: str
    archive_name: str  # '': a folder of plain files
    top_level_dir: str
    rendered_files: dict[str, str]
    required_files: list[str]

    @classmethod
    def parse(cls, props: dict[str, Any]) -> Properties:
        if props.get("TargetUri"):
            return cls._parse_folder(props)
        missing = [
            k for k in ("SourceBucket", "SourceKey", "TargetBucket", "TargetPrefix", "ArchiveName") if not props.get(k)
        ]
        if missing:
            raise PackagingError(f"missing resource properties: {', '.join(missing)}")
        prefix, name = props["TargetPrefix"], props["ArchiveName"]
        if not prefix.endswith("/") or prefix.startswith("/"):
            raise PackagingError(f"TargetPrefix {prefix!r} must be relative and end with '/'")
        if "/" in name or not name.endswith(".tar.gz"):
            raise PackagingError(f"ArchiveName {name!r} must be a file name ending in .tar.gz")
        return cls._with_files(props, props["TargetBucket"], prefix, name)

    @classmethod
    def _parse_folder(cls, props: dict[str, Any]) -> Properties:
        missing = [k for k in ("SourceBucket", "SourceKey", "Subfolder") if not props.get(k)]
        if missing:
            raise PackagingError(f"missing resource properties: {', '.join(missing)}")
        if props.get("ArchiveName") or props.get("TargetBucket") or props.get("TopLevelDirectory"):
            raise PackagingError(
                "TargetUri publishes plain files: ArchiveName, TargetBucket and TopLevelDirectory do not apply"
            )
        uri, subfolder = props["TargetUri"], props["Subfolder"]
        match = _S3_PREFIX.match(uri)
        if match is None:
            raise PackagingError(
                f"TargetUri {uri!r} is not an S3 prefix: expected s3://bucket/prefix/ (the served weights' folder, "
                "ending in '/')"
            )
        if not re.fullmatch(r"(?:(?!\.\.?/)[A-Za-z0-9._-]+/)+", subfolder):
            raise PackagingError(f"Subfolder {subfolder!r} must be a relative folder ending in '/', such as inference/")
        return cls._with_files(props, match.group(1), match.group(2) + subfolder, "")

    @classmethod
    def _with_files(cls, props: dict[str, Any], bucket: str, prefix: str, name: str) -> Properties:
        rendered = props.get("RenderedFiles") or {}
        if not isinstance(rendered, dict) or not all(isinstance(v, str) for v in rendered.values()):
            raise PackagingError("RenderedFiles must map file names to their text")
        required = props.get("RequiredFiles") or []
        try:
            for path in [*rendered, *required, props.get("TopLevelDirectory") or "x"]:
                check_path(path)
        except ValueError as err:
            raise PackagingError(str(err)) from None
        return cls(
            props["SourceBucket"],
            props["SourceKey"],
            bucket,
            prefix,
            name,
            props.get("TopLevelDirectory") or "",
            rendered,
            list(required),
        )


def on_event(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    request = event["RequestType"]
    logger.info("%s %s", request, event.get("LogicalResourceId"))
    if request == "Delete":
        retire(event.get("PhysicalResourceId", ""))
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "")}
    if request not in ("Create", "Update"):
        raise PackagingError(f"unknown request type {request!r}")
    return package(Properties.parse(event["ResourceProperties"]))


def package(props: Properties) -> dict[str, Any]:
    s3 = boto3.client("s3")
    with tempfile.TemporaryDirectory() as tmp:
        source_zip = os.path.join(tmp, "source.zip")
        _download(s3, props, source_zip)
        try:
            source = zipfile.ZipFile(source_zip)
        except zipfile.BadZipFile:
            raise PackagingError(
                f"source asset s3://{props.source_bucket}/{props.source_key} is not a zip archive; "
                "re-run `cdk deploy` to publish the asset again"
            ) from None
        with source:
            members = merge(members_from_zip(source), members_from_text(props.rendered_files))
            present = {m.path for m in members}
            absent = [f for f in props.required_files if f not in present]
            if absent:
                raise PackagingError(
                    f"missing required file(s) {', '.join(absent)}: not in the source folder nor rendered from config"
                )
            if not props.archive_name:
                return _publish_folder(s3, props, members)
            archive_path = os.path.join(tmp, props.archive_name)
            with open(archive_path, "wb") as out:
                sha256, size = write_archive(members, out, top_level_dir=props.top_level_dir)
        key = f"{props.target_prefix}{sha256}/{props.archive_name}"
        _publish(s3, archive_path, props.target_bucket, key, sha256, size)
    uri = f"s3://{props.target_bucket}/{key}"
    logger.info("packaged %d files into %s (%d bytes)", len(members), uri, size)
    return {
        "PhysicalResourceId": uri,
        "Data": {"Uri": uri, "Bucket": props.target_bucket, "Key": key, "Sha256": sha256, "SizeBytes": str(size)},
    }


def _publish_folder(s3: Any, props: Properties, members: list[Member]) -> dict[str, Any]:
    """Every file under <prefix><sha256>/, the hash being that of the archive the same files make."""
    sha256, _ = write_archive(members, _Discard())
    folder = f"{props.target_prefix}{sha256}/"
    size = 0
    for member in sorted(members, key=lambda m: m.path):
        with member.open() as data:
            body = data.read()
        size += len(body)
        _put_once(s3, props.target_bucket, folder + member.path, body)
    uri = f"s3://{props.target_bucket}/{folder}"
    logger.info("published %d files under %s (%d bytes)", len(members), uri, size)
    return {
        "PhysicalResourceId": uri,
        "Data": {"Uri": uri, "Bucket": props.target_bucket, "Key": folder, "Sha256": sha256, "SizeBytes": str(size)},
    }


def _put_once(s3: Any, bucket: str, key: str, body: bytes) -> None:
    """Write `body` at `key` unless the object there already holds exactly these bytes.

    The bytes are compared, never what the object says of itself: a writer sets its metadata (x-amz-meta-*) as it
    likes, so a planted file carrying this file's hash in its metadata would otherwise outlive every deploy. The
    files are a few kB, so reading one costs less than a request's latency."""
    digest = hashlib.sha256(body)
    if _current_sha256(s3, bucket, key) == digest.hexdigest():
        return  # written by an earlier run: the folder never changes once it is complete
    try:
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=body,
            Metadata={"sha256": digest.hexdigest()},
            # S3 checks the upload against this digest and refuses the object if it differs.
            ChecksumSHA256=base64.b64encode(digest.digest()).decode(),
        )
    except ClientError as err:
        raise PackagingError(
            f"could not write s3://{bucket}/{key}: {err}; the code package function needs s3:PutObject there (and "
            "the bucket's KMS key, if it has one)"
        ) from None


def _current_sha256(s3: Any, bucket: str, key: str) -> str | None:
    """The SHA-256 of the bytes stored at `key`, or None when there is no object (or it cannot be read)."""
    try:
        response = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as err:
        # Without s3:ListBucket, S3 answers 403 rather than 404 for a missing key. Either way: write.
        if err.response.get("Error", {}).get("Code") not in ("403", "404", "NoSuchKey", "NotFound", "Forbidden"):
            raise PackagingError(f"could not check s3://{bucket}/{key}: {err}") from None
        return None
    digest, stream = hashlib.sha256(), response["Body"]
    try:
        for chunk in stream.iter_chunks(1 << 20):
            digest.update(chunk)
    finally:
        stream.close()
    return digest.hexdigest()


class _Discard:
    """A file that keeps nothing: only the hash of what would be written is wanted."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def retire(physical_id: str) -> None:
    """Tag the archive superseded; never delete it, never fail (a stuck Delete would block the stack)."""
    if not physical_id.startswith("s3://"):
        return  # the framework's placeholder id after a failed Create: nothing was published
    if physical_id.endswith("/"):
        logger.info("keeping %s: a Model may still name it (blue/green, rollback)", physical_id)
        return
    bucket, _, key = physical_id.removeprefix("s3://").partition("/")
    try:
        boto3.client("s3").put_object_tagging(Bucket=bucket, Key=key, Tagging={"TagSet": [SUPERSEDED_TAG]})
        logger.info("tagged %s superseded; the bucket's lifecycle rule expires it later", physical_id)
    except ClientError as err:
        logger.warning("could not tag %s superseded (%s); leaving it as it is", physical_id, err)


def _download(s3: Any, props: Properties, path: str) -> None:
    try:
        s3.download_file(props.source_bucket, props.source_key, path)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        where = f"s3://{props.source_bucket}/{props.source_key}"
        if code in ("404", "NoSuchKey", "NoSuchBucket"):
            raise PackagingError(
                f"source asset {where} not found; `cdk deploy` publishes assets before updating the stack, "
                "so re-run it (or check the bootstrap bucket)"
            ) from None
        raise PackagingError(f"could not read source asset {where}: {code or err}") from None


def _publish(s3: Any, path: str, bucket: str, key: str, sha256: str, size: int) -> None:
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        # Without s3:ListBucket, S3 answers 403 rather than 404 for a missing key. Either way: upload (the key is
        # the content's hash, so writing it again can only write the same bytes).
        if err.response.get("Error", {}).get("Code") not in ("403", "404", "NoSuchKey", "NotFound", "Forbidden"):
            raise PackagingError(f"could not check s3://{bucket}/{key}: {err}") from None
        head = None
    if head and head.get("ContentLength") == size and head.get("Metadata", {}).get("sha256") == sha256:
        # Same content already published: only make sure it is not marked for expiry.
        s3.delete_object_tagging(Bucket=bucket, Key=key)
        logger.info("s3://%s/%s already holds this archive", bucket, key)
        return
    try:
        s3.upload_file(path, bucket, key, ExtraArgs={"Metadata": {"sha256": sha256}})
    except (ClientError, boto3.exceptions.S3UploadFailedError) as err:
        raise PackagingError(f"could not upload s3://{bucket}/{key}: {err}") from None
