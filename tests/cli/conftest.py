"""The CLI against AWS in this process: moto for every API it implements (CloudFormation, STS, S3, KMS, SageMaker's
pipelines, endpoints and model packages), botocore's Stubber for the calls moto 5.2.5 lacks
(ListPipelineExecutionSteps, InvokeEndpointWithResponseStream), with responses Stubber checks against the API's
own output shapes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.stub import Stubber
from moto import mock_aws
from typer.testing import CliRunner

from cli import aws as aws_module
from cli.app import app

ACCOUNT = "123456789012"  # moto's
OTHER_ACCOUNT = "999999999999"
REGION = "us-east-1"
PROJECT = "llm-platform"

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

# The fine-tuning pipeline's definition in the shape the SageMaker SDK writes it (infrastructure/constructs/
# training_pipeline/finetune_pipeline.py; test_outputs.py reads the synthesized one): parameters with types and defaults,
# a Condition step with its branches.
FINETUNE_DEFINITION = {
    "Version": "2020-12-01",
    "Parameters": [
        {"Name": "MaxSteps", "Type": "Integer", "DefaultValue": 100},
        {"Name": "LearningRate", "Type": "Float", "DefaultValue": 1e-5},
        {"Name": "TrainBatchSize", "Type": "Integer", "DefaultValue": 1},
        {"Name": "PerplexityThreshold", "Type": "Float", "DefaultValue": 50.0},
        {"Name": "InputData", "Type": "String", "DefaultValue": "s3://${DataBucket}/raw/"},
    ],
    "Steps": [
        {"Name": "PrepareData", "Type": "Processing", "Arguments": {}},
        {"Name": "Train", "Type": "Training", "Arguments": {}},
        {"Name": "Evaluate", "Type": "Processing", "Arguments": {}},
        {
            "Name": "CheckPerplexity",
            "Type": "Condition",
            "Arguments": {
                "Conditions": [],
                "IfSteps": [{"Name": "Register-RegisterModel", "Type": "RegisterModel", "Arguments": {}}],
                "ElseSteps": [{"Name": "PerplexityTooHigh", "Type": "Fail", "Arguments": {}}],
            },
        },
    ],
}
STAGING_DEFINITION = {
    "Version": "2020-12-01",
    "Parameters": [],
    "Steps": [{"Name": "Stage-gpt-j-6b", "Type": "Processing", "Arguments": {}}],
}


@dataclass
class Deployed:
    """What the dev stage's stacks made, by the names its outputs give."""

    data_bucket: str
    models_bucket: str
    key_arn: str
    finetune: str = f"{PROJECT}-dev-finetune"
    staging: str = f"{PROJECT}-dev-stage-weights"
    group: str = f"{PROJECT}-dev"
    endpoint: str = f"{PROJECT}-dev"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "STAGE", "CONFIG"):
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
        env = {"CONFIG": str(config_file), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
        return runner.invoke(app, list(args), env=env, input=input)

    run.config = config_file
    return run


def client(service: str):
    """A client as the CLI makes them (its one loader of API models: parsing SageMaker's costs most of a second)."""
    return aws_module.session_for(REGION).client(service)


def create_stack(name: str, template: dict) -> dict:
    cloudformation = client("cloudformation")
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    return cloudformation.describe_stacks(StackName=name)["Stacks"][0]


def literal_outputs(values: dict[str, str]) -> dict:
    """A template whose only purpose is its outputs (a template needs a resource: one moto's CloudFormation makes)."""
    return {
        "Resources": {"Placeholder": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in values.items()},
    }


@pytest.fixture
def deployed(moto: None) -> Deployed:
    """The dev stage deployed onto moto: the storage stack's key and buckets made by CloudFormation, the pipelines,
    model package group and endpoint by the SageMaker API, named by the training and serving stacks' outputs."""
    storage = create_stack(
        f"{PROJECT}-dev-storage",
        {
            "Resources": {
                "Key": {
                    "Type": "AWS::KMS::Key",
                    "Properties": {"KeyPolicy": {"Version": "2012-10-17", "Statement": []}},
                },
                "Data": {"Type": "AWS::S3::Bucket"},
                "Models": {"Type": "AWS::S3::Bucket"},
            },
            "Outputs": {
                "DataBucketName": {"Value": {"Ref": "Data"}},
                "ModelsBucketName": {"Value": {"Ref": "Models"}},
                "KeyArn": {"Value": {"Fn::GetAtt": ["Key", "Arn"]}},
            },
        },
    )
    outputs = {o["OutputKey"]: o["OutputValue"] for o in storage["Outputs"]}
    found = Deployed(outputs["DataBucketName"], outputs["ModelsBucketName"], outputs["KeyArn"])
    create_stack(
        f"{PROJECT}-dev-training",
        literal_outputs(
            {
                "FinetunePipelineName": found.finetune,
                "StagingPipelineName": found.staging,
                "ModelPackageGroupName": found.group,
                "TrainingCodeUri": "s3://artifacts/code/training.tar.gz",
            }
        ),
    )
    create_stack(
        f"{PROJECT}-dev-serving",
        literal_outputs({"EndpointName": found.endpoint, "InferenceCodeUri": "s3://artifacts/code/model.tar.gz"}),
    )
    sagemaker = client("sagemaker")
    role = f"arn:aws:iam::{ACCOUNT}:role/{PROJECT}/dev/pipelines"
    for name, definition in ((found.finetune, FINETUNE_DEFINITION), (found.staging, STAGING_DEFINITION)):
        sagemaker.create_pipeline(PipelineName=name, PipelineDefinition=json.dumps(definition), RoleArn=role)
    sagemaker.create_model_package_group(ModelPackageGroupName=found.group)
    sagemaker.create_model(
        ModelName="lmi",
        ExecutionRoleArn=role,
        PrimaryContainer={
            "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121"
        },
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName="lmi",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": "lmi",
                "InitialInstanceCount": 1,
                "InstanceType": "ml.g4dn.xlarge",
            }
        ],
    )
    sagemaker.create_endpoint(EndpointName=found.endpoint, EndpointConfigName="lmi")
    return found


def register_package(group: str, status: str = "PendingManualApproval") -> str:
    """A model version as the pipeline's Register step makes one."""
    return client("sagemaker").create_model_package(
        ModelPackageGroupName=group,
        ModelPackageDescription="gpt-j-6b fine-tuned with SMP v1",
        ModelApprovalStatus=status,
        InferenceSpecification={
            "Containers": [{"Image": "djl-inference:0.27.0", "ModelDataUrl": "s3://artifacts/code/model.tar.gz"}],
            "SupportedContentTypes": ["application/json"],
            "SupportedResponseMIMETypes": ["application/json"],
        },
    )["ModelPackageArn"]


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
