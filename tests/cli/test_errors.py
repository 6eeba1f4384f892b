"""Every failure is one line on stderr that says what to do, and an exit status a script can branch on."""

from __future__ import annotations

import http.server
import json
import re
import threading

import botocore.endpoint
import pytest
from botocore import exceptions as botocore_errors
from botocore.parsers import ResponseParserError

from cli.commands import status as status_command
from cli.errors import translate
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


# --- every botocore error is one line with the fix and its exit status (cli/errors.py translate) --------------------


def client_error(code: str, message: str = "", status: int = 400, operation: str = "DescribeStacks"):
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore_errors.ClientError(response, operation)


@pytest.mark.parametrize(
    ("error", "status", "says"),
    [
        (client_error("ThrottlingException", "Rate exceeded"), 5, "AWS is throttling DescribeStacks"),
        (client_error("SlowDown", "", 503), 5, "run the command again in a minute"),
        (client_error("AccessDeniedException", "not authorized", 403), 4, "access denied to DescribeStacks"),
        (client_error("ExpiredToken", "expired"), 4, "your AWS session has expired"),
        (client_error("ResourceNotFound", "Pipeline execution x does not exist"), 3, "AWS has no such resource"),
        (client_error("ValidationException", "Could not find model package x"), 3, "AWS has no such resource"),
        (client_error("ValidationException", "1 validation error detected: MaxResults"), 2, "AWS refused a value"),
        (client_error("InternalFailure", "oops", 500), 5, "AWS failed on its side answering DescribeStacks"),
        (client_error("503", "Service Unavailable", 503), 5, "(HTTP 503: Service Unavailable)"),
        (
            client_error("502", "<!DOCTYPE html>\n<html><head><title>Bad Gateway</title></head></html>", 502),
            5,
            "got an HTML page titled 'Bad Gateway' (HTTP 502) instead of AWS's answer",
        ),
        (client_error("SomethingElse", "no"), 1, "AWS refused DescribeStacks: SomethingElse: no"),
        (botocore_errors.EndpointConnectionError(endpoint_url="https://sts.x.amazonaws.com"), 5, "cannot reach"),
        (botocore_errors.ConnectTimeoutError(endpoint_url="https://sts.x"), 5, "timed out connecting to"),
        (botocore_errors.ReadTimeoutError(endpoint_url="https://sts.x"), 5, "did not answer in time"),
        (botocore_errors.SSLError(endpoint_url="https://sts.x", error="CERTIFICATE_VERIFY_FAILED"), 5, "AWS_CA_BUNDLE"),
        (botocore_errors.NoCredentialsError(), 4, "no AWS credentials found"),
        (botocore_errors.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), 4, "no AWS cred"),
        (botocore_errors.ProfileNotFound(profile="ops"), 4, "give --profile (or AWS_PROFILE) a profile"),
        (botocore_errors.NoRegionError(), 2, "give --region"),
        (botocore_errors.ParamValidationError(report="Invalid length for parameter X"), 2, "Invalid length"),
        (ResponseParserError("Unable to parse\nb'<!doctype html><title>x</title>'"), 5, "got an HTML page titled 'x'"),
    ],
)
def test_every_botocore_error_is_one_line_with_the_fix_and_its_exit_status(error, status, says):
    failure = translate(error)

    assert failure.code == status
    assert says in str(failure)
    assert "\n" not in str(failure)
    assert "<" not in str(failure)


def test_a_network_error_names_the_endpoint_override_in_the_environment(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")

    failure = translate(botocore_errors.EndpointConnectionError(endpoint_url="http://127.0.0.1:9/"))

    assert "(AWS_ENDPOINT_URL_STS=http://127.0.0.1:9 is set: is that server running" in str(failure)


class FakeAws:
    """An HTTP server that answers every request with one status and body, as a proxy or a failing AWS would."""

    def __init__(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        self.requests = 0
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.requests += 1
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def fake_aws(credentials, monkeypatch):
    """Start a FakeAws and send every AWS call of the CLI to it (AWS_ENDPOINT_URL); retries do not sleep."""
    servers = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda seconds: None)

    def start(status: int, body: bytes) -> FakeAws:
        server = FakeAws(status, body)
        servers.append(server)
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
        return server

    yield start
    for server in servers:
        server.server.shutdown()


def test_an_html_error_page_is_one_line_naming_the_proxy_and_the_endpoint_override(cli, fake_aws):
    server = fake_aws(502, b"<!doctype html><html><head><title>502 Bad Gateway</title></head><body>..</body></html>")

    result = cli("finetune")

    assert result.exit_code == 5, result.output
    assert one_line(result) == (
        "llmp: got an HTML page titled '502 Bad Gateway' instead of AWS's answer: a proxy or a wrong endpoint is in "
        f"the way (AWS_ENDPOINT_URL={server.url} is set: is that server running and right? unset it to reach AWS "
        "itself); check HTTPS_PROXY, or run the command again in a minute"
    )


def test_each_retry_is_said_on_stderr_with_its_reason_then_the_failure(cli, fake_aws):
    server = fake_aws(503, b"")

    result = cli("finetune", "--output", "json")

    assert result.exit_code == 5, result.output
    lines = result.stderr.strip().splitlines()
    retries = [line for line in lines if "retrying" in line]
    assert server.requests == len(retries) + 1 == 9  # 8 retries (cli/aws.py CLIENT_CONFIG)
    assert retries[0] == "llmp: GetCallerIdentity got HTTP 503: Service Unavailable; retrying (attempt 2 of 9)"
    assert lines[-1].startswith(
        "llmp: AWS failed on its side answering GetCallerIdentity (HTTP 503: Service Unavailable) after 8 retries: "
        "run the command again in a minute"
    )
    assert json.loads(result.stdout)["exit_status"] == 5  # stdout is the one JSON document; the retries are notes


def test_no_such_run_is_exit_3_as_documented(cli, deployed):
    run = f"arn:aws:sagemaker:us-east-1:123456789012:pipeline/{deployed.finetune}/execution/nosuchrun"

    result = cli("follow", run)

    assert result.exit_code == 3, result.output
    assert one_line(result).startswith("llmp: AWS has no such resource (DescribePipelineDefinitionForExecution:")


# --- usage errors: one line, and JSON under --output json --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["status", "--stages", "dev"], "llmp: No such option: --stages (Possible options: --stage): see `llmp status"),
        (["invoke"], "llmp: Missing argument 'prompt': see `llmp invoke --help`"),
        (["invoke", "hi", "-n", "many"], "llmp: Invalid value for '--max-new-tokens' / '-n':"),
        (["status", "--output", "yaml"], "llmp: Invalid value for '--output' / '-o':"),
        (["nosuchcommand"], "llmp: No such command 'nosuchcommand'"),
    ],
)
def test_a_usage_error_is_one_line_on_stderr_with_exit_2(cli, args, says):
    result = cli(*args)

    assert result.exit_code == 2
    assert one_line(result).startswith(says)
    assert result.stdout == ""


@pytest.mark.parametrize("json_flag", [["--json"], ["--output", "json"], ["-o", "json"], ["--output=json"]])
def test_a_usage_error_under_json_is_a_json_document_on_stdout(cli, json_flag):
    result = cli("invoke", *json_flag)

    assert result.exit_code == 2
    assert json.loads(result.stdout) == {
        "error": "Missing argument 'prompt': see `llmp invoke --help`",
        "exit_status": 2,
    }
    assert one_line(result) == "llmp: Missing argument 'prompt': see `llmp invoke --help`"
