"""A ready service control policy that keeps the stage's job roles out of everyone's hands but the platform's.

A SageMaker job runs with whatever role its creator passes (iam:PassRole). The roles' trust lets SageMaker assume
them only for the stage account's own jobs of the right kind (execution_role.py), but inside that account anyone
allowed to pass any role to SageMaker (AmazonSageMakerFullAccess allows iam:PassRole on every role whose name holds
"sagemaker", and many admins have iam:PassRole on "*") can start a job of their own as the training or staging role,
and with it write the weights and read the Hugging Face token. The platform cannot take that permission away from
principals it does not own; an organization's SCP can. The storage stack outputs this policy with the roles' real
ARNs (output PassRoleGuardPolicy), for the account owner to attach:

- Deny iam:PassRole on the stage's job roles,
- unless the caller is one of the stage's own roles (its pipelines' role starts the jobs: every role of the training
  and serving stacks has the stage's IAM path, core/naming.py) or the CDK bootstrap's CloudFormation execution role
  (CloudFormation passes the roles to the pipelines and models it creates).

docs/security.md says where it fits in the threat model; docs.aws.amazon.com/organizations/latest/userguide/
orgs_manage_policies_scps_syntax.html gives the SCP grammar (Deny with Condition on aws:PrincipalArn).
"""

from __future__ import annotations

import json

from aws_cdk import Fn, Stack

POLICY_SID = "OnlyThePlatformPassesTheStageJobRoles"
# Stand-ins while the document is serialized: each becomes a Fn::Join part, so the ARNs resolve when the stack deploys.
_TOKEN = "@@value-{}@@"


def pass_role_guard(*, job_role_arns: list[str], stage_role_arns: str, cloudformation_role_arn: str) -> str:
    """The SCP as a CloudFormation string value (Fn::Join over the deploy-time ARNs)."""
    values = [*job_role_arns, stage_role_arns, cloudformation_role_arn]
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": POLICY_SID,
                "Effect": "Deny",
                "Action": "iam:PassRole",
                "Resource": [_TOKEN.format(i) for i in range(len(job_role_arns))],
                "Condition": {
                    "ArnNotLike": {
                        "aws:PrincipalArn": [_TOKEN.format(len(job_role_arns)), _TOKEN.format(len(values) - 1)]
                    }
                },
            }
        ],
    }
    return _join(json.dumps(document, separators=(",", ":")), values)


def stage_role_pattern(stack: Stack, role_path: str) -> str:
    """Every role of the stage's training and serving stacks: they are created under the stage's IAM path."""
    return stack.format_arn(service="iam", region="", resource="role", resource_name=f"{role_path.strip('/')}/*")


def _join(serialized: str, values: list[str]) -> str:
    parts: list[str] = []
    rest = serialized
    for index, value in enumerate(values):
        before, token, rest = rest.partition(_TOKEN.format(index))
        if not token:
            raise ValueError(f"value {index} is not in the document")
        parts += [before, value]
    return Fn.join("", [*parts, rest])
