"""The SageMaker Python SDK 2.x, run offline at synth to write the training pipelines' definitions, and the pieces
both pipelines share.

The SDK writes the definitions (SDK 3.x cannot express SMP v1: docs/sagemaker-sdk.md). It makes no AWS call:
every code and data location is an S3 URI, the session has placeholder credentials and its own config (no SDK
config file is read, telemetry is off), and job names are left to the pipeline. Values only known at deploy time
(bucket names, code archive keys, the role and key) are `${Name}` placeholders that the construct resolves with
Fn::Sub. Same config, same JSON.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from unittest import mock

from core.catalog.models import StagedWeights
from core.config import TrainingConfig

# Deploy-time values, as Fn::Sub variables (plus CloudFormation's pseudo parameters).
PLACEHOLDERS = (
    "DataBucket",
    "ModelsBucket",
    "ArtifactsBucket",
    "TrainingCodeKey",
    "HandlerFolder",
    "TrainingRoleName",
    "StagingRoleName",
    "RegistryRoleName",
    "KeyArn",
)
PSEUDO_PARAMETERS = ("AWS::Partition", "AWS::AccountId")
SDK_CONFIG = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}

# Where processing containers find things (SageMaker's conventions; prepare_data.py and evaluate.py defaults).
PROCESSING = "/opt/ml/processing"
CODE_ARCHIVE = f"{PROCESSING}/input/code/sourcedir.tar.gz"


def sub(name: str) -> str:
    if name not in PLACEHOLDERS:
        raise ValueError(f"unknown placeholder {name!r}")
    return "${" + name + "}"


def placeholders_in(definition: str) -> set[str]:
    """The `${Name}`s a definition uses. All must be known: Fn::Sub would try to resolve any other `${...}`."""
    found = set(re.findall(r"\$\{([^}]*)\}", definition))
    unknown = found - set(PLACEHOLDERS) - set(PSEUDO_PARAMETERS)
    if unknown:
        raise ValueError(f"pipeline definition contains unknown placeholders {sorted(unknown)}")
    return found


@functools.cache
def sdk_classes() -> SimpleNamespace:
    """The SageMaker SDK classes the pipelines are built from, imported here on first use rather than with this
    module: importing the SDK costs about 2 s, and a synth whose definitions synth_cache serves never needs it."""
    # deferred: importing the SDK takes about 2 s, and a synth served from synth_cache never needs it
    from sagemaker import inputs, model, model_metrics, network, processing, pytorch, utils
    from sagemaker.workflow import (
        condition_step,
        conditions,
        execution_variables,
        fail_step,
        functions,
        model_step,
        parameters,
        pipeline,
        properties,
        steps,
    )

    return SimpleNamespace(
        TrainingInput=inputs.TrainingInput,
        NetworkConfig=network.NetworkConfig,
        Processor=processing.Processor,
        volume_size_supported=utils.volume_size_supported,
        Model=model.Model,
        MetricsSource=model_metrics.MetricsSource,
        ModelMetrics=model_metrics.ModelMetrics,
        ProcessingInput=processing.ProcessingInput,
        ProcessingOutput=processing.ProcessingOutput,
        PyTorch=pytorch.PyTorch,
        ConditionStep=condition_step.ConditionStep,
        ConditionLessThanOrEqualTo=conditions.ConditionLessThanOrEqualTo,
        ExecutionVariables=execution_variables.ExecutionVariables,
        FailStep=fail_step.FailStep,
        Join=functions.Join,
        JsonGet=functions.JsonGet,
        ModelStep=model_step.ModelStep,
        ParameterFloat=parameters.ParameterFloat,
        ParameterInteger=parameters.ParameterInteger,
        ParameterString=parameters.ParameterString,
        Pipeline=pipeline.Pipeline,
        PropertyFile=properties.PropertyFile,
        ProcessingStep=steps.ProcessingStep,
        TrainingStep=steps.TrainingStep,
    )


@functools.cache
def _offline_boto_session(region: str):
    """One per region and process: botocore then parses each service model once, not once per definition."""
    # deferred: boto3's import is slow (with botocore's), and a synth served from synth_cache never needs it
    import boto3

    return boto3.Session(region_name=region, aws_access_key_id="offline", aws_secret_access_key="offline")


@functools.cache
def _validate_sdk_config() -> None:
    # deferred: the SDK's import is slow, and a synth served from synth_cache never needs it
    from sagemaker.config import validate_sagemaker_config

    validate_sagemaker_config(SDK_CONFIG)


@contextlib.contextmanager
def offline_session(region: str) -> Iterator:
    """A PipelineSession that cannot reach AWS and reads no SDK config file.

    Placeholder credentials: parts of the SDK build clients from boto3's default session, so that session is
    replaced too, and real credentials are neither looked for nor used.
    """
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    logging.getLogger("sagemaker").setLevel(logging.ERROR)  # config search and pipeline-variable notices
    # deferred: after the logging level is set; boto3 and the SDK are slow imports a cached synth never needs
    import boto3

    # deferred: as boto3 above
    import sagemaker.session as sagemaker_session

    # deferred: as boto3 above
    from sagemaker import utils as sagemaker_utils

    # deferred: as boto3 above
    from sagemaker.workflow.pipeline_context import PipelineSession

    offline = _offline_boto_session(region)
    boto3.DEFAULT_SESSION, previous_default = offline, boto3.DEFAULT_SESSION
    # The SDK re-validates its defaults config against a JSON schema on every lookup (60 per definition, 20 s in
    # all) and again in each Session (through the name sagemaker.session imported); ours is a constant, validated
    # once per process here, so those skip it.
    _validate_sdk_config()
    skip_validation = lambda config: None  # noqa: E731
    try:
        with (
            mock.patch.object(sagemaker_utils, "validate_sagemaker_config", skip_validation),
            mock.patch.object(sagemaker_session, "validate_sagemaker_config", skip_validation),
            warnings.catch_warnings(),
        ):
            # "Running within a PipelineSession, there will be No Wait, No Logs...": exactly the point.
            warnings.filterwarnings("ignore", message="Running within a PipelineSession")
            yield PipelineSession(
                boto_session=offline, sagemaker_config=SDK_CONFIG, default_bucket=sub("ArtifactsBucket")
            )
    finally:
        boto3.DEFAULT_SESSION = previous_default


def s3(bucket: str, path: str = "") -> str:
    return f"s3://{sub(bucket)}/{path}"


def role_arn(role: str = "TrainingRoleName") -> str:
    # An ARN, not a name: the SDK looks a bare role name up in IAM. CloudFormation fills in the pseudo parameters.
    return f"arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:role/{sub(role)}"


def volume_key(instance_type: str) -> str | None:
    """The stage key for a job's storage volume, where SageMaker allows one (not on local-NVMe instance types)."""
    return sub("KeyArn") if sdk_classes().volume_size_supported(instance_type) else None


def network(training: TrainingConfig):
    return sdk_classes().NetworkConfig(
        enable_network_isolation=False,  # the jobs install training/requirements.txt from PyPI
        encrypt_inter_container_traffic=True,
        security_group_ids=list(training.vpc.security_group_ids) if training.vpc else None,
        subnets=list(training.vpc.subnet_ids) if training.vpc else None,
    )


def processor(
    session,
    training: TrainingConfig,
    *,
    region: str,
    name: str,
    instance_type: str,
    script: str,
    image: str,
    volume_size_gib: int = 30,  # the SDK's default
    role: str = "TrainingRoleName",
):
    """A processing job running one script of the training sourcedir in `image`, with `role` (a placeholder naming
    the role).

    The job's code is the same sourcedir.tar.gz the training job runs: unpack it, install what the image lacks
    (training/requirements.txt, the hashed lock), and run the script with the step's arguments.
    """
    # The job can write to the stage's buckets, so pip installs nothing the lock has not hashed: --require-hashes
    # refuses any file whose sha256 the lock does not list and any package it would have to fetch that the lock
    # does not pin, and --only-binary keeps sdists' build code from running. The lock carries both options too
    # (the training toolkit passes none); here they hold whatever the file says. Not --no-deps: the lock leaves
    # what the image ships (torch, numpy, requests...) to the image, and with dependency resolution on, pip checks
    # the image's copies satisfy the locked packages and refuses to start if one is missing or too old.
    command = (
        f"set -eu; mkdir -p /opt/ml/code && tar -xzf {CODE_ARCHIVE} -C /opt/ml/code && cd /opt/ml/code "
        "&& python3 -m pip install --quiet --no-input --require-hashes --only-binary=:all: -r requirements.txt "
        f'&& exec python3 {script} "$@"'
    )
    return sdk_classes().Processor(
        role=role_arn(role),
        image_uri=image,
        instance_count=1,
        instance_type=instance_type,
        volume_size_in_gb=volume_size_gib,
        entrypoint=["bash", "-c", command, script],
        volume_kms_key=volume_key(instance_type),
        output_kms_key=sub("KeyArn"),
        network_config=network(training),
        max_runtime_in_seconds=training.max_runtime_hours * 3600,
        base_job_name=name,
        sagemaker_session=session,
    )


def code_input():
    return sdk_classes().ProcessingInput(
        source=s3("ArtifactsBucket", sub("TrainingCodeKey")),
        destination=os.path.dirname(CODE_ARCHIVE),
        input_name="code",
    )


def staged_commit(staged: StagedWeights):
    """The commit a run reads, from the record staging wrote last (the pinned commit's, or main's): read by
    SageMaker Pipelines when the run reaches the step (JsonGet on an S3 object, with the pipeline role), so a run
    never reads a staging that stopped half-way, and a run started after a new staging of main reads the new commit
    while one already running keeps its own. The training stack cannot read it when it deploys: it creates the
    staging pipeline, so nothing is staged yet on its first deploy."""
    sdk = sdk_classes()
    return sdk.JsonGet(s3_uri=sdk.Join(on="", values=[s3("ModelsBucket", staged.record_key)]), json_path="commit")


def staged_uri(staged: StagedWeights):
    """s3://<models>/pretrained/<name>/<commit>/: exactly the commit's files, never another commit's."""
    return sdk_classes().Join(on="", values=[s3("ModelsBucket", staged.prefix), staged_commit(staged), "/"])


def serialize(pipeline) -> str:
    definition = pipeline.definition()
    placeholders_in(definition)
    return json.dumps(json.loads(definition), sort_keys=True, separators=(",", ":"))
