"""The promotion custom resource's Lambda entry points, for aws_cdk.custom_resources.Provider with is_complete.

ResourceProperties (strings, as CloudFormation passes them):

    SourceGroupArn   the source stage's model package group ARN (another account's works through its resource policy)
    SourceStage      the source stage's name, for the hints in refusals (llmp approve <version> --stage <stage>)
    Version          the source version's number; "" for the group's newest Approved version
    TargetGroup      the target stage's model package group (name or ARN), where the promoted version is registered
    TargetBucket     the target stage's models bucket, where the weights are copied
    DestinationRoot  the key prefix of promoted copies, e.g. "promoted/" (the copy: <root><group>/<version>/)
    ImageUri         the serving image the target stage runs (its own region's ECR)
    Release          what promotes it, recorded in the package's description and metadata ("" records none)
    SourceRegion     the source group's and bucket's region
    TargetRegion     the target group's and bucket's region

on_event picks the source version and returns PhysicalResourceId = the destination s3://<bucket>/<prefix>/ (the same
version keeps the same id, so an update that finds it replaces nothing) and Data {SourcePackageArn}. Delete is a no-op:
promoted copies and packages are kept, as registered versions are. is_complete copies until the Lambda has 120 s left,
answering {"IsComplete": False} while files remain (the Provider calls it again), then writes the record, registers
and answers {"IsComplete": True, "Data": {PackageArn, SourcePackageArn, SourceVersion, Digest, WeightsUri}}. The
Provider passes is_complete the request merged with on_event's answer, so it copies exactly the version on_event chose.
Progress lines go to CloudWatch Logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import boto3
from botocore.config import Config

from promotion import promote

REQUIRED = (
    "SourceGroupArn",
    "SourceStage",
    "TargetGroup",
    "TargetBucket",
    "ImageUri",
    "SourceRegion",
    "TargetRegion",
)
OPTIONAL = ("Version", "DestinationRoot", "Release")
SAFETY_MARGIN_S = 120  # left to the Lambda after the last copy starts: the copy in flight, the record, the register
clock = time.monotonic  # replaced in tests
# A CopyObject of up to 5 GiB can take minutes; S3 keeps its connection alive meanwhile, and an error inside its 200
# is retried by botocore. Standard retries back off on throttling.
CLIENT_CONFIG = Config(read_timeout=300, retries={"mode": "standard", "max_attempts": 5})


@dataclass(frozen=True)
class Clients:
    source_sagemaker: object
    source_s3: object
    target_s3: object  # issues the copies: CopyObject runs in the destination bucket's region
    target_sagemaker: object


def make_clients(properties: dict[str, str]) -> Clients:
    """Clients per region, each with the Lambda's own credentials."""
    source, target = properties["SourceRegion"], properties["TargetRegion"]
    return Clients(
        source_sagemaker=boto3.client("sagemaker", region_name=source, config=CLIENT_CONFIG),
        source_s3=boto3.client("s3", region_name=source, config=CLIENT_CONFIG),
        target_s3=boto3.client("s3", region_name=target, config=CLIENT_CONFIG),
        target_sagemaker=boto3.client("sagemaker", region_name=target, config=CLIENT_CONFIG),
    )


def read_properties(event: dict) -> dict[str, str]:
    """The ResourceProperties this resource takes, as strings; a PromotionError naming any required one missing."""
    given = event.get("ResourceProperties", {})
    missing = [name for name in REQUIRED if not given.get(name)]
    if missing:
        raise promote.PromotionError(
            f"the promotion resource lacks {', '.join(missing)}: set them in its properties (the stage's promotion "
            "construct)"
        )
    return {name: str(given.get(name, "")) for name in (*REQUIRED, *OPTIONAL)}


def planned(clients: Clients, properties: dict[str, str], package: dict) -> promote.Plan:
    """The copy of `package`'s weights into the target bucket, its source checked against its record."""
    return promote.plan(
        clients.source_s3,
        promote.source_of(package),
        target_bucket=properties["TargetBucket"],
        destination_root=properties["DestinationRoot"],
    )


def on_event(event: dict, context) -> dict:
    """Create/Update: choose the source version; Delete: keep everything."""
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    properties = read_properties(event)
    clients = make_clients(properties)
    package = promote.resolve_package(
        clients.source_sagemaker,
        group_arn=properties["SourceGroupArn"],
        version=properties["Version"],
        stage=properties["SourceStage"],
    )
    plan = planned(clients, properties, package)
    print(f"promote: version {plan.source.version} of {plan.source.group} ({plan.source.arn}) into {plan.uri}")
    return {"PhysicalResourceId": plan.uri, "Data": {"SourcePackageArn": plan.source.arn}}


def is_complete(event: dict, context) -> dict:
    """Copy until the deadline; once every file is there, record and register."""
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    deadline = clock() + context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_S
    properties = read_properties(event)
    clients = make_clients(properties)
    source_arn = event["Data"]["SourcePackageArn"]  # on_event's choice, never looked up again
    package = promote.pinned(clients.source_sagemaker, source_arn, stage=properties["SourceStage"])
    plan = planned(clients, properties, package)
    if promote.copy_until(clients.target_s3, plan, deadline=deadline, clock=clock):
        return {"IsComplete": False}  # the Provider allows no Data here
    result = promote.finish(
        clients.target_s3,
        clients.target_sagemaker,
        plan,
        target_group=properties["TargetGroup"],
        image_uri=properties["ImageUri"],
        release=properties["Release"],
    )
    print(f"promote: {result.weights_uri} registered as {result.package_arn} ({result.digest})")
    return {
        "IsComplete": True,
        "Data": {
            "PackageArn": result.package_arn,
            "SourcePackageArn": result.source_package_arn,
            "SourceVersion": str(result.source_version),
            "Digest": result.digest,
            "WeightsUri": result.weights_uri,
        },
    }
