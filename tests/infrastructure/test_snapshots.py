"""Snapshots of every stack of every stage: unintended template drift fails here.

Asset hashes are normalized (they move with unrelated code and CDK versions). After an intended change, review the
diff and accept it with `.venv/bin/python -m pytest tests/infrastructure/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import json

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.cdk_assembly import normalize_hashes

STACKS = [(stage, stack) for stage in ["dev", "staging", "prod"] for stack in ["Storage", "Training", "Serving"]]


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize(("stage", "stack"), STACKS, ids=[f"{s}-{k}" for s, k in STACKS])
def test_template_matches_snapshot(assembly, snapshot_json, stage, stack):
    template = json.loads(normalize_hashes(json.dumps(assembly.template(stage, stack), sort_keys=True)))
    assert template == snapshot_json


# config/examples/promotion.yaml: the grants a source stage gives (dev's storage and training), the copy and its role
# in a promoting stage (staging's storage and serving), in three accounts.
PROMOTION_STACKS = [("dev", "Storage"), ("dev", "Training"), ("staging", "Storage"), ("staging", "Serving")]


@pytest.mark.parametrize(("stage", "stack"), PROMOTION_STACKS, ids=[f"promotion-{s}-{k}" for s, k in PROMOTION_STACKS])
def test_promotion_template_matches_snapshot(promotion_assembly, snapshot_json, stage, stack):
    template = json.loads(normalize_hashes(json.dumps(promotion_assembly.template(stage, stack), sort_keys=True)))
    assert template == snapshot_json


def test_every_synthesized_stack_has_a_snapshot(assembly):
    assert sorted((stage, stack) for stage, stacks in assembly.templates.items() for stack in stacks) == sorted(STACKS)


def test_the_shared_assembly_refuses_changes(assembly):
    # Every test in a worker reads the same templates: one that edited them would fail the snapshots, but only in
    # runs where it shared their worker and ran first.
    model = next(iter(assembly.resources("dev", "Serving", "AWS::SageMaker::Model").values()))
    environment = model["Properties"]["PrimaryContainer"]["Environment"]
    with pytest.raises(TypeError, match="copy before changing"):
        environment.pop("OPTION_ENTRYPOINT")
    with pytest.raises(TypeError, match="copy before changing"):
        assembly.template("dev", "Serving")["Resources"].clear()
    with pytest.raises(TypeError, match="copy before changing"):
        model["Properties"]["Tags"].append({"Key": "k", "Value": "v"})
    with pytest.raises(TypeError, match="copy before changing"):
        assembly.metadata["dev"]["Serving"].update(x=[])
    assert "OPTION_ENTRYPOINT" in environment
