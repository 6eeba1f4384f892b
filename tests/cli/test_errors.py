"""Every failure is one line on stderr that says what to do, and an exit status a script can branch on."""

from __future__ import annotations

import json
import re

import pytest

from cli.commands import status as status_command
from tests.cli.conftest import OTHER_ACCOUNT, PROJECT, client, create_stack, literal_outputs


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_no_credentials(cli, credentials, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup: it would wait for a timeout

    result = cli("status")

    assert result.exit_code == 4
    assert one_line(result) == (
        "llmp: no AWS credentials found: run `aws configure sso` (or `aws sso login`), or set AWS_PROFILE to a "
        "configured profile"
    )


def test_expired_session(cli, credentials, stubbed):
    stubbed("sts").add_client_error(
        "get_caller_identity", "ExpiredToken", "The security token included in the request is expired"
    )

    result = cli("finetune")

    assert result.exit_code == 4
    assert one_line(result).startswith(
        "llmp: your AWS session has expired (GetCallerIdentity: ExpiredToken): sign in again"
    )


def test_access_denied_names_the_operation(cli, moto, stubbed):
    stubbed("cloudformation").add_client_error(
        "describe_stacks",
        "AccessDenied",
        "User: arn:aws:iam::123456789012:user/ana is not authorized to perform: cloudformation:DescribeStacks",
    )

    result = cli("finetune")

    assert result.exit_code == 4
    assert one_line(result).startswith(
        "llmp: access denied to DescribeStacks: User: arn:aws:iam::123456789012:user/ana"
    )


def test_credentials_of_another_account_than_the_stage(cli, deployed):
    result = cli("finetune", "--stage", "prod")

    assert result.exit_code == 4
    assert one_line(result) == (
        f"llmp: stage prod is in account {OTHER_ACCOUNT} ({cli.config}), but your credentials are for 123456789012: "
        f"use credentials for {OTHER_ACCOUNT} (e.g. AWS_PROFILE=<its profile>)"
    )


@pytest.mark.parametrize("command", [["status"], ["finetune"], ["approve", "1"], ["invoke", "hi"], ["plan"]])
def test_no_such_stage(cli, moto, command):
    result = cli(*command, "--stage", "qa")

    assert result.exit_code == 2
    assert one_line(result) == f"llmp: no stage named 'qa' in {cli.config}; its stages: dev, prod"


@pytest.mark.parametrize(
    ("command", "stack"),
    [(["finetune"], "training"), (["upload-data"], "storage"), (["invoke", "hi"], "serving")],
)
def test_stage_not_deployed(cli, moto, command, stack, tmp_path):
    (tmp_path / "a.txt").write_text("x")

    result = cli(*command, *([str(tmp_path / "a.txt")] if command == ["upload-data"] else []))

    assert result.exit_code == 3
    assert one_line(result) == (
        f"llmp: stage dev is not deployed: no stack {PROJECT}-dev-{stack} in us-east-1: run "
        f"`make deploy STAGE=dev CONFIG={cli.config}`"
    )


def test_a_stack_whose_creation_failed(cli, moto, stubbed):
    stack = {
        "StackName": f"{PROJECT}-dev-training",
        "StackStatus": "ROLLBACK_COMPLETE",
        "CreationTime": "2026-05-01T12:00:00Z",
    }
    stubbed("cloudformation").add_response(
        "describe_stacks", {"Stacks": [stack]}, {"StackName": f"{PROJECT}-dev-training"}
    )

    result = cli("finetune")

    assert result.exit_code == 3
    assert one_line(result).startswith(
        f"llmp: stack {PROJECT}-dev-training is ROLLBACK_COMPLETE: wait for it to finish, or see its events"
    )


def test_a_stack_deployed_from_an_older_version_without_an_output(cli, moto):
    create_stack(f"{PROJECT}-dev-training", literal_outputs({"FinetunePipelineName": "x"}))

    result = cli("finetune")

    assert result.exit_code == 3
    assert (
        "has no output StagingPipelineName, ModelPackageGroupName: it was deployed from an older version"
        in one_line(result)
    )


def test_endpoint_not_in_service(cli, deployed, stubbed):
    stubbed("sagemaker").add_response(
        "describe_endpoint",
        {
            "EndpointName": deployed.endpoint,
            "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/llm-platform-dev",
            "EndpointConfigName": "lmi",
            "EndpointStatus": "Creating",
            "CreationTime": "2026-05-01T12:00:00Z",
            "LastModifiedTime": "2026-05-01T12:00:00Z",
        },
        {"EndpointName": deployed.endpoint},
    )

    result = cli("invoke", "hi")

    assert result.exit_code == 3
    assert (
        one_line(result) == "llmp: endpoint llm-platform-dev is Creating, not InService: see `llmp status --stage dev`"
    )


@pytest.mark.bad_input("config")
def test_a_config_that_does_not_load_is_a_usage_error(cli, moto):
    cli.config.write_text("project: llm-platform\nstages:\n  dev:\n    regoin: us-east-1\n")

    result = cli("status")

    assert result.exit_code == 2
    assert "stages.dev.regoin: unknown key; did you mean 'region'?" in result.stderr


def test_json_failures_are_json_on_stdout_too(cli, moto):
    result = cli("finetune", "--json")

    assert result.exit_code == 3
    failure = json.loads(result.stdout)
    assert failure["exit_status"] == 3
    assert failure["error"].startswith("stage dev is not deployed")


def test_a_bug_is_one_line_with_where_and_how_to_see_more(cli, moto, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(status_command, "stage_status", broken)

    result = cli("status", "--stage", "dev")

    assert result.exit_code == 1
    assert re.fullmatch(
        r"llmp: RuntimeError: something unexpected \(at tests/cli/test_errors.py:\d+\); DEBUG=1 shows the traceback",
        one_line(result),
    )


def test_an_unknown_option_is_a_usage_error(cli):
    result = cli("status", "--stages", "dev")

    assert result.exit_code == 2
    assert "No such option" in result.output


def test_help_documents_the_exit_statuses(cli):
    result = cli("--help")

    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for status in (
        "0 done",
        "1 the thing run failed",
        "2 usage or config error",
        "3 AWS is not in the state needed",
        "4 credentials",
        "130 Ctrl-C",
    ):
        assert status in text


def test_the_json_of_a_stage_in_service_is_unchanged_by_an_unrelated_other_stack(cli, deployed):
    """Status reads only the stage's own stacks, by name."""
    client("cloudformation").create_stack(
        StackName=f"{PROJECT}-dev-storage-extra", TemplateBody=json.dumps(literal_outputs({"X": "y"}))
    )

    result = cli("status", "--stage", "dev", "--json")

    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["stages"][0]["stacks"]) == 3
