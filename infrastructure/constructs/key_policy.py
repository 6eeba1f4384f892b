"""Customer-managed KMS keys whose policy administers the key, and lets only named principals use it.

CDK's default key policy (the `@aws-cdk/aws-kms:defaultKeyPolicies` behaviour, always on in CDK v2) gives `kms:*` to
the account principal: any IAM policy in the account that allows `kms:Decrypt` on `*` then decrypts this platform's
data. Here the account principal keeps the actions of AWS's key-administrators statement (PutKeyPolicy among them, so
the account can never lock itself out of its key, and CloudFormation can update, rotate, tag and delete it), and the
cryptographic actions go to named principals only, statement by statement.

Grants are use: a grant can give its grantee kms:Decrypt. The default statement's `kms:Create*` includes
kms:CreateGrant, so any principal of the account whose IAM policy allows CreateGrant (PowerUserAccess does) could grant
itself Decrypt and read what the key protects. Here the administrators get CreateAlias instead of Create*, and the
account may create grants only for AWS resources (kms:GrantIsForAWSResource: an AWS service integrated with KMS asks
for the grant on the caller's behalf, as SageMaker does for an endpoint's or a job's volume and Lambda for a
function's environment), still as far as the caller's own IAM policy allows.

AWS KMS Developer Guide, "Default key policy" (key-policy-default.html): the account principal statement prevents
the key becoming unmanageable; the key administrators statement lists the actions below; "Because key administrators
have permission to change the key policy and create grants, they can give themselves and others AWS KMS permissions
not specified in this policy": administration stays with the account's administrators, whose changes CloudTrail
records (PutKeyPolicy), while use needs a statement of its own. PutKeyPolicy stays theirs (the guard against a key
nobody can manage): an administrator can still rewrite the policy to read with the key, but only by a policy change,
visible in the template's drift and in CloudTrail, not by a grant that the key policy never shows.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# The key administrators statement of AWS's default key policy (key-policy-default.html), with kms:CreateAlias for
# its kms:Create* (which on a key means CreateAlias and CreateGrant; CreateKey is not a key's action). No Encrypt,
# Decrypt, ReEncrypt, GenerateDataKey or CreateGrant: the account administers the key, it does not read what the key
# protects, nor grant itself that.
KEY_ADMIN_ACTIONS = [
    "kms:CreateAlias",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
]
# What a principal needs to read and write data under the key (directly or through S3, SageMaker, Lambda).
KEY_USE_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"]
# The condition under which the account may create grants: only an AWS service asking on a principal's behalf, for a
# resource of its own (AWS KMS Developer Guide, "kms:GrantIsForAWSResource").
GRANTS_FOR_AWS_RESOURCES = {"Bool": {"kms:GrantIsForAWSResource": "true"}}


def administered_key(
    scope: Construct,
    construct_id: str,
    *,
    description: str,
    removal_policy: RemovalPolicy | None = None,
    pending_window: Duration | None = None,
) -> kms.Key:
    """A rotated symmetric key whose policy starts with the administrators statement only; add users with
    `allow_principals` or `allow_service`."""
    policy = iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(
                sid="KeyAdministration",
                principals=[iam.AccountRootPrincipal()],
                actions=KEY_ADMIN_ACTIONS,
                resources=["*"],
            ),
            # What CreateGrant the account keeps: grants an AWS service creates for its own resources (SageMaker's
            # volumes, Lambda's environment variables), for callers whose IAM policy allows kms:CreateGrant (the
            # execution roles' allow_volume_encryption, CloudFormation's role).
            iam.PolicyStatement(
                sid="GrantsForAwsResources",
                principals=[iam.AccountRootPrincipal()],
                actions=["kms:CreateGrant"],
                resources=["*"],
                conditions=GRANTS_FOR_AWS_RESOURCES,
            ),
        ]
    )
    extra: dict[str, Any] = {}
    if removal_policy is not None:
        extra["removal_policy"] = removal_policy
    if pending_window is not None:
        extra["pending_window"] = pending_window
    # Given a policy, CDK adds no `kms:*` statement of its own (the defaultKeyPolicies behaviour), and grants to
    # principals of this account land in their IAM policies only: allow_principals makes those count.
    return kms.Key(scope, construct_id, description=description, enable_key_rotation=True, policy=policy, **extra)


def allow_principals(
    key: kms.Key,
    sid: str,
    principal_arns: list[str],
    *,
    actions: list[str] | None = None,
    conditions: dict[str, dict[str, Any]] | None = None,
    account: str | None = None,
) -> None:
    """Let the IAM roles `principal_arns` (ARNs or ARN patterns of this account, or of `account`) use the key, as far
    as their own IAM policies allow.

    The statement names the account principal with an `aws:PrincipalArn` condition rather than the roles
    themselves: KMS refuses a key policy naming a role that does not exist yet, and roles of later stacks (or their
    IAM path) must be allowed before those stacks deploy. The account principal delegates to IAM, so a listed role
    still needs its own allow.
    """
    statement_conditions: dict[str, dict[str, Any]] = {"ArnLike": {"aws:PrincipalArn": principal_arns}}
    for operator, values in (conditions or {}).items():
        statement_conditions.setdefault(operator, {}).update(values)
    added = key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.AccountPrincipal(account) if account else iam.AccountRootPrincipal()],
            actions=actions or KEY_USE_ACTIONS,
            resources=["*"],
            conditions=statement_conditions,
        )
    )
    if not added.statement_added:
        raise ValueError(f"{key.node.path}: an imported key's policy cannot be changed here; {sid} was not added")


def allow_service(
    key: kms.Key,
    sid: str,
    service: str,
    actions: list[str],
    *,
    conditions: dict[str, dict[str, Any]],
) -> None:
    """Let an AWS service principal use the key, only under `conditions` (the confused-deputy guard: the source
    account and resource, or the encryption context the service sets)."""
    if not conditions:
        raise ValueError(f"{key.node.path}: {service} needs a condition naming this account's resources")
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal(service)],
            actions=actions,
            resources=["*"],
            conditions=conditions,
        )
    )
