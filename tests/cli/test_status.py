"""`llmp status` against moto: the stage's stacks, endpoint, pipeline runs and models awaiting approval."""

from __future__ import annotations

import json
import re

from tests.cli.conftest import OTHER_ACCOUNT, client, register_package


def test_status_shows_stacks_endpoint_runs_and_pending_models(cli, deployed):
    sagemaker = client("sagemaker")
    sagemaker.start_pipeline_execution(PipelineName=deployed.finetune, PipelineExecutionDisplayName="first")
    register_package(deployed.group)

    result = cli("status", "--stage", "dev")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "storage CREATE_COMPLETE · training CREATE_COMPLETE · serving CREATE_COMPLETE" in out
    assert "llm-platform-dev InService, 1 instance" in out
    assert "llm-platform-dev-finetune: Succeeded" in out and "(first)" in out
    assert "llm-platform-dev-stage-weights: never run" in out
    assert "version 1" in out
    assert "approve: llmp approve 1 --stage dev" in out


def test_status_json_is_one_document_scripts_can_read(cli, deployed):
    arn = register_package(deployed.group)
    register_package(deployed.group, status="Approved")

    result = cli("status", "--stage", "dev", "--json")

    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)["stages"]
    assert [s["stage"] for s in found] == ["dev"]
    dev = found[0]
    assert dev["stacks"] == {
        "llm-platform-dev-storage": "CREATE_COMPLETE",
        "llm-platform-dev-training": "CREATE_COMPLETE",
        "llm-platform-dev-serving": "CREATE_COMPLETE",
    }
    assert dev["endpoint"]["status"] == "InService" and dev["endpoint"]["instances"] == 1
    assert dev["pipelines"]["finetune"] == {"name": deployed.finetune, "runs": []}
    # Only the version waiting for a person, not the approved one.
    assert [p["arn"] for p in dev["pending_approval"]] == [arn]


def test_status_of_every_stage_reports_a_stage_of_another_account_without_failing(cli, deployed):
    result = cli("status", "--json")

    assert result.exit_code == 0, result.output
    dev, prod = json.loads(result.stdout)["stages"]
    assert dev["problem"] is None
    assert prod["problem"].startswith(f"stage prod is in account {OTHER_ACCOUNT}")


def test_status_shows_an_undeployed_stage_as_not_deployed(cli, moto):
    result = cli("status", "--stage", "dev")

    assert result.exit_code == 0, result.output
    assert "storage not deployed · training not deployed · serving not deployed" in result.stdout
    assert re.search(r"endpoint +not deployed", result.stdout)
