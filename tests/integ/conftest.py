"""The integration runner against AWS in this process: moto (mock_aws) for every call it implements, and, for the
two it lacks in 5.2.5 (DeleteModelPackage, StopPipelineExecution), an adapter that does to moto's own records what
AWS does. Nothing here can reach AWS: fake credentials, and moto answers every call."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from moto import mock_aws
from moto.sagemaker.models import sagemaker_backends

from core.naming import StageNames
from integ.aws import IntegAws

ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
NAMES = StageNames("llmp-integ", "integ")
COMPONENTS = ["llmp-integ-integ-base", "llmp-integ-integ-tuned"]
ROLE = f"arn:aws:iam::{ACCOUNT}:role/pipeline"


class MotoAws(IntegAws):
    """IntegAws on moto, with the two calls moto lacks done as AWS does them."""

    def _backend(self):
        return sagemaker_backends[ACCOUNT][self.region]

    def delete_package(self, arn: str) -> None:
        backend = self._backend()
        package = backend.model_packages.pop(arn)
        backend.model_package_name_mapping.pop(package.model_package_name, None)
        backend.model_package_name_mapping.pop(arn, None)

    def stop_execution(self, arn: str) -> None:
        for pipeline in self._backend().pipelines.values():
            if arn in pipeline.pipeline_executions:
                pipeline.pipeline_executions[arn].pipeline_execution_status = "Stopped"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield MotoAws(REGION)


def template(resources: dict) -> str:
    return json.dumps({"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources})


# What a deploy of the stage leaves, in small: the data bucket retained (as removal_policy retain would), the models
# bucket deleted with its stack, the stage key, a log group of the serving stack.
STORAGE = {
    "Data": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain", "Properties": {"BucketName": "integ-data"}},
    "Models": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "integ-models"}},
    # The policy as a string: moto's KMS reads the property with json.loads (CloudFormation takes either).
    "Key": {
        "Type": "AWS::KMS::Key",
        "DeletionPolicy": "Retain",
        "Properties": {
            "KeyPolicy": json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                            "Action": "kms:*",
                            "Resource": "*",
                        }
                    ],
                }
            )
        },
    },
}
TRAINING = {"Artifacts": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "integ-artifacts"}}}
# moto's CloudFormation makes no CloudWatch alarms: test_actions.py puts them with PutMetricAlarm.
SERVING = {"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/llmp-integ/integ/serving"}}}


@dataclass
class Deployed:
    """What the fake deploy made."""

    packages: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)


def deploy(aws: MotoAws, *, running_run: bool = True, packages: int = 1) -> Deployed:
    """What a real deploy, a fine-tuning run and its registration leave: three stacks, a model package group with
    versions, a pipeline run still going."""
    cloudformation = aws.client("cloudformation")
    for part, resources in (("storage", STORAGE), ("training", TRAINING), ("serving", SERVING)):
        cloudformation.create_stack(StackName=NAMES.stack(part), TemplateBody=template(resources))
    aws.client("logs").create_log_group(logGroupName=f"/aws/sagemaker/Endpoints/{NAMES.endpoint}")
    sagemaker = aws.client("sagemaker")
    group = NAMES.pipelines.model_package_group
    sagemaker.create_model_package_group(ModelPackageGroupName=group)
    made = Deployed()
    for _ in range(packages):
        made.packages.append(
            sagemaker.create_model_package(
                ModelPackageGroupName=group,
                ModelApprovalStatus="PendingManualApproval",
                InferenceSpecification={
                    "Containers": [{"Image": "123.dkr.ecr.us-east-1.amazonaws.com/lmi:latest"}],
                    "SupportedContentTypes": ["application/json"],
                    "SupportedResponseMIMETypes": ["application/json"],
                },
                ModelMetrics={
                    "ModelQuality": {
                        "Statistics": {"ContentType": "application/json", "S3Uri": "s3://integ-data/evaluation.json"}
                    }
                },
            )["ModelPackageArn"]
        )
    definition = json.dumps({"Version": "2020-12-01", "Parameters": [], "Steps": []})
    sagemaker.create_pipeline(PipelineName=NAMES.pipelines.finetune, PipelineDefinition=definition, RoleArn=ROLE)
    if running_run:
        arn = sagemaker.start_pipeline_execution(PipelineName=NAMES.pipelines.finetune)["PipelineExecutionArn"]
        pipeline = sagemaker_backends[ACCOUNT][REGION].pipelines[NAMES.pipelines.finetune]
        pipeline.pipeline_executions[arn].pipeline_execution_status = "Executing"
        made.running.append(arn)
    return made


def cdk_destroy(aws: MotoAws, *, fail_on: str | None = None):
    """What `cdk destroy` does, on moto: delete the stage's stacks, serving first. `fail_on` raises as the CLI
    does when a stack will not delete, after deleting the ones before it."""

    def destroy(timeout_s: float) -> None:
        cloudformation = aws.client("cloudformation")
        for part in ("serving", "training", "storage"):
            if part == fail_on:
                raise RuntimeError(f"cdk destroy: {NAMES.stack(part)} failed to delete")
            cloudformation.delete_stack(StackName=NAMES.stack(part))

    return destroy
