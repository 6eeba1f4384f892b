"""`llmp stage-weights`, `llmp finetune` and `llmp follow`: start the stage's pipelines and follow their runs."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer

from cli import aws as aws_module
from cli import follow as following
from cli.aws import Aws, Stage
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output
from cli.run_parameters import check_input_data, pipeline_parameters, run_parameters_help
from core.catalog.models import StagedWeights

FollowOption = Annotated[
    bool, typer.Option("--follow/--no-follow", help="follow the run's steps until it ends (Ctrl-C detaches)")
]


@handled
def finetune(
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param", "-p", help="NAME=VALUE for one of the pipeline's run parameters (listed above); repeatable"
        ),
    ] = None,
    follow: FollowOption = True,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Start the stage's fine-tuning pipeline (prepare, train, evaluate, register) and follow it until it ends."""
    out = Output(json_mode=json_output)
    aws, target = _connect(config, stage)
    name = aws.outputs(target, "training")["FinetunePipelineName"]
    sagemaker = aws.client("sagemaker", target.region)
    with aws_errors():
        definition = sagemaker.describe_pipeline(PipelineName=name)["PipelineDefinition"]
    parameters = pipeline_parameters(param or [], definition, name)
    if "InputData" in parameters:
        check_input_data(parameters["InputData"], aws.outputs(target, "storage")["DataBucketName"])
    _start_and_follow(out, aws, target, name, definition, parameters, follow=follow, kind="fine-tuning")


# `finetune --help` lists the run parameters as the pipeline's source declares them (typer reads the docstring).
finetune.__doc__ = (finetune.__doc__ or "") + run_parameters_help()


@handled
def stage_weights(
    model: Annotated[
        str | None,
        typer.Argument(help="the model to stage, as the config names it (gpt-j-6b) or its Hugging Face id"),
    ] = None,
    revision: Annotated[
        str | None, typer.Option("--revision", help="the commit the config pins for it (default: what it says)")
    ] = None,
    follow: FollowOption = True,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Copy the pretrained weights the stage's config names into its models bucket (the weights-staging pipeline).
    It has no parameters: it stages exactly the repositories and commits of the config; MODEL and --revision check
    that the config says what you expect."""
    out = Output(json_mode=json_output)
    aws, target = _connect(config, stage)
    staged = staged_by_config(target)
    expected(target, staged, model, revision)
    name = aws.outputs(target, "training")["StagingPipelineName"]
    sagemaker = aws.client("sagemaker", target.region)
    with aws_errors():
        definition = sagemaker.describe_pipeline(PipelineName=name)["PipelineDefinition"]
    out.notes.print("stages: " + "; ".join(w.describe() for _, w in staged), markup=False)
    run = _start_and_follow(out, aws, target, name, definition, {}, follow=follow, kind="weights-staging", end=False)
    if run is not None and run.status == "Succeeded":
        for _, weights in staged:
            commit = _staged_commit(aws, target, weights)
            out.notes.print(f"staged {weights.hf_id} at commit {commit or '?'} in {weights.prefix}", markup=False)
    _end(out, run, definition, name, target, staging=True)


@handled
def follow(
    run: Annotated[
        str | None, typer.Argument(help="a run's ARN (default: the newest run of the stage's pipeline)")
    ] = None,
    staging: Annotated[
        bool, typer.Option("--staging", help="the weights-staging pipeline's newest run, not fine-tuning's")
    ] = False,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Follow a run of the stage's pipelines until it ends (again, after Ctrl-C detached from it)."""
    out = Output(json_mode=json_output)
    aws, target = _connect(config, stage)
    sagemaker = aws.client("sagemaker", target.region)
    outputs = aws.outputs(target, "training")
    pipeline = outputs["StagingPipelineName" if staging else "FinetunePipelineName"]
    with aws_errors():
        if run is None:
            runs = sagemaker.list_pipeline_executions(
                PipelineName=pipeline, SortBy="CreationTime", SortOrder="Descending", MaxResults=1
            )["PipelineExecutionSummaries"]
            if not runs:
                start = "llmp stage-weights" if staging else "llmp finetune"
                raise CliError(
                    f"{pipeline} has never run: start it with `{start} --stage {target.name}`", Exit.AWS_STATE
                )
            run = runs[0]["PipelineExecutionArn"]
        elif run.split(":")[3:4] != [target.region]:
            raise CliError(
                f"{run} is not the ARN of a pipeline run in {target.region} (stage {target.name})", Exit.USAGE
            )
        definition = sagemaker.describe_pipeline_definition_for_execution(PipelineExecutionArn=run)[
            "PipelineDefinition"
        ]
    out.notes.print(f"following {run}", markup=False)
    _end(out, _follow(out, sagemaker, target, run, definition), definition, pipeline, target, staging=staging)


def _connect(config: Any, stage: str | None) -> tuple[Aws, Stage]:
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    return aws, target


def staged_by_config(target: Stage) -> list[tuple[str, StagedWeights]]:
    """(config model name, what is staged) for each repository the stage's staging pipeline copies."""
    found: dict[tuple[str, str | None], tuple[str, StagedWeights]] = {}
    candidates = [(target.config.training.model, target.config.training.staged_weights)]
    if target.config.serving.staged_weights is not None:
        candidates.append((target.config.serving.model, target.config.serving.staged_weights))
    for model, weights in candidates:
        found.setdefault((weights.name, weights.revision), (model, weights))
    return list(found.values())


def expected(target: Stage, staged: list[tuple[str, StagedWeights]], model: str | None, revision: str | None) -> None:
    """Exit 2 unless the config stages `model` (at `revision`): the pipeline cannot be told to stage anything else."""
    what = "; ".join(w.describe() for _, w in staged)
    if model is not None:
        matches = [w for name, w in staged if model in (name, w.name, w.hf_id)]
        if not matches:
            raise CliError(
                f"stage {target.name} stages {what}, not {model}: to stage {model}, make it training.model or "
                f"serving.model of stage {target.name} in {target.config_path} and deploy",
                Exit.USAGE,
            )
    else:
        matches = [w for _, w in staged]
    if revision is not None:
        for weights in matches:
            if revision != weights.staged_revision:
                raise CliError(
                    f"stage {target.name} stages {weights.describe()}, not {revision}: pin it in {target.config_path} "
                    "(training.pretrained.revision, serving.weights.revision) and deploy",
                    Exit.USAGE,
                )


def _start_and_follow(
    out: Output,
    aws: Aws,
    target: Stage,
    pipeline: str,
    definition: str,
    parameters: dict[str, str],
    *,
    follow: bool,
    kind: str,
    end: bool = True,
) -> following.Run | None:
    sagemaker = aws.client("sagemaker", target.region)
    with aws_errors():
        arn = sagemaker.start_pipeline_execution(
            PipelineName=pipeline,
            PipelineParameters=[{"Name": name, "Value": value} for name, value in parameters.items()],
            PipelineExecutionDescription=f"started with llmp ({kind})",
            ClientRequestToken=str(uuid.uuid4()),
        )["PipelineExecutionArn"]
    out.notes.print(f"started {pipeline}: {arn}", markup=False)
    if not follow:
        out.result(
            {"pipeline": pipeline, "run": arn, "status": "Executing", "parameters": parameters},
            lambda console: console.print(
                f"follow it: llmp follow {arn} --stage {target.name}", markup=False, highlight=False
            ),
        )
        return None
    run = _follow(out, sagemaker, target, arn, definition)
    if end:
        _end(out, run, definition, pipeline, target, parameters)
    return run


def _follow(out: Output, sagemaker: Any, target: Stage, arn: str, definition: str) -> following.Run:
    try:
        with aws_errors():
            # Progress on the notes console: stdout for a person, stderr with --json (stdout holds only the result).
            return following.follow(sagemaker, arn, definition, console=out.notes)
    except KeyboardInterrupt:
        raise CliError(
            f"detached; the run goes on. Follow it again: llmp follow {arn} --stage {target.name}  (stop it: aws "
            f"sagemaker stop-pipeline-execution --pipeline-execution-arn {arn} --region {target.region})",
            Exit.DETACHED,
        ) from None


def _end(
    out: Output,
    run: following.Run | None,
    definition: str,
    pipeline: str,
    target: Stage,
    parameters: dict[str, str] | None = None,
    *,
    staging: bool = False,
) -> None:
    """The run's outcome as the result, and what to do next; exit 1 unless it succeeded."""
    if run is None:
        return
    order, _ = following.definition_steps(definition)
    after = next_steps(run, order, target, staging=staging)
    data = {"pipeline": pipeline, "parameters": parameters or {}, **run.as_json(order), "next": after}

    def human(console: Any) -> None:
        message = f"{pipeline}: {run.status}" + (f": {run.failure}" if run.failure else "")
        console.print(message, markup=False)
        for line in after:
            console.print(line, markup=False, highlight=False)

    out.result(data, human)
    if run.status != "Succeeded":
        raise typer.Exit(int(Exit.FAILED))


def next_steps(run: following.Run, order: list[str], target: Stage, *, staging: bool) -> list[str]:
    """What to do after the run: approve the version it registered, deploy on the weights it staged, or read the
    logs of the job that failed."""
    if run.status != "Succeeded":
        found = []
        for name in run.failed_steps():
            if job := run.job(name):
                found.append(f"{name} failed in {job.describe()}")
                found.append(f"read its logs: llmp logs --job {job.name} --stage {target.name}")
        return found
    registered = [_registered_version(run.steps[name].get("Metadata", {})) for name in order if name in run.steps]
    versions = [version for version in registered if version]
    if versions:
        return [
            f'version {v} awaits approval: llmp approve {v} --stage {target.name} -m "<why>"  (or llmp reject {v})'
            for v in versions
        ]
    if staging:
        config = "" if target.config_path.endswith("config/default.yaml") else f" CONFIG={target.config_path}"
        return [f"next: make deploy STAGE={target.name}{config}  (the endpoint starts on the staged weights)"]
    return []


def _registered_version(metadata: dict[str, Any]) -> str | None:
    """The version a RegisterModel step registered: arn:...:model-package/<group>/<version> -> <version>."""
    arn = metadata.get("RegisterModel", {}).get("Arn", "")
    version = arn.rpartition("/")[2]
    return version if version.isdigit() else None


def _staged_commit(aws: Aws, target: Stage, weights: StagedWeights) -> str | None:
    """The commit the staging recorded (its record, written after the last file), or None if it cannot be read."""
    try:
        bucket = aws.outputs(target, "storage")["ModelsBucketName"]
        with aws_errors():
            body = aws.client("s3", target.region).get_object(Bucket=bucket, Key=weights.record_key)["Body"].read()
        return json.loads(body).get("commit")
    except (CliError, ValueError):
        return None
