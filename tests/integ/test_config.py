"""integ/config.yaml is a real stage: it loads with every config check, synthesizes with every synth check (cdk-nag
and the CDK's template validation included), and has what the run exercises."""

from __future__ import annotations

import pytest

from core.config import load_config
from tests.cdk_assembly import REPO
from tests.conftest import synthesized_once

CONFIG = REPO / "integ" / "config.yaml"


@pytest.fixture(scope="module")
def integ_assembly(tmp_path_factory):
    return synthesized_once(tmp_path_factory, "integ-assembly", CONFIG)


def test_the_integ_stage_synthesizes_with_every_synth_check(integ_assembly):
    assert integ_assembly.error is None
    assert integ_assembly.findings() == []
    assert set(integ_assembly.templates["integ"]) == {"Storage", "Training", "Serving"}


def test_the_integ_stage_exercises_every_step():
    stage = load_config(CONFIG).stages["integ"]
    serving, training = stage.serving, stage.training
    assert stage.removal_policy == "destroy"  # the run deletes its data with the stacks
    assert training.method in ("lora", "qlora") and training.max_steps <= 20  # registers an adapter, quickly
    assert serving.network_isolation
    assert serving.autoscaling.min_instances == 0  # the cold start is measured from zero
    [base] = serving.components
    assert base.min_copies == 0 and [a.name for a in base.adapters] == ["tuned"]  # the approved adapter is served


def test_the_endpoint_runs_isolated_on_the_configured_instance(integ_assembly):
    serving = integ_assembly.template("integ", "Serving")["Resources"]
    models = [r for r in serving.values() if r["Type"] == "AWS::SageMaker::Model"]
    assert models and all(m["Properties"].get("EnableNetworkIsolation") is True for m in models)
    configs = [r for r in serving.values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    assert [v["InstanceType"] for c in configs for v in c["Properties"]["ProductionVariants"]] == ["ml.g6.2xlarge"]
