"""`llmp finetune`, `llmp stage-weights` and `llmp follow`: the runs they start (moto records them) and the steps they
follow (ListPipelineExecutionSteps, which moto lacks, through Stubber)."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from botocore.stub import ANY
from rich.console import Console

from cli import aws as aws_module
from cli import follow as following
from cli import run_parameters
from core.config import load_config
from tests.cli.conftest import ACCOUNT, FINETUNE_DEFINITION, REGION, STAGING_DEFINITION, client

RUN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/llm-platform-dev-finetune/execution/abc123def456"
T0 = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)


def started_parameters(pipeline: str) -> dict[str, str]:
    """The parameters of the newest run of `pipeline`, as SageMaker recorded them."""
    sagemaker = client("sagemaker")
    arn = sagemaker.list_pipeline_executions(PipelineName=pipeline)["PipelineExecutionSummaries"][0][
        "PipelineExecutionArn"
    ]
    listed = sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"]
    return {p["Name"]: p["Value"] for p in listed}


def test_finetune_starts_the_stage_pipeline_with_the_parameters_given(cli, deployed):
    result = cli("finetune", "--param", "MaxSteps=200", "-p", "LearningRate=2e-5", "--no-follow", "--json")

    assert result.exit_code == 0, result.output
    started = json.loads(result.stdout)
    assert started["pipeline"] == deployed.finetune
    assert started["run"].startswith(f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/{deployed.finetune}/execution/")
    assert started_parameters(deployed.finetune) == {"MaxSteps": "200", "LearningRate": "2e-5"}


def test_finetune_without_following_says_how_to_follow(cli, deployed):
    result = cli("finetune", "--no-follow")

    assert result.exit_code == 0, result.output
    assert "started llm-platform-dev-finetune: arn:aws:sagemaker:" in result.stdout
    assert "follow it: llmp follow arn:aws:sagemaker:" in result.stdout and "--stage dev" in result.stdout


def test_finetune_input_data_may_point_under_the_data_bucket_raw_prefix(cli, deployed):
    uri = f"s3://{deployed.data_bucket}/raw/run-2/"
    result = cli("finetune", "--param", f"InputData={uri}", "--no-follow")

    assert result.exit_code == 0, result.output
    assert started_parameters(deployed.finetune) == {"InputData": uri}


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("MaxSteps", "--param takes NAME=VALUE, got 'MaxSteps'"),
        (
            "Epochs=3",
            "llm-platform-dev-finetune has no parameter 'Epochs'; its parameters: MaxSteps (Integer, default 100)",
        ),
        ("MaxSteps=ten", "--param MaxSteps: 'ten' is not a Integer"),
        ("MaxSteps=0", "--param MaxSteps: '0' is not a Integer"),
        ("LearningRate=fast", "--param LearningRate: 'fast' is not a Float"),
        ("InputData=s3://elsewhere/raw/", "--param InputData: the pipeline may read only under s3://"),
    ],
)
def test_finetune_refuses_parameters_the_pipeline_would_not_take(cli, deployed, param, message):
    result = cli("finetune", "--param", param, "--no-follow")

    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    sagemaker = client("sagemaker")
    assert sagemaker.list_pipeline_executions(PipelineName=deployed.finetune)["PipelineExecutionSummaries"] == []


def test_stage_weights_starts_the_staging_pipeline_without_parameters(cli, deployed):
    result = cli("stage-weights", "gpt-j-6b", "--no-follow", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pipeline"] == deployed.staging
    assert started_parameters(deployed.staging) == {}
    assert "stages: EleutherAI/gpt-j-6b at" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["opt-30b"], "stage dev stages EleutherAI/gpt-j-6b at"),
        (["gpt-j-6b", "--revision", "0" * 40], "pin it in"),
    ],
)
def test_stage_weights_refuses_what_the_config_does_not_stage(cli, deployed, args, message):
    result = cli("stage-weights", *args, "--no-follow")

    assert result.exit_code == 2, result.output
    assert message in result.stderr
    sagemaker = client("sagemaker")
    assert sagemaker.list_pipeline_executions(PipelineName=deployed.staging)["PipelineExecutionSummaries"] == []


def test_stage_weights_accepts_the_hugging_face_id_and_the_followed_branch(cli, deployed):
    result = cli("stage-weights", "EleutherAI/gpt-j-6b", "--revision", "main", "--no-follow")

    assert result.exit_code == 0, result.output


# --- following a run: DescribePipelineExecution and ListPipelineExecutionSteps through Stubber ------------------


def step(name: str, status: str, minutes: int, ended: bool = True, **extra) -> dict:
    entry = {"StepName": name, "StepStatus": status, "StartTime": T0 + datetime.timedelta(minutes=minutes), **extra}
    if ended:
        entry["EndTime"] = T0 + datetime.timedelta(minutes=minutes + 5)
    return entry


def queue_finetune_start(sagemaker, parameters: list[dict] | None = None) -> None:
    definition = json.dumps(FINETUNE_DEFINITION)
    sagemaker.add_response(
        "describe_pipeline",
        {"PipelineName": "llm-platform-dev-finetune", "PipelineDefinition": definition},
        {"PipelineName": "llm-platform-dev-finetune"},
    )
    sagemaker.add_response(
        "start_pipeline_execution",
        {"PipelineExecutionArn": RUN},
        {
            "PipelineName": "llm-platform-dev-finetune",
            "PipelineParameters": parameters or [],
            "PipelineExecutionDescription": ANY,
            "ClientRequestToken": ANY,
        },
    )


def queue_look(sagemaker, status: str, steps: list[dict], failure: str | None = None) -> None:
    execution = {"PipelineExecutionArn": RUN, "PipelineExecutionStatus": status}
    if failure:
        execution["FailureReason"] = failure
    sagemaker.add_response("describe_pipeline_execution", execution, {"PipelineExecutionArn": RUN})
    # Newest first, as the CLI asks for them.
    sagemaker.add_response(
        "list_pipeline_execution_steps",
        {"PipelineExecutionSteps": steps[::-1]},
        {"PipelineExecutionArn": RUN, "SortOrder": "Descending"},
    )


@pytest.fixture
def no_wait(monkeypatch):
    monkeypatch.setattr(following, "POLL_SECONDS", 0)


def test_finetune_follows_the_steps_until_the_run_succeeds(cli, deployed, stubbed, no_wait):
    sagemaker = stubbed("sagemaker")
    queue_finetune_start(sagemaker, [{"Name": "MaxSteps", "Value": "10"}])
    queue_look(
        sagemaker, "Executing", [step("PrepareData", "Succeeded", 0), step("Train", "Executing", 5, ended=False)]
    )
    queue_look(
        sagemaker,
        "Succeeded",
        [
            step("PrepareData", "Succeeded", 0),
            step(
                "Train",
                "Succeeded",
                5,
                Metadata={
                    "TrainingJob": {"Arn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/pipelines-abc-train"}
                },
            ),
            step("Evaluate", "Succeeded", 10),
            step("CheckPerplexity", "Succeeded", 15, Metadata={"Condition": {"Outcome": "True"}}),
            step("Register-RegisterModel", "Succeeded", 16),
        ],
    )

    result = cli("finetune", "-p", "MaxSteps=10")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.split()[:3] == ["Train", "Succeeded", "5m00s"] for line in lines), result.stdout
    assert any("CheckPerplexity" in line and "condition true" in line for line in lines)
    assert any(line.split()[:3] == ["PerplexityTooHigh", "not", "run"] for line in lines)
    assert lines[-1] == "llm-platform-dev-finetune: Succeeded"


def test_finetune_json_reports_each_step_of_a_failed_run_and_exits_1(cli, deployed, stubbed, no_wait):
    sagemaker = stubbed("sagemaker")
    queue_finetune_start(sagemaker)
    reason = "Validation perplexity 81.2 is above the threshold 50.0"
    queue_look(
        sagemaker,
        "Failed",
        [
            step("PrepareData", "Succeeded", 0),
            step("Train", "Succeeded", 5),
            step("Evaluate", "Succeeded", 10),
            step("CheckPerplexity", "Succeeded", 15, Metadata={"Condition": {"Outcome": "False"}}),
            step("PerplexityTooHigh", "Failed", 16, FailureReason=reason, Metadata={"Fail": {"ErrorMessage": reason}}),
        ],
        failure="Step failure: One or multiple steps failed.",
    )

    result = cli("finetune", "--json")

    assert result.exit_code == 1, result.output
    run = json.loads(result.stdout)
    assert run["status"] == "Failed"
    assert [(s["name"], s["status"]) for s in run["steps"]] == [
        ("PrepareData", "Succeeded"),
        ("Train", "Succeeded"),
        ("Evaluate", "Succeeded"),
        ("CheckPerplexity", "Succeeded"),
        ("Register-RegisterModel", None),
        ("PerplexityTooHigh", "Failed"),
    ]
    assert run["steps"][-1]["failure"] == reason


def test_ctrl_c_detaches_leaves_the_run_going_and_says_how_to_follow_again(cli, deployed, stubbed, monkeypatch):
    sagemaker = stubbed("sagemaker")
    queue_finetune_start(sagemaker)
    queue_look(sagemaker, "Executing", [step("PrepareData", "Executing", 0, ended=False)])

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(following.time, "sleep", interrupted)

    result = cli("finetune")

    assert result.exit_code == 130, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("llmp: detached; the run goes on. Follow it again: llmp follow " + RUN + " --stage dev")
    assert "stop-pipeline-execution" in line  # no StopPipelineExecution was called: the stub would have refused it


def test_follow_attaches_to_the_newest_run_with_the_definition_it_ran(cli, deployed, stubbed, no_wait):
    sagemaker = stubbed("sagemaker")
    sagemaker.add_response(
        "list_pipeline_executions",
        {"PipelineExecutionSummaries": [{"PipelineExecutionArn": RUN, "PipelineExecutionStatus": "Executing"}]},
        {
            "PipelineName": "llm-platform-dev-stage-weights",
            "SortBy": "CreationTime",
            "SortOrder": "Descending",
            "MaxResults": 1,
        },
    )
    sagemaker.add_response(
        "describe_pipeline_definition_for_execution",
        {"PipelineDefinition": json.dumps(STAGING_DEFINITION)},
        {"PipelineExecutionArn": RUN},
    )
    queue_look(sagemaker, "Succeeded", [step("Stage-gpt-j-6b", "Succeeded", 0)])

    result = cli("follow", "--staging", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"][0]["status"] == "Succeeded"


def test_follow_with_no_run_yet_says_how_to_start_one(cli, deployed):
    result = cli("follow")

    assert result.exit_code == 3, result.output
    assert result.stderr.strip() == (
        "llmp: llm-platform-dev-finetune has never run: start it with `llmp finetune --stage dev`"
    )


def test_definition_steps_count_one_branch_of_a_condition():
    names, on_path = following.definition_steps(json.dumps(FINETUNE_DEFINITION))

    assert names == [
        "PrepareData",
        "Train",
        "Evaluate",
        "CheckPerplexity",
        "Register-RegisterModel",
        "PerplexityTooHigh",
    ]
    assert on_path == 5


def test_stage_weights_follows_the_run_and_reports_the_commit_it_recorded(cli, deployed, stubbed, no_wait):
    commit = "f98c709453c9402b1309b032f40df1c10ad481a2"
    weights = load_config(cli.config).stages["dev"].training.staged_weights
    client("s3").put_object(Bucket=deployed.models_bucket, Key=weights.record_key, Body=json.dumps({"commit": commit}))
    sagemaker = stubbed("sagemaker")
    sagemaker.add_response(
        "describe_pipeline",
        {"PipelineName": deployed.staging, "PipelineDefinition": json.dumps(STAGING_DEFINITION)},
        {"PipelineName": deployed.staging},
    )
    sagemaker.add_response(
        "start_pipeline_execution",
        {"PipelineExecutionArn": RUN},
        {
            "PipelineName": deployed.staging,
            "PipelineParameters": [],
            "PipelineExecutionDescription": ANY,
            "ClientRequestToken": ANY,
        },
    )
    queue_look(sagemaker, "Succeeded", [step("Stage-gpt-j-6b", "Succeeded", 0)])

    result = cli("stage-weights")

    assert result.exit_code == 0, result.output
    assert f"staged {weights.hf_id} at commit {commit} in {weights.prefix}" in result.stdout
    assert result.stdout.splitlines()[-2:] == [
        "llm-platform-dev-stage-weights: Succeeded",
        f"next: make deploy STAGE=dev CONFIG={cli.config}  (the endpoint starts on the staged weights)",
    ]


# --- ways out, progress off a terminal, what comes next (issue 27) -------------------------------------------------

TRAIN_JOB = "pipelines-abc123def456-Train-x7Kq2"
TRAIN_METADATA = {"TrainingJob": {"Arn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{TRAIN_JOB}"}}
TRAIN_CONSOLE = f"https://console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{TRAIN_JOB}"
VERSION_3 = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/llm-platform-dev/3"


def test_following_off_a_terminal_prints_one_timestamped_line_per_change_with_the_jobs_ways_out(
    cli, deployed, stubbed, no_wait
):
    sagemaker = stubbed("sagemaker")
    queue_finetune_start(sagemaker)
    executing = [
        step("PrepareData", "Succeeded", 0),
        step("Train", "Executing", 5, ended=False, Metadata=TRAIN_METADATA),
    ]
    queue_look(sagemaker, "Executing", executing)
    queue_look(sagemaker, "Executing", executing)  # nothing changed: nothing printed
    queue_look(
        sagemaker,
        "Succeeded",
        [
            step("PrepareData", "Succeeded", 0),
            step("Train", "Succeeded", 5, Metadata=TRAIN_METADATA),
            step("Evaluate", "Succeeded", 10),
            step("CheckPerplexity", "Succeeded", 15, Metadata={"Condition": {"Outcome": "True"}}),
            step("Register-RegisterModel", "Succeeded", 16, Metadata={"RegisterModel": {"Arn": VERSION_3}}),
        ],
    )

    result = cli("finetune")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].endswith("Z  run started")  # when it was first seen, before its steps
    assert lines[2:5] == [
        "2026-05-01T12:05:00Z  PrepareData  succeeded after 5m00s",
        f"2026-05-01T12:05:00Z  Train  started  training job {TRAIN_JOB}  {TRAIN_CONSOLE}  "
        f"logs: /aws/sagemaker/TrainingJobs {TRAIN_JOB}/*",
        "2026-05-01T12:10:00Z  Train  succeeded after 5m00s",
    ]
    assert lines[8].endswith("Z  run succeeded")
    assert "2026-05-01T12:20:00Z  CheckPerplexity  succeeded after 5m00s (condition true)" in lines
    assert sum("Train  " in line for line in lines[:8]) == 2  # the second look changed nothing
    assert lines[-2:] == [
        "llm-platform-dev-finetune: Succeeded",
        'version 3 awaits approval: llmp approve 3 --stage dev -m "<why>"  (or llmp reject 3)',
    ]


def test_with_json_progress_goes_to_stderr_and_stdout_holds_only_the_result(cli, deployed, stubbed, no_wait):
    sagemaker = stubbed("sagemaker")
    queue_finetune_start(sagemaker)
    reason = "AlgorithmError: CUDA out of memory"
    queue_look(sagemaker, "Executing", [step("PrepareData", "Executing", 0, ended=False)])
    queue_look(
        sagemaker,
        "Failed",
        [
            step("PrepareData", "Succeeded", 0),
            step("Train", "Failed", 5, FailureReason=reason, Metadata=TRAIN_METADATA),
        ],
        failure="Step failure: One or multiple steps failed.",
    )

    result = cli("finetune", "--json")

    assert result.exit_code == 1, result.output
    run = json.loads(result.stdout)  # one document, nothing else
    assert run["next"] == [
        f"Train failed in training job {TRAIN_JOB}  {TRAIN_CONSOLE}  logs: /aws/sagemaker/TrainingJobs {TRAIN_JOB}/*",
        f"read its logs: llmp logs --job {TRAIN_JOB} --stage dev",
    ]
    assert run["steps"][1]["job_details"] == {
        "kind": "training job",
        "name": TRAIN_JOB,
        "console": TRAIN_CONSOLE,
        "log_group": "/aws/sagemaker/TrainingJobs",
        "log_stream_prefix": f"{TRAIN_JOB}/",
    }
    progress = result.stderr.splitlines()
    assert "2026-05-01T12:00:00Z  PrepareData  started" in progress
    assert (
        f"2026-05-01T12:10:00Z  Train  failed after 5m00s: {reason}  training job {TRAIN_JOB}  {TRAIN_CONSOLE}  "
        f"logs: /aws/sagemaker/TrainingJobs {TRAIN_JOB}/*"
    ) in progress


def test_a_failed_run_followed_by_a_person_says_where_its_logs_are(cli, deployed, stubbed, no_wait):
    sagemaker = stubbed("sagemaker")
    queue_finetune_start(sagemaker)
    queue_look(
        sagemaker,
        "Failed",
        [step("PrepareData", "Succeeded", 0), step("Train", "Failed", 5, FailureReason="OOM", Metadata=TRAIN_METADATA)],
    )

    result = cli("finetune")

    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-2:] == [
        f"Train failed in training job {TRAIN_JOB}  {TRAIN_CONSOLE}  logs: /aws/sagemaker/TrainingJobs {TRAIN_JOB}/*",
        f"read its logs: llmp logs --job {TRAIN_JOB} --stage dev",
    ]


@pytest.mark.parametrize(
    ("region", "host"),
    [
        ("us-east-1", "console.aws.amazon.com"),
        ("eu-central-1", "console.aws.amazon.com"),
        ("cn-north-1", "console.amazonaws.cn"),
        ("us-gov-west-1", "console.amazonaws-us-gov.com"),
    ],
)
def test_console_links_are_for_the_regions_partition(region, host):
    metadata = {"ProcessingJob": {"Arn": f"arn:aws:sagemaker:{region}:{ACCOUNT}:processing-job/p-1"}}
    job = following.job_of(metadata, region)

    assert job is not None and job.log_group == "/aws/sagemaker/ProcessingJobs"
    assert job.console == f"https://{host}/sagemaker/home?region={region}#/processing-jobs/p-1"


def test_no_console_link_where_the_partition_has_no_public_console():
    assert following.console_url("us-iso-east-1", "jobs/x") is None


@pytest.mark.parametrize(
    ("param", "suggestion"),
    [("maxsteps=3", "MaxSteps"), ("MaxStep=3", "MaxSteps"), ("LearnignRate=1e-5", "LearningRate")],
)
def test_a_typo_in_a_run_parameter_gets_did_you_mean(cli, deployed, param, suggestion):
    result = cli("finetune", "--param", param, "--no-follow")

    assert result.exit_code == 2, result.output
    name = param.partition("=")[0]
    assert f"has no parameter {name!r}: did you mean {suggestion}?; its parameters:" in result.stderr


def test_a_name_far_from_every_parameter_gets_no_suggestion(cli, deployed):
    result = cli("finetune", "--param", "Epochs=3", "--no-follow")

    assert result.exit_code == 2, result.output
    assert "did you mean" not in result.stderr


def test_finetune_help_lists_the_run_parameters_with_types_and_defaults(cli):
    result = cli("finetune", "--help")

    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["MaxSteps", "Integer", "training.max_steps", "(unset:", "1000)"] in rows
    assert ["LearningRate", "Float", "training.learning_rate", "(unset:", "0.0002)"] in rows
    assert ["InputData", "String", "s3://<data", "bucket>/raw/"] in rows


def test_the_declared_run_parameters_are_the_ones_the_pipeline_definition_has():
    # conftest's definition has the synthesized pipeline's parameters (test_outputs.py checks the CLI against those).
    declared = run_parameters.declared_run_parameters()

    assert [(p.name, p.type) for p in declared] == [(p["Name"], p["Type"]) for p in FINETUNE_DEFINITION["Parameters"]]


def test_no_declared_run_parameters_without_the_pipeline_source(tmp_path):
    assert run_parameters.declared_run_parameters(tmp_path / "absent.py") == []


def test_on_a_terminal_the_frame_shows_the_failed_jobs_console_page_and_logs(moto, stubbed, no_wait):
    sagemaker = stubbed("sagemaker")
    queue_look(sagemaker, "Executing", [step("Train", "Executing", 5, ended=False, Metadata=TRAIN_METADATA)])
    queue_look(sagemaker, "Failed", [step("Train", "Failed", 5, FailureReason="OOM", Metadata=TRAIN_METADATA)])
    terminal = Console(file=io.StringIO(), force_terminal=True, width=250, color_system=None)

    run = following.follow(
        aws_module.connect().clients["sagemaker", REGION], RUN, json.dumps(FINETUNE_DEFINITION), console=terminal
    )

    assert run.status == "Failed"
    drawn = terminal.file.getvalue()
    assert f"Train: training job {TRAIN_JOB}  {TRAIN_CONSOLE}  logs: /aws/sagemaker/TrainingJobs {TRAIN_JOB}/*" in drawn


def test_a_running_steps_detail_is_its_job():
    run = following.Run(
        RUN, "Executing", steps={"Train": step("Train", "Executing", 5, ended=False, Metadata=TRAIN_METADATA)}
    )
    terminal = Console(file=io.StringIO(), width=250, color_system=None)

    terminal.print(following.steps_table(["Train"], run, T0 + datetime.timedelta(minutes=7)))

    assert terminal.file.getvalue().splitlines()[1].split() == [
        "Train",
        "Executing",
        "2m00s",
        "training",
        "job",
        TRAIN_JOB,
    ]
    assert following.jobs_lines(["Train"], run) == [
        f"Train: training job {TRAIN_JOB}  {TRAIN_CONSOLE}  logs: /aws/sagemaker/TrainingJobs {TRAIN_JOB}/*"
    ]
