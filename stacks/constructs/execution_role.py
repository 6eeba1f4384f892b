"""A SageMaker execution role that starts with nothing and gains one narrow statement per `allow_*` call.

No AWS managed policy: `AmazonSageMakerFullAccess` would let a training job read every bucket in the account. Each
statement names its actions and resources, and each wildcard cdk-nag reports is acknowledged next to the call that
made it, with the reason.
"""

from __future__ import annotations

import re

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from stacks.catalog.images import ImageUri

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
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        log_groups: list[str],
        metric_namespaces: list[str],
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            description=description,
            # Confused-deputy guard: only SageMaker acting for this account may assume the role.
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
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
            wildcard=r"Resource::arn:[^:]+:logs:[^:]+:.+:log-group:/aws/sagemaker/[A-Za-z]+:\*",
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

    def allow_write(self, bucket: s3.IBucket, *prefixes: str, delete: bool = False) -> None:
        """Put objects under `prefixes` (and delete them, where SageMaker syncs deletions, e.g. checkpoints)."""
        actions = S3_WRITE_ACTIONS + (["s3:DeleteObject"] if delete else [])
        self._objects("Write", bucket, prefixes, actions)

    def allow_key(self, key: kms.IKey, *, encrypt: bool) -> None:
        """Use the stage's key through S3 (decrypt to read; generate data keys to write)."""
        actions = ["kms:Decrypt", "kms:DescribeKey"] + (["kms:GenerateDataKey"] if encrypt else [])
        sid = "UseKeyReadWrite" if encrypt else "UseKeyRead"
        self.role.add_to_principal_policy(iam.PolicyStatement(sid=sid, actions=actions, resources=[key.key_arn]))

    def allow_volume_encryption(self, key: kms.IKey) -> None:
        """Let SageMaker attach the key to the job's storage volume (a grant for an AWS resource only)."""
        self.role.add_to_principal_policy(
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
        self.role.add_to_principal_policy(
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
        self.role.add_to_principal_policy(
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
        text = part.node.id if isinstance(part, Construct) else str(part)
        out.append("".join(w.capitalize() for w in re.split(r"[^A-Za-z0-9]+", text) if w))
    return "".join(out)


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
