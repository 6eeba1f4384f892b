"""A SageMaker execution role that starts with nothing and gains one narrow statement per `allow_*` call.

No AWS managed policy: `AmazonSageMakerFullAccess` would let a training job read every bucket in the account. Each
statement names its actions and resources, and each wildcard cdk-nag reports is acknowledged next to the call that
made it, with the reason.
"""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from core.catalog.images import ImageUri
from infrastructure import construct_reads

# What ECR needs to pull one image (the auth token is account-wide by design).
ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
S3_READ_ACTIONS = ["s3:GetObject"]
S3_WRITE_ACTIONS = ["s3:AbortMultipartUpload", "s3:PutObject"]
LOG_ACTIONS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]


class SageMakerExecutionRole(Construct):
    """The role SageMaker jobs or endpoints assume.

    Args:
        description: what runs with this role; shown in the IAM console.
        log_groups: CloudWatch log group names the jobs write to (e.g. /aws/sagemaker/TrainingJobs).
        metric_namespaces: CloudWatch namespaces the jobs publish to (e.g. /aws/sagemaker/TrainingJobs).
        job_types: the kinds of SageMaker job that may assume the role (training-job, processing-job): SageMaker
            names the job in aws:SourceArn when it assumes the role for one, so a training role cannot be used by
            a notebook, an endpoint or another kind of job. Empty: any SageMaker resource of this account.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        log_groups: list[str],
        metric_namespaces: list[str],
        job_types: tuple[str, ...] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            description=description,
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com", conditions=_trust_conditions(stack, job_types)),
        )
        self._statement(
            "WriteLogs",
            LOG_ACTIONS,
            [
                stack.format_arn(
                    service="logs",
                    resource="log-group",
                    resource_name=f"{g}:*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
                for g in log_groups
            ],
            reason="SageMaker creates one log stream per job or instance inside these log groups; stream names are "
            "only known at run time",
            wildcard=r"Resource::arn:[^:]+:logs:[^:]+:.+:log-group:/aws/sagemaker/[A-Za-z]+(/[A-Za-z0-9-]+\*?)?:\*",
        )
        self._statement(
            "PublishMetrics",
            ["cloudwatch:PutMetricData"],
            ["*"],
            conditions={"StringLike": {"cloudwatch:namespace": metric_namespaces}},
            reason="PutMetricData supports no resource-level permissions; the statement is limited by a condition to "
            "SageMaker's own metric namespaces",
            wildcard=r"Resource::\*",
        )
        self._statement(
            "EcrLogin",
            ["ecr:GetAuthorizationToken"],
            ["*"],
            reason="GetAuthorizationToken supports no resource-level permissions; image pulls are limited to named "
            "repositories by the PullImages statements",
            wildcard=r"Resource::\*",
        )
        self._pull_statements = 0

    def allow_read(self, bucket: s3.IBucket, *prefixes: str) -> None:
        """Get objects under `prefixes`, and list the bucket only under them."""
        self._objects("Read", bucket, prefixes, S3_READ_ACTIONS)
        self._statement(
            f"List{_name(bucket)}{_name(*prefixes)}",
            ["s3:ListBucket"],
            [bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
        )

    def allow_read_versions(self, bucket: s3.IBucket, *prefixes: str) -> None:
        """Read a given version of objects under `prefixes` (HeadObject and CopyObject's source with a VersionId)."""
        self._objects("ReadVersions", bucket, prefixes, ["s3:GetObjectVersion"])

    def allow_write(self, bucket: s3.IBucket, *prefixes: str, delete: bool = False) -> None:
        """Put objects under `prefixes` (and delete them, where SageMaker syncs deletions, e.g. checkpoints)."""
        actions = S3_WRITE_ACTIONS + (["s3:DeleteObject"] if delete else [])
        self._objects("Write", bucket, prefixes, actions)

    def allow_key(self, key: kms.IKey, *, encrypt: bool) -> None:
        """Use the stage's key through S3 (decrypt to read; generate data keys to write)."""
        actions = ["kms:Decrypt", "kms:DescribeKey"] + (["kms:GenerateDataKey"] if encrypt else [])
        sid = "UseKeyReadWrite" if encrypt else "UseKeyRead"
        self.role.add_to_policy(iam.PolicyStatement(sid=sid, actions=actions, resources=[key.key_arn]))

    def allow_volume_encryption(self, key: kms.IKey) -> None:
        """Let SageMaker attach the key to the job's storage volume (a grant for an AWS resource only)."""
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="EncryptVolumes",
                actions=["kms:CreateGrant"],
                resources=[key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )

    def allow_pull(self, *image_uris: str) -> None:
        """Pull these container images, and no other."""
        partition = Stack.of(self).partition
        arns = sorted({ImageUri.parse(u).repository_arn(partition) for u in image_uris})
        self._pull_statements += 1
        self.role.add_to_policy(
            iam.PolicyStatement(sid=f"PullImages{self._pull_statements}", actions=ECR_PULL_ACTIONS, resources=arns)
        )

    # -----------------------------------------------------------------------------------------------------------

    def _objects(self, verb: str, bucket: s3.IBucket, prefixes: tuple[str, ...], actions: list[str]) -> None:
        for prefix in prefixes:
            if not prefix.endswith("/"):
                raise ValueError(f"S3 prefix {prefix!r} must end with '/'; a bare prefix would also match siblings")
        self._statement(
            f"{verb}{_name(bucket)}{_name(*prefixes)}",
            actions,
            [bucket.arn_for_objects(f"{p}*") for p in prefixes],
            reason="object keys under this prefix are created at run time (one per job, checkpoint or file); the "
            "statement is limited to this bucket and prefix",
            wildcard=r"Resource::<.*\.Arn>/(" + "|".join(re.escape(p) for p in prefixes) + r")\*",
        )

    def _statement(
        self,
        sid: str,
        actions: list[str],
        resources: list[str],
        *,
        conditions: dict | None = None,
        reason: str | None = None,
        wildcard: str | None = None,
    ) -> None:
        # add_to_policy, not add_to_principal_policy: the same statement added, and a bool back instead of a struct
        # that jsii reads field by field (two more round trips to node per statement).
        self.role.add_to_policy(
            iam.PolicyStatement(sid=sid, actions=actions, resources=resources, conditions=conditions)
        )
        if wildcard:
            NagSuppressions.add_resource_suppressions(
                self.role,
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason=reason,
                        applies_to=[RegexAppliesTo(regex=f"/^{wildcard}$/")],
                    )
                ],
                apply_to_children=True,
            )


def _name(*parts: object) -> str:
    """A statement id fragment from construct ids or prefixes: `raw/` -> `Raw`."""
    out = []
    for part in parts:
        text = construct_reads.construct_id(part) if isinstance(part, Construct) else str(part)
        out.append("".join(w.capitalize() for w in re.split(r"[^A-Za-z0-9]+", text) if w))
    return "".join(out)


# What SageMaker documents for an execution role whose Model (or job) runs in a VPC (sagemaker-roles.html, "CreateModel
# API: Execution Role Permissions"). The Describe actions support no resource-level permissions.
VPC_DESCRIBE_ACTIONS = [
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
]


def vpc_access_policy(
    scope: Construct, construct_id: str, *, role: iam.IRole, vpc: Any, jobs: bool = False, also: tuple = ()
) -> iam.Policy:
    """SageMaker's network interfaces for `role`'s instances (and those of the roles in `also`).

    For a Model (hosting), in `vpc`'s subnets and security groups only: CreateNetworkInterface is limited to the
    configured subnets and security groups (and the new interface, whose id is not known before); handing an
    interface to SageMaker's instances and deleting it, to interfaces in those subnets, for SageMaker only
    (ec2:AuthorizedService, as SageMaker's own service-role policy limits it).

    For training and processing jobs (`jobs`), the same actions with no subnet or security-group scoping: SageMaker
    documents them unscoped for a job in a VPC (sagemaker-roles.html, CreateProcessingJob and CreateTrainingJob API:
    Execution Role Permissions), and a job's interfaces are created while the job starts, where a policy scoped
    tighter than AWS documents fails the job rather than the deploy; nothing on AWS has shown the subnet scoping
    passes those checks. What stays: this account and region's interfaces, subnets and security groups, and
    interface permissions for SageMaker only.
    """
    policy = iam.Policy(scope, construct_id, roles=[role, *also], statements=_vpc_access_statements(scope, vpc, jobs))
    _suppress_vpc_access_findings(policy, jobs)
    return policy


def _vpc_access_statements(scope: Construct, vpc: Any, jobs: bool) -> list[iam.PolicyStatement]:
    """Describe the network; create interfaces in the subnets and security groups (any of them, for jobs); hand
    them to SageMaker, delete them and revoke their permissions."""
    stack = Stack.of(scope)

    def ec2(resource: str, name: str) -> str:
        return stack.format_arn(service="ec2", resource=resource, resource_name=name)

    subnets = [ec2("subnet", "*")] if jobs else [ec2("subnet", s) for s in vpc.subnet_ids]
    groups = [ec2("security-group", "*")] if jobs else [ec2("security-group", g) for g in vpc.security_group_ids]
    in_subnets = {} if jobs else {"ArnEquals": {"ec2:Subnet": subnets}}
    interfaces = ec2("network-interface", "*")
    return [
        iam.PolicyStatement(sid="DescribeNetwork", actions=VPC_DESCRIBE_ACTIONS, resources=["*"]),
        iam.PolicyStatement(
            sid="CreateInterfaces",
            actions=["ec2:CreateNetworkInterface"],
            resources=[*subnets, *groups, interfaces],
        ),
        iam.PolicyStatement(
            sid="HandInterfacesToSageMaker",
            actions=["ec2:CreateNetworkInterfacePermission"],
            resources=[interfaces],
            conditions={"StringEquals": {"ec2:AuthorizedService": "sagemaker.amazonaws.com"}, **in_subnets},
        ),
        iam.PolicyStatement(
            sid="DeleteInterfaces",
            actions=["ec2:DeleteNetworkInterface"],
            resources=[interfaces],
            conditions=in_subnets or None,
        ),
        # The request names a permission id, but IAM authorizes it on the interface (the Service Authorization
        # Reference lists network-interface as its resource type), so not on "*": checkov's CKV_AWS_109.
        iam.PolicyStatement(
            sid="RevokeInterfacePermissions",
            actions=["ec2:DeleteNetworkInterfacePermission"],
            resources=[interfaces],
        ),
    ]


def _suppress_vpc_access_findings(policy: iam.Policy, jobs: bool) -> None:
    NagSuppressions.add_resource_suppressions(
        policy,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="EC2's Describe actions take no resource; a network interface's id is "
                "only known once SageMaker created it, so the interface statements name every interface of the "
                "account and region" + ("" if jobs else ", limited by condition to the configured subnets"),
                applies_to=[
                    "Resource::*",
                    RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:ec2:.*:network-interface\/\*$/"),
                ],
            ),
            *(
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason="Training and processing jobs in a VPC: SageMaker documents the network-interface "
                        "actions unscoped for a job's execution role; the statement names this account and region's "
                        "subnets and security groups",
                        applies_to=[
                            RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:ec2:.*:(subnet|security-group)\/\*$/")
                        ],
                    )
                ]
                if jobs
                else []
            ),
        ],
    )


def event_rule_role(scope: Construct, construct_id: str, *, rule_name: str, description: str) -> iam.Role:
    """The role EventBridge assumes for the targets of the rule `rule_name` (in this stack's account and region),
    and for no other rule: aws:SourceAccount and aws:SourceArn in its trust policy, EventBridge's confused-deputy
    guard. The rule must carry that name: its ARN cannot be referenced here, since the rule refers to this role."""
    stack = Stack.of(scope)
    return iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.ServicePrincipal(
            "events.amazonaws.com",
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnEquals": {
                    "aws:SourceArn": stack.format_arn(service="events", resource="rule", resource_name=rule_name)
                },
            },
        ),
    )


def _trust_conditions(stack: Stack, job_types: tuple[str, ...]) -> dict:
    """Confused-deputy guard: only SageMaker acting for this account may assume the role, and, for job roles, only
    for a job of the named kinds (docs.aws.amazon.com/sagemaker/latest/dg/security-confused-deputy-prevention.html:
    `"aws:SourceArn": "arn:aws:sagemaker:us-west-2:123456789012:training-job/*"` in the execution role's trust)."""
    conditions: dict = {"StringEquals": {"aws:SourceAccount": stack.account}}
    if job_types:
        jobs = [stack.format_arn(service="sagemaker", resource=job, resource_name="*") for job in job_types]
        conditions["ArnLike"] = {"aws:SourceArn": jobs}
    return conditions
