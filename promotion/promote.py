"""Promote a model version approved in one stage into another: copy its weights, verify them, register them.

The source is a version of the source stage's model package group (possibly in another account and region): the newest
Approved one, or a version pinned by number, which must be Approved. Its weights prefix (a full fine-tune's
ModelDataSource S3Uri, an adapter's ADAPTER_S3_URI) holds a record (weights_record) listing every file with its size
and SHA-256; before anything is copied, each source object must still match it.

    <target bucket>/<destination root><source group>/<source version>/<relative key>   copied server-side, each verified
    <target bucket>/<destination root><source group>/<source version>/.promoted.json  written last

The copy is resumable and bounded by a deadline (a Lambda's time): files already at the destination with the recorded
size and SHA-256 are skipped, so a run that stops copies on where it stopped and no file is copied twice. Each copy is
one CopyObject issued by the target region's client with ChecksumAlgorithm SHA256, so S3 computes the SHA-256 of what
it wrote, which must equal the record's. The target bucket's default encryption (its stage's KMS key) applies.

The target package is created in the target stage's group, Approved, once per source version (found again by its
promoted_from metadata): the source's InferenceSpecification with the target stage's image, every URI under the source
prefix rewritten to the copy, and every other environment value naming the source bucket moved to metadata, so nothing
the target serves reads the source account.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from promotion import package_spec, weights_record

COPY_WORKERS = 8  # concurrent CopyObjects: each is server-side, so a few saturate nothing here
GROUP_ARN = re.compile(r"arn:aws[a-z\-]*:sagemaker:([a-z0-9\-]+):([0-9]{12}):model-package-group/([a-zA-Z0-9\-]{1,63})")
APPROVED = "Approved"


class PromotionError(Exception):
    """A refusal: one line saying what is wrong and what to do."""


@dataclass(frozen=True)
class Source:
    """The source version: its package (DescribeModelPackage's answer) and where its weights are."""

    package: dict
    bucket: str
    prefix: str

    @property
    def arn(self) -> str:
        return self.package["ModelPackageArn"]

    @property
    def version(self) -> int:
        return self.package["ModelPackageVersion"]

    @property
    def group(self) -> str:
        return self.package["ModelPackageGroupName"].split("/")[-1]

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class Plan:
    """What is copied: the source's record's files (relative key -> {"bytes", "sha256"}) into bucket/prefix."""

    source: Source
    files: dict
    digest: str
    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class Result:
    """A finished promotion."""

    package_arn: str  # the target group's version
    source_package_arn: str
    source_version: int
    digest: str  # weights_record.files_digest of the copied files
    weights_uri: str  # the destination prefix, s3://<target bucket>/<root><group>/<version>/


def group_name(group_arn: str) -> str:
    """The group's name in its ARN (arn:aws:sagemaker:<region>:<account>:model-package-group/<name>)."""
    match = GROUP_ARN.fullmatch(group_arn)
    if not match:
        raise PromotionError(
            f"{group_arn!r} is not a model package group ARN (arn:aws:sagemaker:<region>:<account>:"
            "model-package-group/<name>): give the source stage's group ARN"
        )
    return match.group(3)


def newest_approved(sagemaker, group_arn: str, *, stage: str) -> str:
    """The ARN of the newest Approved version of the group (its ARN works across accounts)."""
    listed = sagemaker.list_model_packages(
        ModelPackageGroupName=group_arn,
        ModelApprovalStatus=APPROVED,
        SortBy="CreationTime",
        SortOrder="Descending",
        MaxResults=1,
    )["ModelPackageSummaryList"]
    if not listed:
        raise PromotionError(
            f"{group_arn} has no Approved version to promote: approve one in stage {stage} "
            f"(llmp approve <version> --stage {stage}), or pin a version that is"
        )
    return listed[0]["ModelPackageArn"]


def pinned(sagemaker, package_arn: str, *, stage: str) -> dict:
    """The package, described; refused unless it is Approved."""
    package = sagemaker.describe_model_package(ModelPackageName=package_arn)
    status = package.get("ModelApprovalStatus")
    if status != APPROVED:
        raise PromotionError(
            f"{package_arn} is {status}, not Approved: only an approved version is promoted; approve it in stage "
            f"{stage} (llmp approve {package['ModelPackageVersion']} --stage {stage}) or pin another version"
        )
    return package


def resolve_package(sagemaker, *, group_arn: str, version: str, stage: str) -> dict:
    """The source package: version `version` of the group ("" for its newest Approved), described and Approved."""
    name = group_name(group_arn)
    if not version:
        return pinned(sagemaker, newest_approved(sagemaker, group_arn, stage=stage), stage=stage)
    if not version.isdigit() or int(version) < 1:
        raise PromotionError(f"version {version!r} is not a version number of {name}: give 1, 2, ... or nothing")
    arn = group_arn.replace(":model-package-group/", ":model-package/", 1) + f"/{int(version)}"
    return pinned(sagemaker, arn, stage=stage)


def source_of(package: dict) -> Source:
    """Where the package's weights are: a full fine-tune's ModelDataSource S3Uri, or an adapter's ADAPTER_S3_URI."""
    container = package["InferenceSpecification"]["Containers"][0]
    uri = container.get("Environment", {}).get("ADAPTER_S3_URI") or (
        container.get("ModelDataSource", {}).get("S3DataSource", {}).get("S3Uri")
    )
    if not uri:
        raise PromotionError(
            f"{package['ModelPackageArn']} names no weights prefix (neither ModelDataSource.S3DataSource.S3Uri nor "
            "Environment ADAPTER_S3_URI): only packages the fine-tuning pipeline registered can be promoted"
        )
    try:
        bucket, prefix = weights_record.parse_prefix(uri)
    except weights_record.RecordError as error:
        raise PromotionError(f"{package['ModelPackageArn']}: {error}") from None
    return Source(package=package, bucket=bucket, prefix=prefix)


def destination_prefix(source: Source, destination_root: str) -> str:
    """<root><source group>/<source version>/: one prefix per source version, the same on every run."""
    root = destination_root if not destination_root or destination_root.endswith("/") else destination_root + "/"
    return f"{root}{source.group}/{source.version}/"


def plan(source_s3, source: Source, *, target_bucket: str, destination_root: str) -> Plan:
    """The source's record, checked against the source objects: refused unless every file is still as recorded."""
    try:
        record = weights_record.read_record(source_s3, source.bucket, source.prefix)
        digest = weights_record.files_digest(record["files"])
    except weights_record.RecordError as error:
        raise PromotionError(f"{source.arn}: {error}") from None
    if record.get("digest", digest) != digest:  # a promoted record states its digest too
        raise PromotionError(
            f"{source.uri}{weights_record.PROMOTED_RECORD} states digest {record['digest']}, but its files give "
            f"{digest}: the record was changed after it was written; promote the version into that stage again"
        )
    problems = weights_record.verify_prefix(source_s3, source.bucket, source.prefix, record)
    if problems:
        raise PromotionError(
            f"{source.arn}'s weights no longer match their record ({len(problems)} file(s): {'; '.join(problems[:3])})"
            ": nothing more is copied; register the version again by re-running the fine-tuning pipeline"
        )
    files = {rel: {"bytes": e["bytes"], "sha256": e["sha256"]} for rel, e in sorted(record["files"].items())}
    prefix = destination_prefix(source, destination_root)
    return Plan(source=source, files=files, digest=digest, bucket=target_bucket, prefix=prefix)


def refuse_strays(target_s3, plan_: Plan) -> None:
    """A destination holding weights files the record does not list is refused: the package would name them too."""
    stray = weights_record.stray_files(target_s3, plan_.bucket, plan_.prefix, {"files": plan_.files})
    if stray:
        raise PromotionError(
            f"{plan_.uri} holds {len(stray)} file(s) that version {plan_.source.version} of {plan_.source.group} does "
            f"not have ({', '.join(stray[:3])}{', ...' if len(stray) > 3 else ''}): delete them, then promote again"
        )


def pending(target_s3, plan_: Plan) -> list[str]:
    """The files not yet at the destination as recorded, sorted."""
    return [
        relative
        for relative, entry in plan_.files.items()
        if weights_record.file_problem(target_s3, plan_.bucket, plan_.prefix + relative, entry)
    ]


def copy_file(target_s3, plan_: Plan, relative: str) -> None:
    """One CopyObject from the source into the destination, then its size and SHA-256 checked against the record."""
    key = plan_.prefix + relative
    target_s3.copy_object(
        Bucket=plan_.bucket,
        Key=key,
        CopySource={"Bucket": plan_.source.bucket, "Key": plan_.source.prefix + relative},
        ChecksumAlgorithm="SHA256",
    )
    problem = weights_record.file_problem(target_s3, plan_.bucket, key, plan_.files[relative])
    if problem:
        raise PromotionError(
            f"{relative} did not copy as recorded ({problem}): the source changed during the copy, or the copy "
            "was cut short; promote again"
        )


def copy_until(target_s3, plan_: Plan, *, deadline: float, clock=time.monotonic, log=print) -> int:
    """Copy the pending files, starting none once clock() reaches `deadline`; return how many remain."""
    refuse_strays(target_s3, plan_)
    todo = pending(target_s3, plan_)
    log(f"promote: {len(plan_.files) - len(todo)} of {len(plan_.files)} files already at {plan_.uri}")

    def one(relative: str) -> bool:
        if clock() >= deadline:
            return False
        copy_file(target_s3, plan_, relative)
        size = plan_.files[relative]["bytes"]
        log(f"promote: {relative}: {size} bytes ({size / 2**20:.1f} MiB) copied and verified")
        return True

    with ThreadPoolExecutor(max_workers=COPY_WORKERS) as pool:
        copied = sum(pool.map(one, todo))
    remaining = len(todo) - copied
    log(f"promote: {copied} files copied, {remaining} remaining, into {plan_.uri}")
    return remaining


def promoted_record(plan_: Plan, *, now: datetime.datetime) -> dict:
    """The .promoted.json of a complete copy."""
    return {
        "source_package": plan_.source.arn,
        "source_version": plan_.source.version,
        "source_prefix": plan_.source.uri,
        "files": plan_.files,
        "digest": plan_.digest,
        "promoted_at": now.isoformat(timespec="seconds"),
    }


def write_record(target_s3, plan_: Plan, *, now: datetime.datetime) -> None:
    """Write .promoted.json, the last write, unless the same record is already there; refuse a different one."""
    key = plan_.prefix + weights_record.PROMOTED_RECORD
    record = promoted_record(plan_, now=now)
    try:
        existing = json.loads(target_s3.get_object(Bucket=plan_.bucket, Key=key)["Body"].read())
    except target_s3.exceptions.NoSuchKey:
        existing = None
    if existing is not None:
        if {**existing, "promoted_at": None} != {**record, "promoted_at": None}:
            raise PromotionError(
                f"s3://{plan_.bucket}/{key} records another promotion ({existing.get('source_package')}, digest "
                f"{existing.get('digest')}): delete the prefix {plan_.uri}, then promote again"
            )
        return
    body = json.dumps(record, indent=2, sort_keys=True).encode()
    target_s3.put_object(Bucket=plan_.bucket, Key=key, Body=body, ContentType="application/json")


def find_promoted(target_sagemaker, target_group: str, source_arn: str) -> str | None:
    """The target group's version promoted from `source_arn` (its promoted_from metadata), if there is one."""
    pages = target_sagemaker.get_paginator("list_model_packages").paginate(ModelPackageGroupName=target_group)
    for page in pages:
        for summary in page["ModelPackageSummaryList"]:
            described = target_sagemaker.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
            if described.get("CustomerMetadataProperties", {}).get("promoted_from") == source_arn:
                return described["ModelPackageArn"]
    return None


def register(target_sagemaker, plan_: Plan, *, target_group: str, image_uri: str, release: str) -> str:
    """The target group's Approved version for this source version: the one already there, or a new one."""
    found = find_promoted(target_sagemaker, target_group, plan_.source.arn)
    if found:
        return found
    source = plan_.source
    try:
        spec, provenance = package_spec.rewrite(
            source.package["InferenceSpecification"],
            source_uri=source.uri,
            destination_uri=plan_.uri,
            source_bucket=source.bucket,
            image_uri=image_uri,
        )
    except package_spec.SpecError as error:
        raise PromotionError(f"{source.arn}: {error}") from None
    ours = {
        "promoted_from": source.arn,
        "source_version": str(source.version),
        "weights_digest": plan_.digest,
        "release": release,
    }
    return target_sagemaker.create_model_package(
        ModelPackageGroupName=target_group,
        ModelApprovalStatus=APPROVED,
        ModelPackageDescription=package_spec.description(source.version, source.group, release),
        InferenceSpecification=spec,
        CustomerMetadataProperties=package_spec.metadata(
            ours, provenance, source.package.get("CustomerMetadataProperties", {})
        ),
    )["ModelPackageArn"]


def finish(target_s3, target_sagemaker, plan_: Plan, *, target_group: str, image_uri: str, release: str) -> Result:
    """Once every file is verified: the record, then the target package."""
    missing = pending(target_s3, plan_)
    if missing:
        raise PromotionError(
            f"{plan_.uri} lacks {len(missing)} file(s) as recorded ({', '.join(missing[:3])}): copy them first "
            "(copy_until), then finish"
        )
    write_record(target_s3, plan_, now=datetime.datetime.now(datetime.UTC))
    arn = register(target_sagemaker, plan_, target_group=target_group, image_uri=image_uri, release=release)
    return Result(
        package_arn=arn,
        source_package_arn=plan_.source.arn,
        source_version=plan_.source.version,
        digest=plan_.digest,
        weights_uri=plan_.uri,
    )
