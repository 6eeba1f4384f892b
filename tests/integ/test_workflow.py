"""The integration workflow runs `make integ` in the user's account through OIDC, with every action pinned to a
commit and no credential in the repository; the docs show the dry run as it is."""

from __future__ import annotations

import re

import yaml

from tests.cdk_assembly import REPO

WORKFLOW = REPO / ".github" / "workflows" / "integ.yml"


def load() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_runs_weekly_and_on_demand_with_only_the_oidc_token_and_read_access():
    workflow = load()
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in triggers and triggers["schedule"]
    assert workflow["permissions"] == {"id-token": "write", "contents": "read"}


def test_every_action_is_pinned_to_a_full_commit():
    uses = [step["uses"] for step in load()["jobs"]["integ"]["steps"] if "uses" in step]
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses


def test_the_role_comes_from_a_repository_variable_and_no_credential_is_stored():
    steps = load()["jobs"]["integ"]["steps"]
    [credentials] = [s for s in steps if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@")]
    assert credentials["with"]["role-to-assume"] == "${{ vars.INTEG_ROLE_ARN }}"
    text = WORKFLOW.read_text()
    assert "secrets." not in text and "aws-access-key-id" not in text and "AKIA" not in text


def test_it_runs_make_integ_without_the_question_and_uploads_the_report_whatever_happens():
    steps = load()["jobs"]["integ"]["steps"]
    [run] = [s for s in steps if "run" in s]
    assert run["run"].startswith("make integ YES=1")
    [upload] = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()" and upload["with"]["path"] == "integ/reports/"


def test_the_docs_show_the_dry_run_as_it_prints():
    doc = (REPO / "docs" / "integration-tests.md").read_text()
    assert (REPO / "tests" / "integ" / "dry_run.txt").read_text() in doc
