"""The stage's stacks as deployed on the emulator, and boto3 clients that reach only the emulator."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3

from rehearsal.assembly import Resolver, StackTemplate, Unresolvable
from rehearsal.cdk_cli import FAKE_CREDENTIALS


class Aws:
    """boto3 clients that reach only the emulator (fake credentials, explicit endpoint)."""

    def __init__(self, endpoint_url: str, region: str) -> None:
        self._session = boto3.Session(
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=region,
        )
        self._endpoint_url = endpoint_url
        self._clients: dict[str, Any] = {}

    def __call__(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service, endpoint_url=self._endpoint_url)
        return self._clients[service]


def partition_of(region: str) -> tuple[str, str]:
    """(partition, URL suffix) of a region."""
    if region.startswith("cn-"):
        return "aws-cn", "amazonaws.com.cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov", "amazonaws.com"
    return "aws", "amazonaws.com"


@dataclass
class Deployment:
    """The stage's stacks as deployed: physical ids and exports, read while the stacks exist."""

    aws: Aws
    stacks: list[StackTemplate]
    account: str
    region: str
    physical_ids: dict[str, dict[str, str]]  # stack name -> logical id -> physical id
    exports: dict[str, str]

    @classmethod
    def read(cls, aws: Aws, stacks: list[StackTemplate], *, account: str, region: str) -> Deployment:
        cloudformation = aws("cloudformation")
        physical_ids = {}
        for stack in stacks:
            pages = cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack.stack_name)
            physical_ids[stack.stack_name] = {
                r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
                for page in pages
                for r in page["StackResourceSummaries"]
            }
        exports = {
            e["Name"]: e["Value"]
            for page in cloudformation.get_paginator("list_exports").paginate()
            for e in page["Exports"]
        }
        return cls(aws, stacks, account, region, physical_ids, exports)

    def resources(self, resource_type: str) -> Iterator[tuple[StackTemplate, str, dict[str, Any], str]]:
        """(stack, logical id, template resource, physical id) of every resource of `resource_type`."""
        for stack in self.stacks:
            for logical_id, resource in stack.of_type(resource_type).items():
                yield stack, logical_id, resource, self.physical_ids[stack.stack_name].get(logical_id, "")

    def resolver(self, stack: StackTemplate) -> Resolver:
        partition, url_suffix = partition_of(self.region)
        return Resolver(
            physical_ids=self.physical_ids[stack.stack_name],
            types={lid: r["Type"] for lid, r in stack.resources.items()},
            exports=self.exports,
            pseudo={
                "AWS::AccountId": self.account,
                "AWS::Region": self.region,
                "AWS::Partition": partition,
                "AWS::URLSuffix": url_suffix,
                "AWS::StackName": stack.stack_name,
            },
            attribute=self._attribute,
        )

    def _attribute(self, resource_type: str, physical_id: str, attribute: str) -> str:
        """Fn::GetAtt for the resource types the stacks reference, read from the emulator."""
        partition, _ = partition_of(self.region)
        readers = {
            ("AWS::S3::Bucket", "Arn"): lambda: f"arn:{partition}:s3:::{physical_id}",
            ("AWS::KMS::Key", "Arn"): lambda: self.aws("kms").describe_key(KeyId=physical_id)["KeyMetadata"]["Arn"],
            ("AWS::IAM::Role", "Arn"): lambda: self.aws("iam").get_role(RoleName=physical_id)["Role"]["Arn"],
            ("AWS::Lambda::Function", "Arn"): lambda: self.aws("lambda").get_function_configuration(
                FunctionName=physical_id
            )["FunctionArn"],
            # CloudFormation's value ends in ':*'; moto's does not (see LOG_GROUP_ARN), and moto's is what the
            # deployed policies hold.
            ("AWS::Logs::LogGroup", "Arn"): lambda: (
                f"arn:{partition}:logs:{self.region}:{self.account}:log-group:{physical_id}"
            ),
            ("AWS::SNS::Topic", "TopicArn"): lambda: physical_id,
            ("AWS::SageMaker::Model", "ModelName"): lambda: physical_id.rsplit("/", 1)[-1],
            ("AWS::SageMaker::EndpointConfig", "EndpointConfigName"): lambda: physical_id.rsplit("/", 1)[-1],
            ("AWS::SageMaker::Endpoint", "EndpointName"): lambda: physical_id.rsplit("/", 1)[-1],
        }
        reader = readers.get((resource_type, attribute))
        if reader is None:
            raise Unresolvable(f"Fn::GetAtt {attribute} of {resource_type} is not read by the rehearsal")
        return reader()
