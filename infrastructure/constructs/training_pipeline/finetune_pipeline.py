"""The fine-tuning pipeline's definition, one function per step, each returning what the next steps read:

    PrepareData (processing) -> Train (SMP) -> Evaluate (processing, perplexity report)
        -> CheckPerplexity: perplexity <= threshold
             ? CopyToRegistry (processing: the weights into registered/<run>/) -> Register (PendingManualApproval)
             : Fail

Written by the SageMaker SDK, offline (offline_sdk.py).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from core import bucket_layout, synth_cache
from core.catalog import images
from core.config import ServingConfig, TrainingConfig
from core.naming import PipelineNames
from core.training_job import hyperparameters, smp_parameters
from infrastructure.constructs.training_pipeline import registration
from infrastructure.constructs.training_pipeline.offline_sdk import (
    PROCESSING,
    code_input,
    network,
    offline_session,
    processor,
    role_arn,
    s3,
    sdk_classes,
    serialize,
    staged_commit,
    staged_uri,
    sub,
    volume_key,
)
from training.finetune.metrics import METRIC_DEFINITIONS

# The SMP reference notebooks' MPI options; the EFA ones only make sense (and are only set) on instances with EFA.
BASE_MPI_OPTIONS = "-x NCCL_DEBUG=WARN -x SMDEBUG_LOG_LEVEL=ERROR"
EFA_MPI_OPTIONS = "-x FI_EFA_USE_DEVICE_RDMA=1 -x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"
# SMP v1's own variables, as AWS's GPT-J example passes them (amazon-sagemaker-examples, archived/
# smp-train-gptj-sharded-data-parallel-tp), each only where it does what the example wants:
# - D2D is SMP's device-to-device transport between pipeline partitions. Without a pipeline it carries nothing, and
#   turning it off (with a 1-byte receive buffer) keeps its GPU buffer from being reserved; SMP 1.12.1 already skips
#   it when partitions is 1 (backend/core.py), the variables hold that whatever a later SMP does. With a pipeline it
#   is the activations' transport: left on.
SMP_NO_D2D_MPI_OPTIONS = "-x SMP_DISABLE_D2D=1 -x SMP_D2D_GPU_BUFFER_SIZE_BYTES=1"
# - At most one of SMP's tensor-parallel NCCL collectives in flight (default 8): each holds its buffers while it
#   runs, so fewer in flight use less GPU memory, for some throughput (AWS: "Tips and pitfalls", tensor parallelism;
#   SMP 1.12.1 torch/throttler.py). Only the tensor-parallel modules' collectives are throttled.
SMP_TENSOR_PARALLEL_MPI_OPTIONS = "-x SMP_NCCL_THROTTLE_LIMIT=1"


def distribution(training: TrainingConfig) -> dict | None:
    """The estimator's `distribution`: SMP over MPI (v1), or SMP over torch.distributed (v2, also for adapters over a
    sharded base); for the other adapters, torchrun with one process per GPU (DDP) when there is more than one, else
    none (`python train.py`)."""
    if training.method != "full" and not training.shards_base:
        return {"torch_distributed": {"enabled": True}} if training.world_size > 1 else None
    modelparallel = {"smdistributed": {"modelparallel": {"enabled": True, "parameters": smp_parameters(training)}}}
    if training.smp.version == 2:
        return {"torch_distributed": {"enabled": True}, **modelparallel}
    return {
        "mpi": {
            "enabled": True,
            "processes_per_host": training.processes,
            "custom_mpi_options": smp_v1_mpi_options(training),
        },
        **modelparallel,
    }


def smp_v1_mpi_options(training: TrainingConfig) -> str:
    """The `-x NAME=VALUE` options mpirun exports to every SMP v1 process, for this layout and instance."""
    options = [BASE_MPI_OPTIONS]
    if training.smp.pipeline_parallel_degree == 1:
        options.append(SMP_NO_D2D_MPI_OPTIONS)
    if training.smp.tensor_parallel_degree > 1:
        options.append(SMP_TENSOR_PARALLEL_MPI_OPTIONS)
    if training.catalog_instance.efa:
        options.append(EFA_MPI_OPTIONS)
    return " ".join(options)


def per_run(bucket: str, prefix: str, *rest):
    """s3://<bucket>/<prefix><execution id>/<rest>: every run writes apart, and a retried run resumes."""
    sdk = sdk_classes()
    run = sdk.ExecutionVariables.PIPELINE_EXECUTION_ID
    return sdk.Join(on="/", values=[s3(bucket, prefix).rstrip("/"), run, *rest])


# What each step function returns to the next. The fields hold SDK objects, typed Any: the SDK is not imported with
# this module (sdk).


class RunParameters(NamedTuple):
    """What a run may change, in the order the pipeline declares them. The training instance type and count are not
    among them: processes per host, the EFA options, the volume key, SMP's layout checks, train.py's start-up checks
    and the memory estimates are all derived from them at synth, and a pipeline expression cannot derive any of those
    again from an override. Another instance type is a config change, checked and synthesized like any other."""

    max_steps: Any
    learning_rate: Any
    train_batch_size: Any
    perplexity_threshold: Any
    input_data: Any


class PreparedData(NamedTuple):
    """The PrepareData step and where it writes the tokenized splits."""

    step: Any
    train_uri: Any
    validation_uri: Any


class TrainedModel(NamedTuple):
    """The Train step and where it writes the fine-tuned weights (or the adapter's folder)."""

    step: Any
    weights_uri: Any


class RegisteredWeights(NamedTuple):
    """The registry step and the copy of the job's weights it writes, the one the model package names."""

    step: Any
    weights_uri: Any


class Evaluation(NamedTuple):
    """The Evaluate step and its perplexity report, which the condition reads."""

    step: Any
    report: Any


class RegisteredPackage(NamedTuple):
    """The Register step: the model package an endpoint runs."""

    step: Any


class PerplexityGate(NamedTuple):
    """The CheckPerplexity step, which registers the model or fails the run."""

    step: Any
    fail: Any


def run_parameters(training: TrainingConfig) -> RunParameters:
    """The run parameters, defaulting to the config's values."""
    sdk = sdk_classes()
    return RunParameters(
        max_steps=sdk.ParameterInteger("MaxSteps", default_value=training.max_steps),
        learning_rate=sdk.ParameterFloat("LearningRate", default_value=training.learning_rate),
        train_batch_size=sdk.ParameterInteger("TrainBatchSize", default_value=training.train_batch_size),
        perplexity_threshold=sdk.ParameterFloat("PerplexityThreshold", default_value=training.perplexity_threshold),
        input_data=sdk.ParameterString("InputData", default_value=s3("DataBucket", bucket_layout.RAW_DATA)),
    )


def prepare_step(session, training: TrainingConfig, *, region: str, parameters: RunParameters) -> PreparedData:
    """PrepareData: tokenizes the raw data with the staged model's tokenizer into train and validation splits."""
    sdk = sdk_classes()
    step = sdk.ProcessingStep(
        name="PrepareData",
        step_args=processor(
            session,
            training,
            region=region,
            name="prepare-data",
            instance_type=training.processing_instance_type,
            script="prepare_data.py",
            image=images.processing_image(region, training.processing_instance_type, training.smp.version),
        ).run(
            inputs=[
                sdk.ProcessingInput(
                    source=parameters.input_data, destination=f"{PROCESSING}/input/raw", input_name="raw"
                ),
                sdk.ProcessingInput(
                    source=staged_uri(training.staged_weights),
                    destination=f"{PROCESSING}/input/model",
                    input_name="model",
                ),
                code_input(),
            ],
            outputs=[
                sdk.ProcessingOutput(
                    output_name=split,
                    source=f"{PROCESSING}/output/{split}",
                    destination=per_run("DataBucket", bucket_layout.PREPARED_DATA, split),
                )
                for split in ("train", "validation")
            ],
            arguments=["--block_size", str(training.sequence_length), "--seed", str(training.seed)],
        ),
    )
    outputs = step.properties.ProcessingOutputConfig.Outputs
    return PreparedData(
        step=step, train_uri=outputs["train"].S3Output.S3Uri, validation_uri=outputs["validation"].S3Output.S3Uri
    )


def estimator(session, training: TrainingConfig, *, region: str, parameters: RunParameters):
    """The training job: train.py from the training sourcedir, distributed as the layout says (`distribution`)."""
    sdk = sdk_classes()
    framework_version, py_version = images.training_framework(training.smp.version)
    vpc = network(training)
    return sdk.PyTorch(
        entry_point="train.py",
        source_dir=s3("ArtifactsBucket", sub("TrainingCodeKey")),
        framework_version=framework_version,
        py_version=py_version,
        # SMP v2: the SDK can only check torch_distributed against a literal instance type; with the image
        # given (the same lookup it would make) it skips that check, which the config has already made.
        image_uri=images.training_image(region, 2) if training.smp.version == 2 else None,
        role=role_arn(),
        instance_type=training.instance_type,
        instance_count=training.instance_count,
        volume_size=training.volume_size_gib,
        volume_kms_key=volume_key(training.instance_type),
        output_kms_key=sub("KeyArn"),
        output_path=s3("ModelsBucket", bucket_layout.TRAINED),
        code_location=s3("ArtifactsBucket", f"{bucket_layout.CODE}training"),
        checkpoint_s3_uri=per_run("ModelsBucket", bucket_layout.CHECKPOINTS),
        distribution=distribution(training),
        hyperparameters=hyperparameters(
            training,
            max_steps=parameters.max_steps,
            learning_rate=parameters.learning_rate,
            train_batch_size=parameters.train_batch_size,
            # JSON-quoted: the training toolkit JSON-decodes each value, and a commit of digits (and one e) would
            # come back as a number.
            base_revision=sdk.Join(on="", values=['"', staged_commit(training.staged_weights), '"']),
        ),
        metric_definitions=METRIC_DEFINITIONS,
        use_spot_instances=training.spot.enabled,
        max_run=training.max_runtime_hours * 3600,
        max_wait=training.spot.max_wait_hours * 3600 if training.spot.enabled else None,
        encrypt_inter_container_traffic=True,
        subnets=vpc.subnets,
        security_group_ids=vpc.security_group_ids,
        disable_output_compression=True,  # the weights land as a plain folder the endpoint reads directly
        debugger_hook_config=False,
        disable_profiler=True,
        base_job_name="finetune",
        sagemaker_session=session,
    )


def train_step(
    session, training: TrainingConfig, *, region: str, parameters: RunParameters, prepared: PreparedData
) -> TrainedModel:
    """Train: fine-tunes the staged weights on the prepared splits."""
    sdk = sdk_classes()
    step = sdk.TrainingStep(
        name="Train",
        step_args=estimator(session, training, region=region, parameters=parameters).fit(
            inputs={
                "train": sdk.TrainingInput(prepared.train_uri, distribution="FullyReplicated"),
                "test": sdk.TrainingInput(prepared.validation_uri, distribution="FullyReplicated"),
                "model": sdk.TrainingInput(staged_uri(training.staged_weights), distribution="FullyReplicated"),
            }
        ),
    )
    return TrainedModel(step=step, weights_uri=step.properties.ModelArtifacts.S3ModelArtifacts)


def evaluate_step(
    session,
    training: TrainingConfig,
    *,
    region: str,
    prepared: PreparedData,
    trained: TrainedModel,
) -> Evaluation:
    """Evaluate: the fine-tuned model's perplexity on the validation split, as a JSON report. It writes nothing into
    the weights: the handler a registered package needs there is written by the serving stack's code-packaging
    function when it deploys the package (registration.py)."""
    sdk = sdk_classes()
    report = sdk.PropertyFile(name="EvaluationReport", output_name="evaluation", path="evaluation.json")
    # An adapter is evaluated applied to the base it was trained on (evaluate.py --base_model_dir).
    base = (
        [
            sdk.ProcessingInput(
                source=staged_uri(training.staged_weights), destination=f"{PROCESSING}/base", input_name="base"
            )
        ]
        if training.method != "full"
        else []
    )
    step = sdk.ProcessingStep(
        name="Evaluate",
        step_args=processor(
            session,
            training,
            region=region,
            name="evaluate",
            instance_type=training.evaluate_instance_type,
            script="evaluate.py",
            image=images.processing_image(region, training.evaluate_instance_type, training.smp.version),
        ).run(
            inputs=[
                sdk.ProcessingInput(source=trained.weights_uri, destination=f"{PROCESSING}/model", input_name="model"),
                sdk.ProcessingInput(
                    source=prepared.validation_uri, destination=f"{PROCESSING}/test", input_name="test"
                ),
                code_input(),
                *base,
            ],
            outputs=[
                sdk.ProcessingOutput(
                    output_name="evaluation",
                    source=f"{PROCESSING}/evaluation",
                    destination=per_run("DataBucket", bucket_layout.EVALUATION),
                ),
            ],
        ),
        property_files=[report],
    )
    return Evaluation(step=step, report=report)


def registry_step(session, training: TrainingConfig, *, region: str, trained: TrainedModel) -> RegisteredWeights:
    """CopyToRegistry: copies the job's weights, exactly the object versions it reads, into registered/<run>/ with
    the registry role, the only writer there (training/register_weights.py): the training role, which can still
    change trained/, cannot change what a model package names."""
    destination = per_run("ModelsBucket", bucket_layout.REGISTERED, "")
    step = sdk_classes().ProcessingStep(
        name="CopyToRegistry",
        step_args=processor(
            session,
            training,
            region=region,
            name="copy-to-registry",
            instance_type=training.processing_instance_type,
            script="register_weights.py",
            image=images.processing_image(region, training.processing_instance_type),
            role="RegistryRoleName",
        ).run(
            inputs=[code_input()],
            arguments=["--source", trained.weights_uri, "--destination", destination, "--region", region],
        ),
    )
    return RegisteredWeights(step=step, weights_uri=destination)


def registered_model(
    session,
    training: TrainingConfig,
    serving: ServingConfig,
    *,
    serving_image: str,
    registered_environment: tuple[tuple[str, str], ...],
    weights: RegisteredWeights,
):
    """The registered package's Model, the one an endpoint runs (registration.py): the LMI image, the registry's
    copy of the fine-tuned weights delivered by SageMaker, the engine's OPTION_* keys. An adapter's names its
    archive and its base."""
    env = (
        dict(registered_environment)
        if training.method == "full"
        else registration.adapter_environment(
            training,
            serving,
            weights.weights_uri,
            staged_commit(training.staged_weights),
            staged_uri(training.staged_weights),
        )
    )
    return sdk_classes().Model(
        image_uri=serving_image,
        model_data=registration.model_data(training, weights.weights_uri),
        env=env,
        role=role_arn(),
        sagemaker_session=session,
    )


def register_step(
    model, training: TrainingConfig, serving: ServingConfig, *, names: PipelineNames, weights: RegisteredWeights
) -> RegisteredPackage:
    """Register: the model package, pending manual approval, with its evaluation report and the exact commit it
    was fine-tuned from."""
    sdk = sdk_classes()
    step = sdk.ModelStep(
        name="Register",
        # The package names the registry's copy: it must be complete first.
        depends_on=[weights.step],
        step_args=model.register(
            content_types=["application/json"],
            response_types=["application/json"],
            inference_instances=[serving.instance_type],
            model_package_group_name=names.model_package_group,
            approval_status="PendingManualApproval",
            model_metrics=sdk.ModelMetrics(
                model_statistics=sdk.MetricsSource(
                    content_type="application/json",
                    s3_uri=per_run("DataBucket", bucket_layout.EVALUATION, "evaluation.json"),
                )
            ),
            description=f"{training.model} fine-tuned with SMP v{training.smp.version}"
            if training.method == "full"
            else f"{training.method.upper()} adapter (r={training.lora.r}) for {training.model}",
            # Which exact commit it was fine-tuned from, as the run read it.
            customer_metadata_properties={
                "PretrainedModel": training.staged_weights.hf_id,
                "PretrainedCommit": staged_commit(training.staged_weights),
                **({"Method": training.method, "BaseModel": training.model} if training.method != "full" else {}),
            },
        ),
    )
    return RegisteredPackage(step=step)


def perplexity_gate(
    evaluation: Evaluation, weights: RegisteredWeights, registered: RegisteredPackage, *, parameters: RunParameters
) -> PerplexityGate:
    """CheckPerplexity: copies the weights to the registry and registers the model when its perplexity is at most
    the run's threshold, else fails the run with both numbers."""
    sdk = sdk_classes()
    perplexity = sdk.JsonGet(
        step_name=evaluation.step.name, property_file=evaluation.report, json_path="metrics.perplexity.value"
    )
    fail = sdk.FailStep(
        name="PerplexityTooHigh",
        error_message=sdk.Join(
            on=" ",
            values=["Validation perplexity", perplexity, "is above the threshold", parameters.perplexity_threshold],
        ),
    )
    step = sdk.ConditionStep(
        name="CheckPerplexity",
        conditions=[sdk.ConditionLessThanOrEqualTo(left=perplexity, right=parameters.perplexity_threshold)],
        if_steps=[weights.step, registered.step],
        else_steps=[fail],
    )
    return PerplexityGate(step=step, fail=fail)


@functools.cache  # a stage is synthesized twice when a pipeline deploys it too; the definition is pure
@synth_cache.on_disk  # and so is kept on disk: most synths need neither the SDK's import nor its work
def finetune_definition(
    training: TrainingConfig,
    serving: ServingConfig,
    *,
    region: str,
    names: PipelineNames,
    serving_image: str,
    registered_environment: tuple[tuple[str, str], ...] | None = None,
) -> str:
    """The fine-tuning pipeline's definition JSON, with `${Placeholder}`s for deploy-time values.

    `registered_environment`: the registered package's OPTION_* environment (registration.environment). The stack
    passes it, so the definition's cache keys cover model_artifacts/<engine>/serving.properties, which it is rendered
    from and which synth_cache does not hash; None renders it here."""
    if registered_environment is None:
        registered_environment = registration.environment(serving, training, handler_folder=sub("HandlerFolder"))
    parameters = run_parameters(training)
    with offline_session(region) as session:
        prepared = prepare_step(session, training, region=region, parameters=parameters)
        trained = train_step(session, training, region=region, parameters=parameters, prepared=prepared)
        evaluation = evaluate_step(session, training, region=region, prepared=prepared, trained=trained)
        weights = registry_step(session, training, region=region, trained=trained)
        model = registered_model(
            session,
            training,
            serving,
            serving_image=serving_image,
            registered_environment=registered_environment,
            weights=weights,
        )
        registered = register_step(model, training, serving, names=names, weights=weights)
        gate = perplexity_gate(evaluation, weights, registered, parameters=parameters)
        return serialize(
            sdk_classes().Pipeline(
                name=names.finetune,
                parameters=list(parameters),
                steps=[prepared.step, trained.step, evaluation.step, gate.step],
                sagemaker_session=session,
            )
        )
