"""A stage deployed onto moto, as `llmp` finds one: the storage stack's key and buckets made by CloudFormation, the
pipelines, model package group and endpoint by the SageMaker API, named by the training and serving stacks' outputs.

tests/cli/ (conftest.py) runs the CLI against it, and cli/reference/transcript.py records a session against it,
with a fine-tuning run played look by look (ScriptedRun). It needs moto's `mock_aws` around it and takes the client
factory of its caller (the CLI's: one loader of API models for the whole process). It imports nothing of cli/.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse

ACCOUNT = "123456789012"  # moto's
OTHER_ACCOUNT = "999999999999"
REGION = "us-east-1"
PROJECT = "llm-platform"

# The fine-tuning pipeline's definition in the shape the SageMaker SDK writes it (infrastructure/constructs/
# training_pipeline/finetune_pipeline.py; tests/cli/test_outputs.py reads the synthesized one): parameters with types
# and defaults, a Condition step with its branches.
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
INFERENCE_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121"

Client = Callable[[str], Any]  # service name -> a boto3 client in REGION


@dataclass
class Deployed:
    """What a stage's stacks made, by the names its outputs give."""

    data_bucket: str
    models_bucket: str
    key_arn: str
    stage: str = "dev"

    @property
    def finetune(self) -> str:
        return f"{PROJECT}-{self.stage}-finetune"

    @property
    def staging(self) -> str:
        return f"{PROJECT}-{self.stage}-stage-weights"

    @property
    def group(self) -> str:
        return f"{PROJECT}-{self.stage}"

    @property
    def endpoint(self) -> str:
        return f"{PROJECT}-{self.stage}"

    @property
    def role(self) -> str:
        return f"arn:aws:iam::{ACCOUNT}:role/{PROJECT}/{self.stage}/pipelines"


def create_stack(client: Client, name: str, template: dict) -> dict:
    cloudformation = client("cloudformation")
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    return cloudformation.describe_stacks(StackName=name)["Stacks"][0]


def literal_outputs(values: dict[str, str]) -> dict:
    """A template whose only purpose is its outputs (a template needs a resource: one moto's CloudFormation makes)."""
    return {
        "Resources": {"Placeholder": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in values.items()},
    }


STORAGE_TEMPLATE = {
    "Resources": {
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Version": "2012-10-17", "Statement": []}}},
        "Data": {"Type": "AWS::S3::Bucket"},
        "Models": {"Type": "AWS::S3::Bucket"},
    },
    "Outputs": {
        "DataBucketName": {"Value": {"Ref": "Data"}},
        "ModelsBucketName": {"Value": {"Ref": "Models"}},
        "KeyArn": {"Value": {"Fn::GetAtt": ["Key", "Arn"]}},
    },
}


def deploy(client: Client, stage: str = "dev") -> Deployed:
    """The stage's three stacks, its two pipelines, its model package group and its endpoint, in service."""
    storage = create_stack(client, f"{PROJECT}-{stage}-storage", STORAGE_TEMPLATE)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in storage["Outputs"]}
    found = Deployed(outputs["DataBucketName"], outputs["ModelsBucketName"], outputs["KeyArn"], stage)
    training = {
        "FinetunePipelineName": found.finetune,
        "StagingPipelineName": found.staging,
        "ModelPackageGroupName": found.group,
        "TrainingCodeUri": "s3://artifacts/code/training.tar.gz",
    }
    create_stack(client, f"{PROJECT}-{stage}-training", literal_outputs(training))
    serving = {"EndpointName": found.endpoint, "InferenceCodeUri": "s3://artifacts/code/model.tar.gz"}
    create_stack(client, f"{PROJECT}-{stage}-serving", literal_outputs(serving))
    sagemaker = client("sagemaker")
    for name, definition in ((found.finetune, FINETUNE_DEFINITION), (found.staging, STAGING_DEFINITION)):
        sagemaker.create_pipeline(PipelineName=name, PipelineDefinition=json.dumps(definition), RoleArn=found.role)
    sagemaker.create_model_package_group(ModelPackageGroupName=found.group)
    sagemaker.create_model(ModelName="lmi", ExecutionRoleArn=found.role, PrimaryContainer={"Image": INFERENCE_IMAGE})
    variant = {"VariantName": "AllTraffic", "ModelName": "lmi", "InitialInstanceCount": 1}
    sagemaker.create_endpoint_config(
        EndpointConfigName="lmi", ProductionVariants=[{**variant, "InstanceType": "ml.g4dn.xlarge"}]
    )
    sagemaker.create_endpoint(EndpointName=found.endpoint, EndpointConfigName="lmi")
    return found


def register_package(client: Client, group: str, status: str = "PendingManualApproval") -> str:
    """A model version as the pipeline's Register step makes one; returns its ARN."""
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


class Clock:
    """The one time of a session against moto (its caller makes moto read it); a scripted run's looks move it."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def naive(self) -> datetime.datetime:  # as moto's utcnow(): naive UTC
        return self.now.replace(tzinfo=None)


# One look at a run: when, the run's status, and {step name: (status, started, ended or None)}.
Look = tuple[datetime.datetime, str, dict[str, tuple[str, datetime.datetime, datetime.datetime | None]]]


class ScriptedRun:
    """A fine-tuning run as SageMaker reports it while it goes, look by look. moto starts a run but runs no step (and
    lacks ListPipelineExecutionSteps): DescribePipelineExecution and ListPipelineExecutionSteps answer from `looks`,
    and what the steps make appears in moto when a look reports it: the Train step's training job `job` ("{run}":
    the run's id) with `job_log` in CloudWatch, the Register step's model version. After the last look, moto answers
    (its runs succeed at once)."""

    def __init__(
        self, clock: Clock, client: Client, deployed: Deployed, looks: list[Look], *, job: str, job_log: list[str]
    ) -> None:
        self.clock, self.client, self.deployed = clock, client, deployed
        self.looks, self.job, self.job_log = list(looks), job, job_log
        self.id = ""  # the run's, once looked at
        self.steps: list[dict[str, Any]] = []

    def hook(self, sagemaker: Any) -> None:
        """Answer the two calls on this client (botocore's before-call: what its Stubber uses)."""
        events = sagemaker.meta.events
        events.register("before-call.sagemaker.DescribePipelineExecution", self._describe, unique_id="run-describe")
        events.register("before-call.sagemaker.ListPipelineExecutionSteps", self._list_steps, unique_id="run-steps")

    def _describe(self, params: dict[str, Any], **_: Any) -> Any:
        if not self.looks:
            return None
        self.clock.now, status, steps = self.looks.pop(0)
        arn = json.loads(params["body"])["PipelineExecutionArn"]
        self.id = arn.rpartition("/")[2]
        job = self.job.format(run=self.id)
        if "Train" in steps and not any(s["StepName"] == "Train" for s in self.steps):
            self._start_training(job)
        self.steps = [self._step(name, *state, job) for name, state in steps.items()]
        if status == "Succeeded":
            register_package(self.client, self.deployed.group)
        return _answer({"PipelineExecutionArn": arn, "PipelineExecutionStatus": status})

    def _list_steps(self, **_: Any) -> Any:
        return _answer({"PipelineExecutionSteps": self.steps[::-1]})  # newest first, as asked for

    def _step(self, name: str, status: str, started: Any, ended: Any, job: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"StepName": name, "StepStatus": status, "StartTime": started}
        if ended is not None:
            entry["EndTime"] = ended
        arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}"
        entry["Metadata"] = {
            "Train": {"TrainingJob": {"Arn": f"{arn}:training-job/{job}"}},
            "CheckPerplexity": {"Condition": {"Outcome": "True"}},
            "Register-RegisterModel": {"RegisterModel": {"Arn": f"{arn}:model-package/{self.deployed.group}/1"}},
        }.get(name, {})
        return entry

    def _start_training(self, job: str) -> None:
        """The training job the Train step makes, and its log lines in CloudWatch, a minute apart."""
        self.client("sagemaker").create_training_job(
            TrainingJobName=job,
            AlgorithmSpecification={"TrainingImage": INFERENCE_IMAGE, "TrainingInputMode": "File"},
            RoleArn=self.deployed.role,
            OutputDataConfig={"S3OutputPath": f"s3://{self.deployed.models_bucket}/training/"},
            ResourceConfig={"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1, "VolumeSizeInGB": 200},
            StoppingCondition={"MaxRuntimeInSeconds": 86400},
        )
        logs, group, stream = self.client("logs"), "/aws/sagemaker/TrainingJobs", f"{job}/algo-1-1777885740"
        logs.create_log_group(logGroupName=group)
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        start = int(self.clock.now.timestamp() * 1000)
        events = [{"timestamp": start + 60_000 * n, "message": line} for n, line in enumerate(self.job_log)]
        logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def _answer(parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    """A before-call handler's answer: botocore uses it instead of sending the request."""
    return AWSResponse(None, 200, {}, None), {**parsed, "ResponseMetadata": {"HTTPStatusCode": 200}}
