"""`llmp approve` and `llmp reject` against moto's model packages (UpdateModelPackage)."""

from __future__ import annotations

import json

import pytest

from cli.commands import data
from tests.cli.conftest import ACCOUNT, CONFIG, client, register_package


def approval(arn: str) -> dict:
    return client("sagemaker").describe_model_package(ModelPackageName=arn)


def test_approve_by_version_number_approves_that_version_with_the_reason(cli, deployed):
    register_package(deployed.group)
    second = register_package(deployed.group)

    result = cli("approve", "2", "--reason", "perplexity 12.1, reviewed by ana")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "version 2 of llm-platform-dev: PendingManualApproval -> Approved",
        "stages that serve the newest approved version serve it from their next deploy: make deploy STAGE=dev",
    ]
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
        "message": None,
        "starts_release_of": None,
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


# --- guarded changes: a retained stage, or one whose approvals start releases (issue 27) --------------------------

# dev keeps its data: the conftest config without `removal_policy: destroy`.
RETAINED = CONFIG.replace("    removal_policy: destroy\n", "")
# dev's approvals start a release: the promotion pipeline triggers on approvals of the groups it watches.
RELEASING = (
    CONFIG.replace("  dev:\n", f'  dev:\n    account: "{ACCOUNT}"\n')
    + """
pipeline:
  account: "111111111111"
  region: us-east-1
  source:
    connection_arn: arn:aws:codeconnections:us-east-1:111111111111:connection/8a7e2b40-1f0c-4f3e-9c1e-2f6d5e4c3b2a
    repository: example-org/llm-platform
    branch: main
"""
)


@pytest.fixture
def retained(tmp_path):
    path = tmp_path / "retained.yaml"
    path.write_text(RETAINED)
    return str(path)


@pytest.fixture
def releasing(tmp_path):
    path = tmp_path / "releasing.yaml"
    path.write_text(RELEASING)
    return str(path)


def test_rejecting_an_approved_version_of_a_retained_stage_needs_a_message(cli, deployed, retained):
    arn = register_package(deployed.group, status="Approved")

    result = cli("reject", "1", "--config", retained, "--yes")

    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "llmp: version 1 of llm-platform-dev: Approved -> Rejected: stage dev keeps its data (removal_policy: retain); "
        "endpoints that deploy the latest approved version will serve another one on their next deploy: say why with "
        '-m/--message "..."; nothing changed'
    )
    assert approval(arn)["ModelApprovalStatus"] == "Approved"


def test_a_guarded_change_off_a_terminal_needs_yes(cli, deployed, retained):
    arn = register_package(deployed.group, status="Approved")

    result = cli("reject", "1", "--config", retained, "-m", "regressed on the eval set")

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("llmp: version 1 of llm-platform-dev: Approved -> Rejected: stage dev keeps its")
    assert result.stderr.strip().endswith(
        ": not asked, as this is not a terminal; pass --yes to go on; nothing changed"
    )
    assert approval(arn)["ModelApprovalStatus"] == "Approved"


def test_a_guarded_change_with_yes_records_the_message(cli, deployed, retained):
    arn = register_package(deployed.group, status="Approved")

    result = cli("reject", "1", "--config", retained, "--message", "regressed on the eval set", "--yes")

    assert result.exit_code == 0, result.output
    package = approval(arn)
    assert package["ModelApprovalStatus"] == "Rejected"
    assert package["ApprovalDescription"] == "regressed on the eval set"


@pytest.mark.parametrize(("answer", "code", "status"), [("y\n", 0, "Rejected"), ("n\n", 1, "Approved")])
def test_a_guarded_change_on_a_terminal_asks_first(cli, deployed, retained, monkeypatch, answer, code, status):
    monkeypatch.setattr(data, "on_terminal", lambda: True)
    arn = register_package(deployed.group, status="Approved")

    result = cli("reject", "1", "--config", retained, "-m", "regressed", input=answer)

    assert result.exit_code == code, result.output
    assert "version 1 of llm-platform-dev: Approved -> Rejected: stage dev keeps its data" in result.stderr
    assert "next deploy. Go on? [y/N]" in result.stderr
    assert approval(arn)["ModelApprovalStatus"] == status


def test_an_approval_that_starts_a_release_says_so_and_is_guarded(cli, deployed, releasing):
    arn = register_package(deployed.group)

    refused = cli("approve", "1", "--config", releasing, "-m", "perplexity 11.9")

    assert refused.exit_code == 2, refused.output
    assert "this approval starts a release of llm-platform-promotion" in refused.stderr
    assert approval(arn)["ModelApprovalStatus"] == "PendingManualApproval"

    done = cli("approve", "1", "--config", releasing, "-m", "perplexity 11.9", "--yes")

    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        "version 1 of llm-platform-dev: PendingManualApproval -> Approved",
        "this approval starts a release of llm-platform-promotion",
    ]
    assert approval(arn)["ApprovalDescription"] == "perplexity 11.9"


def test_rejecting_a_pending_version_of_a_retained_stage_is_not_guarded(cli, deployed, retained):
    arn = register_package(deployed.group)

    result = cli("reject", "1", "--config", retained)

    assert result.exit_code == 0, result.output
    assert approval(arn)["ModelApprovalStatus"] == "Rejected"


def test_rejecting_an_approved_version_where_approvals_start_releases_is_guarded(cli, deployed, releasing):
    arn = register_package(deployed.group, status="Approved")

    result = cli("reject", "1", "--config", releasing)

    assert result.exit_code == 2, result.output
    assert "its approvals start releases of llm-platform-promotion" in result.stderr
    assert "-m/--message" in result.stderr
    assert approval(arn)["ModelApprovalStatus"] == "Approved"
