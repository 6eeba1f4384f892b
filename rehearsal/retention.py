"""After `cdk destroy`: the stacks are gone, what the templates retain survives, and the endpoint is deleted."""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from rehearsal.assembly import StackTemplate
from rehearsal.deployment import Aws, Deployment
from rehearsal.findings import Check, error_code, summarize


@dataclass(frozen=True)
class Retained:
    path: str
    resource_type: str
    physical_id: str


def retained_resources(d: Deployment) -> list[Retained]:
    """Every resource the templates mark DeletionPolicy Retain, with its physical id (read before the destroy)."""
    return [
        Retained(stack.path_of(logical_id), resource["Type"], d.physical_ids[stack.stack_name][logical_id])
        for stack in d.stacks
        for logical_id, resource in stack.resources.items()
        if resource.get("DeletionPolicy") == "Retain" and d.physical_ids[stack.stack_name].get(logical_id)
    ]


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


def _still_there(aws: Aws, item: Retained) -> str | None:
    """None when the retained resource is there as it should be; otherwise what is wrong."""
    try:
        if item.resource_type == "AWS::S3::Bucket":
            aws("s3").head_bucket(Bucket=item.physical_id)
        elif item.resource_type == "AWS::KMS::Key":
            state = aws("kms").describe_key(KeyId=item.physical_id)["KeyMetadata"]["KeyState"]
            if state != "Enabled":
                return f"{item.path}: key {item.physical_id} is {state}"
        elif item.resource_type == "AWS::Logs::LogGroup":
            groups = aws("logs").describe_log_groups(logGroupNamePrefix=item.physical_id)["logGroups"]
            if not any(g["logGroupName"] == item.physical_id for g in groups):
                return f"{item.path}: log group {item.physical_id} is gone"
        else:
            return f"{item.path}: the rehearsal has no probe for {item.resource_type}"
    except ClientError as err:
        return f"{item.path}: {item.physical_id} is gone ({error_code(err)})"
    return None


def retained_survive(aws: Aws, retained: list[Retained]) -> Check:
    problems = [p for p in (_still_there(aws, item) for item in retained) if p]
    kinds = sorted({r.resource_type for r in retained})
    counts = ", ".join(f"{sum(r.resource_type == k for r in retained)} {k.split('::')[-1]}" for k in kinds)
    keys = " (KMS keys Enabled, not pending deletion)" if "AWS::KMS::Key" in kinds else ""
    return summarize(
        "retained resources survive", problems, f"all {len(retained)} resources marked Retain are there: {counts}{keys}"
    )


def object_survives(aws: Aws, bucket: str, key: str, body: bytes) -> Check:
    try:
        found = aws("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as err:
        return Check("retained data survives", False, f"s3://{bucket}/{key}: {error_code(err)}")
    same = found == body
    return Check(
        "retained data survives",
        same,
        f"s3://{bucket}/{key} is there, byte for byte" if same else f"s3://{bucket}/{key} changed: {found[:80]!r}",
    )


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
