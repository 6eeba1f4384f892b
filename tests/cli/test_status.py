"""`llmp status` against moto: the stage's stacks, endpoint, pipeline runs and models awaiting approval."""

from __future__ import annotations

import json
import re

from tests.cli.conftest import OTHER_ACCOUNT, client, literal_outputs, register_package


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
    assert '  approve: llmp approve 1 --stage dev -m "<why>"  (or llmp reject 1)\n' in out


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


SERVED = "arn:aws:sagemaker:us-east-1:123456789012:model-package/llm-platform-dev/3"
PROMOTED_FROM = "arn:aws:sagemaker:us-east-1:333333333333:model-package/llm-platform-staging/7"
DIGEST = "sha256:" + "3f2a9c1e0b7d" + "5" * 52


def _serve_promoted_weights() -> None:
    """The dev serving stack as a release of promoted weights leaves it: its outputs name what it serves."""
    client("cloudformation").update_stack(
        StackName="llm-platform-dev-serving",
        TemplateBody=json.dumps(
            literal_outputs(
                {
                    "EndpointName": "llm-platform-dev",
                    "ServedModelPackageArn": SERVED,
                    "PromotedFromPackageArn": PROMOTED_FROM,
                    "ServedWeightsDigest": DIGEST,
                }
            )
        ),
    )


def test_status_shows_the_promoted_version_a_stage_serves(cli, deployed):
    _serve_promoted_weights()

    result = cli("status", "--stage", "dev")

    assert result.exit_code == 0, result.output
    assert re.search(
        rf"serves +llm-platform-dev/3, promoted from {PROMOTED_FROM}, weights sha256:3f2a9c1e0b7d…\n", result.stdout
    )
    assert DIGEST not in result.stdout  # shortened: the whole digest is in --json


def test_status_json_gives_the_served_version_in_full(cli, deployed):
    _serve_promoted_weights()

    result = cli("status", "--stage", "dev", "--json")

    assert result.exit_code == 0, result.output
    (dev,) = json.loads(result.stdout)["stages"]
    assert dev["served"] == {"package": SERVED, "promoted_from": PROMOTED_FROM, "digest": DIGEST}


def test_status_of_a_stage_without_promoted_weights_shows_no_served_version(cli, deployed):
    result = cli("status", "--stage", "dev", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stages"][0]["served"] is None
    assert "serves" not in cli("status", "--stage", "dev").stdout


def test_a_missing_pipeline_is_shown_and_the_rest_of_the_stage_still_is(cli, deployed):
    # moto does not create AWS::SageMaker::Pipeline, nor does a training stack that failed part-way: the pipelines'
    # names are in the outputs, the pipelines are not.
    client("sagemaker").delete_pipeline(PipelineName=deployed.finetune, ClientRequestToken="t" * 32)
    result = cli("status", "--stage", "dev", "--json")
    assert result.exit_code == 0, result.output
    (stage,) = json.loads(result.stdout)["stages"]
    assert stage["pipelines"]["finetune"] == {"name": deployed.finetune, "runs": None}
    assert stage["endpoint"]["status"] == "InService"
    table = cli("status", "--stage", "dev").stdout
    assert f"{deployed.finetune}: not found (deploy the training stack again)" in table
