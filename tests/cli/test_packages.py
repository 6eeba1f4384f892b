"""`llmp approve` and `llmp reject` against moto's model packages (UpdateModelPackage)."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import client, register_package


def approval(arn: str) -> dict:
    return client("sagemaker").describe_model_package(ModelPackageName=arn)


def test_approve_by_version_number_approves_that_version_with_the_reason(cli, deployed):
    register_package(deployed.group)
    second = register_package(deployed.group)

    result = cli("approve", "2", "--reason", "perplexity 12.1, reviewed by ana")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "version 2 of llm-platform-dev: PendingManualApproval -> Approved"
    package = approval(second)
    assert package["ModelApprovalStatus"] == "Approved"
    assert package["ApprovalDescription"] == "perplexity 12.1, reviewed by ana"


def test_reject_by_arn_json(cli, deployed):
    arn = register_package(deployed.group)

    result = cli("reject", arn, "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "package": arn,
        "group": deployed.group,
        "version": 1,
        "status": "Rejected",
        "previous_status": "PendingManualApproval",
        "changed": True,
    }
    assert approval(arn)["ModelApprovalStatus"] == "Rejected"


def test_approving_an_approved_version_changes_nothing(cli, deployed):
    register_package(deployed.group, status="Approved")

    result = cli("approve", "1")

    assert result.exit_code == 0, result.output
    assert "was already Approved; nothing changed" in result.stdout


@pytest.mark.parametrize(
    ("package", "code", "message"),
    [
        (
            "7",
            3,
            "llmp: llm-platform-dev has no version 7: llmp status --stage dev lists the versions awaiting approval",
        ),
        ("latest", 2, "llmp: 'latest' is neither a version number nor a model package ARN"),
    ],
)
def test_approve_names_what_it_cannot_find(cli, deployed, package, code, message):
    register_package(deployed.group)

    result = cli("approve", package)

    assert result.exit_code == code, result.output
    assert result.stderr.strip().startswith(message)


def test_approve_refuses_a_package_of_another_stage(cli, deployed):
    sagemaker = client("sagemaker")
    sagemaker.create_model_package_group(ModelPackageGroupName="llm-platform-staging")
    other = register_package("llm-platform-staging")

    result = cli("approve", other)

    assert result.exit_code == 2, result.output
    assert "is in group llm-platform-staging, not stage dev's llm-platform-dev" in result.stderr
    assert approval(other)["ModelApprovalStatus"] == "PendingManualApproval"
