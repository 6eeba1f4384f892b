"""cdk-nag (AwsSolutions) over the whole app: no unsuppressed finding, and every suppression is narrow and reasoned."""

from __future__ import annotations

import json

MIN_REASON_LENGTH = 40  # long enough to say why, not just "needed"


def test_app_synthesizes_without_unsuppressed_nag_findings(assembly):
    assert assembly.error is None, "\n".join(assembly.findings()) or assembly.error
    assert assembly.findings() == []


def test_nag_warnings_are_also_addressed(assembly):
    assert [f for f in assembly.findings("aws:cdk:warning") if "AwsSolutions" in f] == []


def suppressions(assembly):
    for stage, stacks in assembly.templates.items():
        for stack, template in stacks.items():
            for logical_id, resource in template["Resources"].items():
                for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
                    yield f"{stage}/{stack}/{logical_id}", rule


def test_every_suppression_has_a_reason_a_reviewer_can_check(assembly):
    found = list(suppressions(assembly))
    assert found, "expected the documented suppressions to be present"
    short = [(where, rule["id"]) for where, rule in found if len(rule.get("reason", "")) < MIN_REASON_LENGTH]
    assert short == []


def test_wildcard_permission_suppressions_name_the_exact_findings(assembly):
    # IAM5 is granular: a suppression without applies_to would hide every future wildcard on that resource.
    broad = [
        (where, json.dumps(rule))
        for where, rule in suppressions(assembly)
        if rule["id"] == "AwsSolutions-IAM5" and not rule.get("applies_to")
    ]
    assert broad == []
