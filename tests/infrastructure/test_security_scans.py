"""Security scans beyond the template assertions: cdk-nag's three packs, checkov, and the acknowledgement page."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from generators.acknowledgements import collect as collect_acknowledgements
from generators.acknowledgements import render as render_acknowledgements
from tests.cdk_assembly import REPO

CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
PACKS = ("AwsSolutions", "NIST.800.53.R5", "HIPAA.Security")


@pytest.mark.parametrize("pack", PACKS)
def test_every_pack_checked_every_stack(assembly, pack):
    reports = {p.name for p in assembly.outdir.glob(f"{pack}-*-NagReport.csv")}
    assert {
        f"{pack}-{stage}-llm-platform-{stage}-{stack}-NagReport.csv"
        for stage in ("dev", "staging", "prod")
        for stack in ("storage", "training", "serving")
    } <= reports


def run_checkov(outdir) -> dict:
    result = subprocess.run(
        # --skip-download: no call to the vendor's platform for guidelines; the checks ship with checkov.
        [
            str(CHECKOV),
            "--skip-download",
            "-d",
            str(outdir),
            "--framework",
            "cloudformation",
            "--quiet",
            "--compact",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    reports = json.loads(result.stdout)
    return reports[0] if isinstance(reports, list) else reports


def test_checkov_finds_nothing_unacknowledged(assembly, promotion_assembly, tmp_path):
    # One checkov process over both assemblies' templates: its start-up is half of its time.
    for name, outdir in (("default", assembly.outdir), ("promotion", promotion_assembly.outdir)):
        for template in outdir.rglob("*.template.json"):
            copy = tmp_path / name / template.relative_to(outdir)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, copy)
    report = run_checkov(tmp_path)
    failed = [(f["check_id"], f["resource"], f["file_path"]) for f in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["passed"] > 1500 and report["summary"]["resource_count"] > 400


def test_every_checkov_skip_is_on_one_resource_with_its_reason(promotion_assembly):
    skips = [
        (stage, stack, logical_id, skip)
        for stage, stacks in promotion_assembly.templates.items()
        for stack, template in stacks.items()
        for logical_id, resource in template["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips
    assert all(len(skip["comment"]) > 40 and skip["id"].startswith("CKV_") for *_, skip in skips)


def test_the_acknowledgement_page_is_current(assembly, promotion_assembly):
    expected = render_acknowledgements([assembly.outdir, promotion_assembly.outdir])
    assert (REPO / "docs" / "acknowledgements.md").read_text() == expected, "run `make acknowledgements`"


# What cdk-nag's three packs and checkov had acknowledged before issue 14 ("clean with fewer acknowledgements than
# today, not more"): (rule, resource) pairs of docs/acknowledgements.md, and kinds of checkov skip (check, resource
# type, reason). A new exception has to win its place against these.
CDK_NAG_PAIRS_BEFORE_ISSUE_14 = 132
CHECKOV_SKIP_KINDS_BEFORE_ISSUE_14 = 8
# Issue 26 made the staging role the only writer of pretrained/ (the training role, which runs the fine-tuning code,
# no longer writes the weights it reads) and a registry role the only writer of registered/ (what a model package
# names), so every stage has both, each with what every job role needs acknowledged: its jobs' log streams, its
# prefixes, the ECR login. They win their place as a security fix; nothing else may.
ISSUE_26_JOB_ROLES = ("Storage/StagingRole/Role/DefaultPolicy", "Storage/RegistryRole/Role/DefaultPolicy")
PAIRS_PER_JOB_ROLE = 5
# Issue 24 copies an approved version into a promoting stage when it deploys (infrastructure/constructs/
# promoted_weights.py), through the CDK Provider framework: its five functions get the packs' Lambda findings (no VPC,
# concurrency, dead-letter queue: the same reasons as the code-packaging functions'), and the promotion role reads a
# source stage's bucket and key whose names only the source's CloudFormation knows. Counted exactly, so that the
# construct cannot grow its exceptions unnoticed.
ISSUE_24_PROMOTION = "Serving/Promotion/"
PROMOTION_PAIRS = 44


def test_fewer_acknowledgements_than_before_issue_14(assembly, promotion_assembly):
    found = collect_acknowledgements([assembly.outdir, promotion_assembly.outdir])
    pairs = sum(len(resources) for reasons in found.values() for resources in reasons.values())
    for role in ISSUE_26_JOB_ROLES:
        assert sum(role in resources for reasons in found.values() for resources in reasons.values()) == (
            PAIRS_PER_JOB_ROLE
        ), role
    promotion = sum(
        resource.startswith(ISSUE_24_PROMOTION)
        for reasons in found.values()
        for resources in reasons.values()
        for resource in resources
    )
    assert promotion == PROMOTION_PAIRS
    assert pairs - PAIRS_PER_JOB_ROLE * len(ISSUE_26_JOB_ROLES) - promotion < CDK_NAG_PAIRS_BEFORE_ISSUE_14
    # The pipeline's artifact bucket is versioned now: neither pack acknowledges a missing version history any more.
    assert not [rule for rule in found if rule.endswith("S3BucketVersioningEnabled")]
    kinds = {
        (skip["id"], resource["Type"], skip["comment"])
        for a in (assembly, promotion_assembly)
        for stacks in a.templates.values()
        for template in stacks.values()
        for resource in template["Resources"].values()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }
    assert len(kinds) < CHECKOV_SKIP_KINDS_BEFORE_ISSUE_14
    assert "CKV_AWS_21" not in {check for check, _, _ in kinds}
