"""After `cdk destroy`: the stacks are gone, what the stage's removal policy promises holds, the endpoint is deleted.

A stage's `removal_policy` is one promise about its data (infrastructure/stage.py, storage_stack.py): `retain` keeps
every bucket, KMS key and log group (and the objects in the buckets) when its stacks are deleted; `destroy` deletes
them with the stacks, the buckets emptied first by CDK's Custom::S3AutoDeleteObjects and each key scheduled for
deletion. `promised` reads that promise for every such resource of the templates; `promise_kept` checks it after the
destroy; `data_as_promised` checks the object the rehearsal put in the data bucket. The custom resource's Lambda never
runs on moto, so `empty_auto_deleted_buckets` does its work just before the destroy, and says so (a Gap).
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from rehearsal.assembly import StackTemplate
from rehearsal.deployment import Aws, Deployment
from rehearsal.findings import Check, Gap, error_code, summarize

# The resource types a stage's removal_policy decides the fate of, and that the rehearsal can probe.
GOVERNED = ("AWS::S3::Bucket", "AWS::KMS::Key", "AWS::Logs::LogGroup")
AUTO_DELETE = "Custom::S3AutoDeleteObjects"  # CDK's bucket emptier (s3.Bucket auto_delete_objects)


@dataclass(frozen=True)
class Promised:
    """One resource, and what the stage's removal policy promises of it after the destroy."""

    path: str
    resource_type: str
    physical_id: str
    kept: bool  # True: there after the destroy (KMS keys Enabled); False: deleted (KMS keys PendingDeletion)
    deletion_policy: str  # what the template says (Retain, Delete; CloudFormation's default Delete when unset)


def promised(d: Deployment, removal_policy: str) -> list[Promised]:
    """Every bucket, key and log group of the templates, with what `removal_policy` promises of it (read before the
    destroy: afterwards the stacks' resource lists are gone)."""
    return [
        Promised(
            stack.path_of(logical_id),
            resource_type,
            physical_id,
            kept=removal_policy == "retain",
            deletion_policy=resource.get("DeletionPolicy", "Delete"),
        )
        for resource_type in GOVERNED
        for stack, logical_id, resource, physical_id in d.resources(resource_type)
        if physical_id
    ]


def auto_deleted_buckets(d: Deployment) -> list[tuple[str, str]]:
    """(construct path, bucket name) of every bucket a Custom::S3AutoDeleteObjects of the templates empties."""
    return [
        (stack.path_of(logical_id), d.resolver(stack).resolve(resource["Properties"]["BucketName"]))
        for stack, logical_id, resource, _ in d.resources(AUTO_DELETE)
    ]


def empty_auto_deleted_buckets(aws: Aws, buckets: list[tuple[str, str]]) -> Gap | None:
    """What each Custom::S3AutoDeleteObjects does when its stack is deleted (delete every object version and delete
    marker of its bucket), done here because its Lambda never runs on moto. Only the buckets the templates name: a
    bucket deleted without it still holds its objects, and the destroy check finds it."""
    if not buckets:
        return None
    s3, deleted = aws("s3"), 0
    for _, bucket in buckets:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            versions = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            if versions:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": versions, "Quiet": True})
                deleted += len(versions)
    return Gap(
        f"{AUTO_DELETE} ({len(buckets)}: {', '.join(path for path, _ in buckets)})",
        "its Lambda never runs on moto, so the rehearsal did its work itself just before cdk destroy: it deleted every "
        f"object version and delete marker of the {len(buckets)} buckets ({deleted} in all). Whether the handler "
        "itself empties them (its role, the bucket policy that lets it) is not checked here",
    )


def stacks_deleted(aws: Aws, stacks: list[StackTemplate]) -> Check:
    remaining = []
    for stack in stacks:
        try:
            status = aws("cloudformation").describe_stacks(StackName=stack.stack_name)["Stacks"][0]["StackStatus"]
        except ClientError as err:
            if "does not exist" not in str(err):
                raise
            continue
        remaining.append(f"{stack.stack_name} is {status}")
    return summarize("stacks deleted", remaining, f"{', '.join(s.stack_name for s in stacks)}: gone")


def _state(aws: Aws, item: Promised) -> str | None:
    """What is wrong with `item` after the destroy, as its promise goes; None when it is as promised."""
    try:
        if item.resource_type == "AWS::S3::Bucket":
            aws("s3").head_bucket(Bucket=item.physical_id)
        elif item.resource_type == "AWS::KMS::Key":
            state = aws("kms").describe_key(KeyId=item.physical_id)["KeyMetadata"]["KeyState"]
            if state != ("Enabled" if item.kept else "PendingDeletion"):
                return f"{item.path}: key {item.physical_id} is {state}"
            return None
        elif item.resource_type == "AWS::Logs::LogGroup":
            groups = aws("logs").describe_log_groups(logGroupNamePrefix=item.physical_id)["logGroups"]
            if not any(g["logGroupName"] == item.physical_id for g in groups):
                raise LookupError("gone")
    except (ClientError, LookupError) as err:
        if not item.kept:
            return None
        code = error_code(err) if isinstance(err, ClientError) else str(err)
        return f"{item.path}: {item.physical_id} is gone ({code})"
    return None if item.kept else f"{item.path}: {item.physical_id} is still there"


def promise_kept(aws: Aws, removal_policy: str, items: list[Promised]) -> Check:
    """After the destroy: with `retain`, every bucket, key (Enabled) and log group is there; with `destroy`, every
    bucket and log group is gone and every key PendingDeletion. The templates must say the same (DeletionPolicy)."""
    problems = [
        f"{i.path}: DeletionPolicy {i.deletion_policy}, but the stage's removal_policy is {removal_policy}"
        for i in items
        if (i.deletion_policy == "Retain") != i.kept
    ]
    problems += [p for p in (_state(aws, item) for item in items) if p]
    kinds = sorted({i.resource_type for i in items})
    counts = ", ".join(f"{sum(i.resource_type == k for i in items)} {k.split('::')[-1]}" for k in kinds)
    if removal_policy == "retain":
        keys = " (KMS keys Enabled, not pending deletion)" if "AWS::KMS::Key" in kinds else ""
        passed = f"retain: all {len(items)} marked Retain are there: {counts}{keys}"
    else:
        keys = "; KMS keys PendingDeletion" if "AWS::KMS::Key" in kinds else ""
        passed = f"destroy: all {len(items)} deleted with the stacks: {counts}{keys}"
    return summarize("removal policy kept", problems, passed)


def data_as_promised(aws: Aws, removal_policy: str, bucket: str, key: str, body: bytes) -> Check:
    """The object put in the data bucket before the destroy: there byte for byte (retain), or gone with its bucket."""
    name = "data as the removal policy promises"
    try:
        found = aws("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as err:
        if removal_policy == "destroy" and error_code(err) == "NoSuchBucket":
            return Check(name, True, f"destroy: s3://{bucket}/{key} is gone with its bucket (NoSuchBucket)")
        return Check(name, False, f"{removal_policy}: s3://{bucket}/{key}: {error_code(err)}")
    if removal_policy == "destroy":
        return Check(name, False, f"destroy: s3://{bucket}/{key} is still there")
    same = found == body
    detail = f"s3://{bucket}/{key} is there, byte for byte" if same else f"s3://{bucket}/{key} changed: {found[:80]!r}"
    return Check(name, same, f"retain: {detail}")


def billing_resources_deleted(aws: Aws, deployed: dict[str, str]) -> Check:
    """`deployed`: SageMaker resource type -> name; none of them may outlive the stack."""
    sagemaker, remaining = aws("sagemaker"), []
    describe = {
        "AWS::SageMaker::Endpoint": lambda n: sagemaker.describe_endpoint(EndpointName=n),
        "AWS::SageMaker::EndpointConfig": lambda n: sagemaker.describe_endpoint_config(EndpointConfigName=n),
        "AWS::SageMaker::Model": lambda n: sagemaker.describe_model(ModelName=n),
    }
    for resource_type, name in deployed.items():
        try:
            describe[resource_type](name)
        except ClientError:
            continue
        remaining.append(f"{resource_type} {name} still exists")
    return summarize(
        "endpoint deleted", remaining, "the endpoint, its config and model (what bills by the hour) are gone"
    )
