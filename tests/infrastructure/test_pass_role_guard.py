"""The storage stack's PassRoleGuardPolicy output: a service control policy, with the roles' deploy-time ARNs, that
denies passing the stage's job roles to anyone but the stage's own roles and CloudFormation's execution role."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Environment, Stack

from core.config import load_config
from infrastructure.pass_role_guard import POLICY_SID, pass_role_guard, stage_role_pattern
from tests.cdk_assembly import REPO, render

PROJECT = load_config(REPO / "config" / "default.yaml").project


def resolved(stack: Stack, value: str) -> dict:
    """The output's Fn::Join with every part rendered, parsed as the JSON the account owner attaches."""
    joined = stack.resolve(value)["Fn::Join"]
    return json.loads(joined[0].join(str(render(part)) for part in joined[1]))


def test_the_policy_denies_passing_the_job_roles_to_everyone_but_the_platform():
    stack = Stack(App(), "Storage", env=Environment(account="123456789012", region="eu-west-1"))
    document = resolved(
        stack,
        pass_role_guard(
            job_role_arns=["arn:aws:iam::123456789012:role/training", "arn:aws:iam::123456789012:role/hosting"],
            stage_role_arns=stage_role_pattern(stack, "/llmp/prod/"),
            cloudformation_role_arn="arn:aws:iam::123456789012:role/cdk-hnb659fds-cfn-exec-role",
        ),
    )
    (statement,) = document["Statement"]
    assert statement["Sid"] == POLICY_SID and statement["Effect"] == "Deny" and statement["Action"] == "iam:PassRole"
    assert statement["Resource"] == [
        "arn:aws:iam::123456789012:role/training",
        "arn:aws:iam::123456789012:role/hosting",
    ]
    assert statement["Condition"] == {
        "ArnNotLike": {
            "aws:PrincipalArn": [
                "arn:<AWS::Partition>:iam::123456789012:role/llmp/prod/*",
                "arn:aws:iam::123456789012:role/cdk-hnb659fds-cfn-exec-role",
            ]
        }
    }


@pytest.mark.parametrize("stage", ["dev", "staging", "prod"])
def test_every_stage_outputs_the_policy_over_its_own_job_roles(assembly, stage):
    outputs = assembly.template(stage, "Storage")["Outputs"]
    joined = outputs["PassRoleGuardPolicy"]["Value"]["Fn::Join"]
    rendered = joined[0].join(str(render(part)) for part in joined[1])
    document = json.loads(rendered)
    (statement,) = document["Statement"]
    assert statement["Resource"] == [
        "<TrainingRole.Arn>",
        "<StagingRole.Arn>",
        "<RegistryRole.Arn>",
        "<HostingRole.Arn>",
    ]
    principals = statement["Condition"]["ArnNotLike"]["aws:PrincipalArn"]
    assert principals[0].endswith(f":role/{PROJECT}/{stage}/*")
    assert principals[1].startswith("arn:aws:iam::<AWS::AccountId>:role/cdk-hnb659fds-cfn-exec-role-")
