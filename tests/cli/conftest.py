"""The CLI against AWS in this process: moto for every API it implements (CloudFormation, STS, S3, KMS, SageMaker's
pipelines, endpoints and model packages), botocore's Stubber for the calls moto 5.2.5 lacks
(ListPipelineExecutionSteps, InvokeEndpointWithResponseStream), with responses Stubber checks against the API's
own output shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.stub import Stubber
from moto import mock_aws
from typer.testing import CliRunner

from cli import aws as aws_module
from cli.app import app
from cli.reference import fake_stage
from cli.reference.fake_stage import (  # noqa: F401 - the tests import these from here
    ACCOUNT,
    FINETUNE_DEFINITION,
    OTHER_ACCOUNT,
    PROJECT,
    REGION,
    STAGING_DEFINITION,
    Deployed,
    literal_outputs,
)

# Two stages: dev in whatever account the credentials are for, prod in another account.
CONFIG = f"""
project: {PROJECT}
stages:
  dev:
    region: {REGION}
    removal_policy: destroy
    serving:
      model: gpt-j-6b
      instance_type: ml.g5.2xlarge
  prod:
    account: "{OTHER_ACCOUNT}"
    region: {REGION}
    serving:
      model: gpt-j-6b
      instance_type: ml.g5.2xlarge
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "LLMP_STAGE", "LLMP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


@pytest.fixture
def moto(credentials: None):
    with mock_aws():
        yield


@pytest.fixture
def cli(config_file: Path):
    """Run `llmp ARGS` with the test config; returns typer's Result (stdout, stderr, exit_code)."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None):
        # Wide and colourless, so a line reads as a person sees it in a wide terminal.
        env = {"LLMP_CONFIG": str(config_file), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
        return runner.invoke(app, list(args), env=env, input=input)

    run.config = config_file
    return run


def client(service: str):
    """A client as the CLI makes them (its one loader of API models: parsing SageMaker's costs most of a second)."""
    return aws_module.session_for(REGION).client(service)


def create_stack(name: str, template: dict) -> dict:
    return fake_stage.create_stack(client, name, template)


@pytest.fixture
def deployed(moto: None) -> Deployed:
    """The dev stage deployed onto moto (cli/reference/fake_stage.py)."""
    return fake_stage.deploy(client)


def register_package(group: str, status: str = "PendingManualApproval") -> str:
    """A model version as the pipeline's Register step makes one."""
    return fake_stage.register_package(client, group, status)


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch):
    """Replace one service's client of the CLI with a Stubber'd one (the others stay on moto); returns the Stubber.
    Every queued response must be used: the stub is checked when the test ends."""
    aws = aws_module.Aws()
    monkeypatch.setattr(aws_module, "connect", lambda: aws)
    stubs: list[Stubber] = []

    def stub(service: str) -> Stubber:
        stubbed_client = client(service)
        aws.clients[service, REGION] = stubbed_client
        stubber = Stubber(stubbed_client)
        stubber.activate()
        stubs.append(stubber)
        return stubber

    yield stub
    for stubber in stubs:
        stubber.assert_no_pending_responses()
