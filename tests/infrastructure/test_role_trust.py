"""Who may assume the stage's SageMaker roles: SageMaker acting for the stage's account, and, for the job roles, only
for the kinds of job the role exists for (aws:SourceArn), so a training or staging role cannot run a notebook, an
endpoint or another kind of job of the account."""

from __future__ import annotations

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from infrastructure.constructs.execution_role import SageMakerExecutionRole
from tests.cdk_assembly import Assembly, render, short_id

STAGES = ["dev", "staging", "prod"]


def trust(assembly: Assembly, stage: str, role: str) -> dict:
    roles = {short_id(k): v for k, v in assembly.resources(stage, "Storage", "AWS::IAM::Role").items()}
    (found,) = [v for k, v in roles.items() if k.startswith(role)]
    (statement,) = found["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    return render(statement["Condition"])


@pytest.mark.parametrize("stage", STAGES)
def test_the_training_role_is_assumed_only_for_the_accounts_training_and_processing_jobs(assembly, stage):
    conditions = trust(assembly, stage, "TrainingRole")
    assert conditions["StringEquals"] == {"aws:SourceAccount": "<AWS::AccountId>"}
    jobs = [_joined(job) for job in conditions["ArnLike"]["aws:SourceArn"]]
    assert [job.rsplit(":", 1)[1] for job in jobs] == ["training-job/*", "processing-job/*"]
    assert all(job.startswith("arn:aws:sagemaker:us-east-1:<AWS::AccountId>:") for job in jobs)


def test_a_role_for_processing_jobs_alone_names_only_them():
    """The staging role's shape (it exists only for gated models): processing jobs of its own account and region."""
    stack = Stack(App(), "Roles", env=Environment(account="123456789012", region="eu-west-1"))
    SageMakerExecutionRole(
        stack,
        "Staging",
        description="d",
        log_groups=["/aws/sagemaker/ProcessingJobs"],
        metric_namespaces=["/aws/sagemaker/ProcessingJobs"],
        job_types=("processing-job",),
    )
    (role,) = Template.from_stack(stack).find_resources("AWS::IAM::Role").values()
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    conditions = statement["Condition"]
    assert conditions["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert [_joined(job) for job in conditions["ArnLike"]["aws:SourceArn"]] == [
        "arn:<AWS::Partition>:sagemaker:eu-west-1:123456789012:processing-job/*"
    ]


@pytest.mark.parametrize("stage", STAGES)
def test_the_hosting_role_keeps_the_account_condition(assembly, stage):
    assert trust(assembly, stage, "HostingRole") == {"StringEquals": {"aws:SourceAccount": "<AWS::AccountId>"}}


def _joined(value) -> str:
    """An ARN the template builds with Fn::Join, as one string of its rendered parts."""
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(render(part)) for part in parts)
    return str(value)
