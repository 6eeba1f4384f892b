"""Promotion rehearsal: an approved version copied into a stage of another account, on moto's server (issue 24).

    make rehearse-promotion                                   # dev -> staging of config/examples/promotion.yaml
    .venv/bin/python -m rehearsal.promotion --from-stage staging --to-stage prod
    .venv/bin/python -m rehearsal.promotion --assembly cdk.out   # a synth of the same config, reused

Steps: synthesize the config (app.py, as the CLI runs it) and check the source stage's grants to the target's
promotion role (bucket, key, group) and that the target's serving resources name nothing of the source's account;
on moto's server (127.0.0.1), as the source's account: its bucket and key with their synthesized policies, its group,
registered weights with their record and an Approved version; as the target's promotion role: its bucket and group,
then the custom resource's handler (promotion/handler.py on_event, then is_complete until complete) with the
properties the template passes; check the copy, its record and the target's version; a new release (nothing copied
or registered); the source torn down (the copy still verifies). Prints PASS/FAIL per check and what moto does not
represent. Exit status: 0 all passed, 1 a check failed, 2 no rehearsal (bad arguments, synth or emulator failed).
Every client reaches only 127.0.0.1, with fake credentials.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from rehearsal import cdk_cli
from rehearsal.assembly import StackTemplate, Unresolvable, read_stage
from rehearsal.findings import Check, Gap, summarize
from rehearsal.promotion_grants import (
    Stages,
    check_bucket_grant,
    check_group_grant,
    check_key_grant,
    check_serving_names_no_source,
    models_bucket,
    policy_of,
    resolver,
    stack,
    synthesize,
)
from rehearsal.rehearse import Report, SetupError, finish, run_check
from rehearsal.server import EmulatorError, running_emulator

DEFAULT_CONFIG = "config/examples/promotion.yaml"
REGISTERED = "registered/rehearsal-run-1/"  # the registry step's copy of one fine-tuning run
WEIGHTS = {"config.json": b'{"model_type": "gptj"}\n', "model.safetensors": bytes(range(256)) * 1024}
LAMBDA_MS = 15 * 60 * 1000  # the handler's timeout (promoted_weights.py HANDLER_TIMEOUT), as time remaining
MOTO_GAPS = [
    "moto checks no IAM or key policy, and a bucket policy without the caller's principal or the request's context "
    "(its auth is off): the target read the source's bucket because nothing there denied it, not because "
    "PromotionReads names its role; the grants are checked in the templates above",
    "KMS: moto encrypts nothing with the keys, so kms:Decrypt through S3 (PromotionDecrypts, kms:ViaService) is not "
    "exercised; the source's key was only created with its synthesized policy, and scheduled for deletion",
    "SageMaker: moto keeps each account's registry apart and has no resource policies, so the target's credentials "
    "find none of the source's versions by ARN; the handler's source SageMaker client acted in the source's account "
    "(what the group's policy grants the target's); its S3 copies and registration ran as the target's promotion role",
    "moto has no DeleteModelPackage: the torn-down source's version was set to Rejected instead",
    "the Provider framework and the Lambda (Docker) do not run: on_event and is_complete were called in this process "
    "as the Provider calls them, with a 15-minute Lambda's time left",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rehearsal.promotion", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"the platform config (default {DEFAULT_CONFIG})")
    parser.add_argument("--from-stage", help="the source stage (default: the first promotion's)")
    parser.add_argument("--to-stage", help="the stage promoting from it (default: the first that does)")
    parser.add_argument("--assembly", help="a cloud assembly of the same config already synthesized: no synth")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (cloud assembly, server log)")
    return parser.parse_args(argv)


# --- steps 2-4: two accounts on moto's server --------------------------------------------------------------------


@dataclasses.dataclass
class Source:
    bucket: str
    key: str
    package: str
    record: dict


class Accounts:
    """Clients acting as a role, in the role's account (moto maps an assumed role's credentials to its account)."""

    def __init__(self, endpoint_url: str, region: str) -> None:
        self.endpoint_url, self.region, self.sessions = endpoint_url, region, {}
        fake = {k.lower(): v for k, v in cdk_cli.FAKE_CREDENTIALS.items()}
        self.sts = boto3.Session(**fake, region_name=region).client("sts", endpoint_url=endpoint_url)

    def session(self, role: str) -> boto3.Session:
        if role not in self.sessions:
            given = self.sts.assume_role(RoleArn=role, RoleSessionName="rehearsal")["Credentials"]
            keys = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
            values = (given["AccessKeyId"], given["SecretAccessKey"], given["SessionToken"])
            self.sessions[role] = boto3.Session(**dict(zip(keys, values, strict=True)), region_name=self.region)
        return self.sessions[role]

    def __call__(self, role: str, service: str, **config: Any) -> Any:
        return self.session(role).client(service, endpoint_url=self.endpoint_url, config=Config(**config))


def create_bucket(aws: Accounts, role: str, bucket: str, key_policy: dict | None = None) -> str:
    """A versioned bucket encrypted by default with a new key; returns the key's ARN."""
    created = aws(role, "kms").create_key(**({"Policy": json.dumps(key_policy)} if key_policy else {}))
    key = created["KeyMetadata"]["Arn"]
    s3 = aws(role, "s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    default = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}}
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [default]})
    return key


def apply_bucket_policy(s3: Any, bucket: str, document: dict) -> Gap:
    """The synthesized policy less its conditional Denies: moto evaluates a bucket policy without the request's
    context, and denies whenever a statement's condition is unmet, so each of those would refuse every request."""
    dropped = [s for s in document["Statement"] if s["Effect"] == "Deny" and s.get("Condition")]
    kept = [s for s in document["Statement"] if s not in dropped]
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({**document, "Statement": kept}))
    names = [s.get("Sid") or "/".join(k for c in s["Condition"].values() for k in c) for s in dropped]
    why = f"moto would refuse every request with them; {len(kept)} of {len(document['Statement'])} statements applied"
    return Gap(f"the source bucket policy's conditional Denies ({', '.join(names)})", why)


def seed_weights(s3: Any, bucket: str, prefix: str) -> dict:
    """What training/register_weights.py leaves: each file with S3's SHA-256 of it, then .registered.json."""
    files = {}
    for relative, body in WEIGHTS.items():
        put = s3.put_object(Bucket=bucket, Key=prefix + relative, Body=body, ChecksumAlgorithm="SHA256")
        files[relative] = {"bytes": len(body), "source_version": put["VersionId"], "sha256": put["ChecksumSHA256"]}
    record = {"source": f"s3://{bucket}/trained/run/", "files": files, "registered_at": "2026-01-01T00:00:00+00:00"}
    s3.put_object(Bucket=bucket, Key=prefix + ".registered.json", Body=json.dumps(record).encode())
    return record


def inference_specification(stages: Stages, weights_uri: str) -> dict:
    """A full fine-tune's, as registration.py records it: the LMI image, the weights as an uncompressed S3Prefix,
    the engine's OPTION_* environment with the handler inside the weights prefix."""
    from core import serving_properties
    from core.catalog import images

    handler = f"/opt/ml/model/inference/{'0' * 64}/model.py"
    container = {
        "Image": images.serving_image(stages.region, stages.serving.engine),
        "Environment": serving_properties.environment(stages.serving, entry_point=handler),
        "ModelDataSource": {
            "S3DataSource": {"S3Uri": weights_uri, "S3DataType": "S3Prefix", "CompressionType": "None"}
        },
    }
    types = {"SupportedContentTypes": ["application/json"], "SupportedResponseMIMETypes": ["application/json"]}
    return {
        "Containers": [container],
        **types,
        "SupportedRealtimeInferenceInstanceTypes": [stages.serving.instance_type],
    }


def setup_source(
    aws: Accounts, stages: Stages, storage: StackTemplate, training: StackTemplate, report: Report
) -> Source:
    bucket = f"{storage.stack_name}-models"
    names = resolver(storage, stages, stages.source_account, {models_bucket(storage): bucket})
    key_policy, bucket_policy = (
        names.resolve(policy_of(storage, resource_type, sid)[1])
        for resource_type, sid in (("AWS::KMS::Key", "PromotionDecrypts"), ("AWS::S3::BucketPolicy", "PromotionReads"))
    )
    key = create_bucket(aws, stages.admin, bucket, key_policy)
    s3, sagemaker = aws(stages.admin, "s3"), aws(stages.admin, "sagemaker")
    report.add(apply_bucket_policy(s3, bucket, bucket_policy))
    sagemaker.create_model_package_group(ModelPackageGroupName=stages.source_group)
    group_policy = policy_of(training, "AWS::SageMaker::ModelPackageGroup", "")[1]
    try:
        aws(stages.admin, "sagemaker", retries={"total_max_attempts": 1}).put_model_package_group_policy(
            ModelPackageGroupName=stages.source_group, ResourcePolicy=json.dumps(group_policy)
        )
    except ClientError as err:
        status = err.response["ResponseMetadata"]["HTTPStatusCode"]
        report.add(Gap("the group's policy", f"moto's PutModelPackageGroupPolicy is not implemented (HTTP {status})"))
    record = seed_weights(s3, bucket, REGISTERED)
    package = sagemaker.create_model_package(
        ModelPackageGroupName=stages.source_group,
        ModelApprovalStatus="Approved",
        InferenceSpecification=inference_specification(stages, f"s3://{bucket}/{REGISTERED}"),
        CustomerMetadataProperties={"PretrainedModel": stages.serving.model},
    )["ModelPackageArn"]
    report.step(f"source {stages.source} ({stages.source_account}): s3://{bucket}/{REGISTERED} with its record, "
                f"{package} Approved")  # fmt: skip
    return Source(bucket, key, package, record)


def setup_target(aws: Accounts, stages: Stages, storage: StackTemplate, report: Report) -> str:
    bucket = f"{storage.stack_name}-models"
    create_bucket(aws, stages.role_arn, bucket)
    aws(stages.role_arn, "sagemaker").create_model_package_group(ModelPackageGroupName=stages.target_group)
    report.step(f"target {stages.target} ({stages.target_account}): s3://{bucket}, group {stages.target_group}")
    return bucket


def resource_properties(serving: StackTemplate, storage: StackTemplate, stages: Stages, bucket: str) -> dict:
    """The Custom::PromotedWeights properties of the target's serving template, resolved (imports included)."""
    names = resolver(serving, stages, stages.target_account)
    storage_names = resolver(storage, stages, stages.target_account, {models_bucket(storage): bucket})
    for output in storage.template.get("Outputs", {}).values():
        with contextlib.suppress(Unresolvable, KeyError):
            names.exports[output["Export"]["Name"]] = storage_names.resolve(output["Value"])
    found = [r["Properties"] for r in serving.of_type("Custom::PromotedWeights").values()]
    properties = next(p for p in found if p["SourceGroupArn"].endswith(f"/{stages.source_group}"))
    return {k: str(names.resolve(v)) for k, v in properties.items() if k != "ServiceToken"}


class LambdaContext:
    def get_remaining_time_in_millis(self) -> int:
        return LAMBDA_MS


@contextlib.contextmanager
def as_promotion_role(aws: Accounts, stages: Stages):
    """This process as the handler's Lambda: the promotion role's credentials, every client to the emulator
    (restored after); the source's SageMaker client acts in the source's account (moto keeps registries apart)."""
    from promotion import handler

    saved_env, make_clients = dict(os.environ), handler.make_clients
    credentials = aws.session(stages.role_arn).get_credentials().get_frozen_credentials()
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]
    os.environ |= {"AWS_ACCESS_KEY_ID": credentials.access_key, "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
                   "AWS_SESSION_TOKEN": credentials.token, "AWS_DEFAULT_REGION": stages.target_region,
                   "AWS_ENDPOINT_URL": aws.endpoint_url, "AWS_CONFIG_FILE": os.devnull,
                   "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip
    source_sagemaker = aws(stages.admin, "sagemaker")
    boto3.DEFAULT_SESSION = None  # one made before would keep its credentials
    handler.make_clients = lambda p: dataclasses.replace(make_clients(p), source_sagemaker=source_sagemaker)
    try:
        yield handler
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        boto3.DEFAULT_SESSION, handler.make_clients = None, make_clients


def run_resource(aws: Accounts, stages: Stages, event: dict) -> dict:
    """on_event, then is_complete until complete, as the Provider framework calls them; their log, indented."""
    log = io.StringIO()
    try:
        with as_promotion_role(aws, stages) as handler, contextlib.redirect_stdout(log):
            answer = handler.on_event(event, LambdaContext())
            for _ in range(10):
                done = handler.is_complete({**event, **answer}, LambdaContext())
                if done["IsComplete"]:
                    return {**answer, **done}
            raise RuntimeError("is_complete did not complete in 10 calls")
    finally:
        print("".join(f"    | {line}\n" for line in log.getvalue().splitlines()), end="", flush=True)


def check_copy(aws: Accounts, stages: Stages, source: Source, bucket: str, data: dict) -> Check:
    prefix = f"promoted/{stages.source_group}/{source.package.rsplit('/', 1)[-1]}/"
    problems = [] if data["WeightsUri"] == f"s3://{bucket}/{prefix}" else [f"WeightsUri {data['WeightsUri']}"]
    for relative in source.record["files"]:
        original = aws(stages.admin, "s3").get_object(Bucket=source.bucket, Key=REGISTERED + relative)["Body"].read()
        copied = aws(stages.role_arn, "s3").get_object(Bucket=bucket, Key=prefix + relative)["Body"].read()
        problems += [] if copied == original else [f"{relative} differs from the source's"]
    return summarize("copy byte-identical", problems, f"{len(source.record['files'])} files at s3://{bucket}/{prefix}")


def check_promoted_record(aws: Accounts, stages: Stages, source: Source, data: dict) -> Check:
    from promotion import weights_record

    bucket, prefix = weights_record.parse_prefix(data["WeightsUri"])
    body = aws(stages.role_arn, "s3").get_object(Bucket=bucket, Key=prefix + weights_record.PROMOTED_RECORD)["Body"]
    promoted, digest = json.loads(body.read()), weights_record.files_digest(source.record["files"])
    problems = [
        f"{where}: {value}"
        for where, value in (("record", promoted["digest"]), ("Data", data["Digest"]))
        if value != digest
    ]
    problems += [] if promoted["source_package"] == source.package else [f"source_package {promoted['source_package']}"]
    return summarize(
        "promoted record", problems, f".promoted.json digest {digest}: files_digest of the source's record"
    )


def check_target_package(aws: Accounts, stages: Stages, source: Source, bucket: str, data: dict) -> Check:
    sagemaker = aws(stages.role_arn, "sagemaker")
    versions = sagemaker.list_model_packages(ModelPackageGroupName=stages.target_group)["ModelPackageSummaryList"]
    package = sagemaker.describe_model_package(ModelPackageName=data["PackageArn"])
    spec = json.dumps(package["InferenceSpecification"])
    problems = [] if len(versions) == 1 else [f"{len(versions)} versions in {stages.target_group}"]
    problems += [u for u in re.findall(r's3://[^"]+', spec) if not u.startswith(f"s3://{bucket}/")]
    problems += [f"the spec names {n}" for n in (source.bucket, stages.source_account) if n in spec]
    problems += [] if package["ModelApprovalStatus"] == "Approved" else [package["ModelApprovalStatus"]]
    named = package.get("CustomerMetadataProperties", {}).get("promoted_from")
    problems += [] if named == source.package else [f"promoted_from {named}"]
    return summarize("target package", problems, f"one Approved version of {stages.target_group}, naming only "
                     f"s3://{bucket}/, promoted_from {source.package}")  # fmt: skip


def writes(s3: Any, bucket: str) -> int:
    return sum(
        len(page.get("Versions", [])) for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket)
    )


def check_new_release(aws: Accounts, stages: Stages, event: dict, first: dict, bucket: str) -> Check:
    s3, before = aws(stages.role_arn, "s3"), writes(aws(stages.role_arn, "s3"), bucket)
    again = {**event, "RequestType": "Update", "PhysicalResourceId": first["PhysicalResourceId"]}
    again |= {"OldResourceProperties": event["ResourceProperties"]}
    again["ResourceProperties"] = {**event["ResourceProperties"], "Release": "release-2"}
    second = run_resource(aws, stages, again)["Data"]
    versions = aws(stages.role_arn, "sagemaker").list_model_packages(ModelPackageGroupName=stages.target_group)
    problems = [] if writes(s3, bucket) == before else [f"{writes(s3, bucket) - before} objects written"]
    problems += [] if len(versions["ModelPackageSummaryList"]) == 1 else ["another version registered"]
    problems += [] if second["PackageArn"] == first["Data"]["PackageArn"] else [f"answered {second['PackageArn']}"]
    return summarize("new release copies nothing", problems, f"no object written, {second['PackageArn']} again")


def tear_down(aws: Accounts, stages: Stages, source: Source) -> None:
    """The source's bucket (every version) and policy deleted, its key scheduled for deletion, its version Rejected."""
    s3 = aws(stages.admin, "s3")
    s3.delete_bucket_policy(Bucket=source.bucket)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=source.bucket):
        for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=source.bucket, Key=entry["Key"], VersionId=entry["VersionId"])
    s3.delete_bucket(Bucket=source.bucket)
    # moto finds a key to delete by its id only
    aws(stages.admin, "kms").schedule_key_deletion(KeyId=source.key.rsplit("/", 1)[-1], PendingWindowInDays=7)
    aws(stages.admin, "sagemaker").update_model_package(ModelPackageArn=source.package, ModelApprovalStatus="Rejected")


def check_copy_outlives_source(aws: Accounts, stages: Stages, source: Source, data: dict) -> Check:
    from promotion import weights_record

    s3, bucket_names = (
        aws(stages.role_arn, "s3"),
        [b["Name"] for b in aws(stages.admin, "s3").list_buckets()["Buckets"]],
    )
    bucket, prefix = weights_record.parse_prefix(data["WeightsUri"])
    problems = ["the source's bucket is still there"] if source.bucket in bucket_names else []
    problems += weights_record.verify_prefix(s3, bucket, prefix, weights_record.read_record(s3, bucket, prefix))
    package = aws(stages.role_arn, "sagemaker").describe_model_package(ModelPackageName=data["PackageArn"])
    status = package["ModelApprovalStatus"]
    problems += [] if status == "Approved" else [f"the target's version is {status}"]
    detail = "with the source's bucket, key and approval gone, the copy verifies and the target's version is Approved"
    return summarize("copy outlives its source", problems, f"{detail}: nothing it runs needs {stages.source_account}")


# --- the rehearsal ------------------------------------------------------------------------------------------------


def rehearse_promotion(args: argparse.Namespace, work_dir: Path, report: Report) -> None:
    stages = Stages(args.config, args.from_stage, args.to_stage)
    report.heading(f"Promotion rehearsal of {args.config}: {stages.source} ({stages.source_account}) -> "
                   f"{stages.target} ({stages.target_account}), on moto")  # fmt: skip
    assembly = Path(args.assembly) if args.assembly else work_dir / "cdk.out"
    if not args.assembly:
        synthesize(args.config, assembly)
    report.step(f"synth: {assembly}")
    storage, training = (stack(read_stage(assembly, stages.source), part) for part in ("Storage", "Training"))
    target_storage, serving = (stack(read_stage(assembly, stages.target), part) for part in ("Storage", "Serving"))
    report.heading("the grants, as synthesized:")
    run_check(report, "bucket grant", check_bucket_grant, storage, stages)
    run_check(report, "key grant", check_key_grant, storage, stages)
    run_check(report, "group grant", check_group_grant, training, stages)
    run_check(report, "serving names no source", check_serving_names_no_source, serving, stages)
    with running_emulator(work_dir / "moto-server.log") as emulator:
        aws = Accounts(f"http://127.0.0.1:{emulator.port}", stages.region)
        report.step(f"emulator: moto's server on {aws.endpoint_url}")
        source = setup_source(aws, stages, storage, training, report)
        bucket = setup_target(aws, stages, target_storage, report)
        promote(aws, stages, source, bucket, resource_properties(serving, target_storage, stages, bucket), report)
    report.step("emulator stopped")


def promote(aws: Accounts, stages: Stages, source: Source, bucket: str, properties: dict, report: Report) -> None:
    event = {"RequestType": "Create", "LogicalResourceId": "PromotedWeights", "ResourceType": "Custom::PromotedWeights"}
    event["ResourceProperties"] = {**properties, "Release": "release-1"}
    report.step(f"deploy: Custom::PromotedWeights Create, release-1, as {stages.role_arn}")
    try:
        first = run_resource(aws, stages, event)
    except Exception as err:  # the handler's refusal is the finding
        report.add(Check("promotion", False, f"{type(err).__name__}: {err}"))
        return
    data = first["Data"]
    report.heading("checks after the promotion:")
    run_check(report, "copy byte-identical", check_copy, aws, stages, source, bucket, data)
    run_check(report, "promoted record", check_promoted_record, aws, stages, source, data)
    run_check(report, "target package", check_target_package, aws, stages, source, bucket, data)
    report.step("deploy: Custom::PromotedWeights Update, release-2 (a new release; the same approved version)")
    run_check(report, "new release copies nothing", check_new_release, aws, stages, event, first, bucket)
    tear_down(aws, stages, source)
    report.step(f"source torn down: s3://{source.bucket} and its key deleted, {source.package} Rejected")
    run_check(report, "copy outlives its source", check_copy_outlives_source, aws, stages, source, data)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work_dir, report = Path(tempfile.mkdtemp(prefix="rehearsal-promotion-")), Report()
    try:
        rehearse_promotion(args, work_dir, report)
    except SetupError as err:
        print(f"rehearsal: {err}", file=sys.stderr)
        shutil.rmtree(work_dir, ignore_errors=True)
        return 2
    except EmulatorError as err:
        print(f"rehearsal: {err}\n(work directory kept: {work_dir})", file=sys.stderr)
        return 2
    except Exception as err:  # a failed check, with the error: never a traceback
        report.add(Check("rehearsal", False, f"stopped: {type(err).__name__}: {err}"))
    report.heading("\nWhat moto does not represent (so no check above covers it):")
    for line in [f"{gap.what}: {gap.why}" for gap in report.gaps] + MOTO_GAPS:
        report.heading(f"  - {line}")
    return finish(report, work_dir, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
