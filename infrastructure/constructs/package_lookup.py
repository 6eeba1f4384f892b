"""Deploy-time lookups of registered model packages: which version is the newest Approved one of a group, and what a
version's description says (where its weights or adapter are). Read when the stack deploys, never at synth: what a
group holds only exists once the fine-tuning pipeline ran and someone approved a version.

Both run through the CDK's AwsCustomResource. The release is part of the newest-approved lookup's physical id: a new
release (every pipeline execution) looks again; a deploy by hand keeps what it found unless RELEASE is given.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

NEWEST_ARN = "ModelPackageSummaryList.0.ModelPackageArn"


def versions_arn(scope: Construct, group: str) -> str:
    """Every version of a model package group of the scope's account and region."""
    return Stack.of(scope).format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*")


def newest_approved(
    scope: Construct, construct_id: str, *, group: str, release: str, log_group: logs.ILogGroup
) -> cr.AwsCustomResource:
    """The newest Approved version of `group` (its ARN at NEWEST_ARN). ListModelPackages has no resource-level
    permissions, hence `*`."""
    return cr.AwsCustomResource(
        scope,
        construct_id,
        on_update=cr.AwsSdkCall(
            service="SageMaker",
            action="listModelPackages",
            parameters={
                "ModelPackageGroupName": group,
                "ModelApprovalStatus": "Approved",
                "SortBy": "CreationTime",
                "SortOrder": "Descending",
                "MaxResults": 1,
            },
            physical_resource_id=cr.PhysicalResourceId.of(f"{group}@{release or 'manual'}"),
            output_paths=[NEWEST_ARN],
        ),
        policy=cr.AwsCustomResourcePolicy.from_statements(
            [iam.PolicyStatement(actions=["sagemaker:ListModelPackages"], resources=["*"])]
        ),
        install_latest_aws_sdk=False,
        log_group=log_group,
    )


def described(
    scope: Construct,
    construct_id: str,
    *,
    package_arn: str,
    readable: list[str],
    output_path: str,
    log_group: logs.ILogGroup,
) -> cr.AwsCustomResource:
    """DescribeModelPackage of `package_arn`, returning `output_path` of the answer; `readable` are the package ARNs
    (or the group's versions) the lookup may describe."""
    return cr.AwsCustomResource(
        scope,
        construct_id,
        on_update=cr.AwsSdkCall(
            service="SageMaker",
            action="describeModelPackage",
            parameters={"ModelPackageName": package_arn},
            physical_resource_id=cr.PhysicalResourceId.of(package_arn),
            output_paths=[output_path],
        ),
        policy=cr.AwsCustomResourcePolicy.from_statements(
            [iam.PolicyStatement(actions=["sagemaker:DescribeModelPackage"], resources=readable)]
        ),
        install_latest_aws_sdk=False,
        log_group=log_group,
    )
