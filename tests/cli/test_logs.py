"""`llmp logs` against moto's CloudWatch Logs (FilterLogEvents) and SageMaker jobs; the newest run's steps
(ListPipelineExecutionSteps, which moto lacks) through Stubber."""

from __future__ import annotations

import datetime
import json
import time

import pytest

from cli.commands import logs as logs_command
from tests.cli.conftest import ACCOUNT, REGION, client

TRAINING_GROUP = "/aws/sagemaker/TrainingJobs"
JOB = "pipelines-abc123def456-Train-x7Kq2"
RUN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/llm-platform-dev-finetune/execution/abc123def456"


def now_ms() -> int:
    return int(time.time() * 1000)


def write(group: str, stream: str, *messages: str, at: int | None = None) -> None:
    """Events as SageMaker's log agent writes them (CloudWatch refuses events older than 14 days: now-ish times)."""
    logs = client("logs")
    if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        logs.create_log_group(logGroupName=group)
    if not logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=stream)["logStreams"]:
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    start = at or now_ms()
    logs.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[{"timestamp": start + index, "message": message} for index, message in enumerate(messages)],
    )


def training_job(name: str = JOB) -> None:
    """A training job as moto keeps one (it reports it Completed at once)."""
    client("sagemaker").create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={"TrainingImage": "djl-inference:0.27.0", "TrainingInputMode": "File"},
        RoleArn=f"arn:aws:iam::{ACCOUNT}:role/llm-platform/dev/pipelines",
        OutputDataConfig={"S3OutputPath": "s3://models/trained/"},
        ResourceConfig={"InstanceType": "ml.g5.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )


@pytest.fixture
def no_wait(monkeypatch):
    monkeypatch.setattr(logs_command, "POLL_SECONDS", 0)


def test_logs_of_a_job_prints_its_events_and_no_other_jobs(cli, deployed):
    training_job()
    write(TRAINING_GROUP, f"{JOB}/algo-1-1714567890", "step 1 loss 2.31", "step 2 loss 2.05")
    write(TRAINING_GROUP, "pipelines-other-Train-a/algo-1-1714567890", "another job")

    result = cli("logs", "--job", JOB)

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["step 1 loss 2.31", "step 2 loss 2.05"]
    assert result.stderr.strip() == (
        f"logs of training job {JOB}: {TRAINING_GROUP} {JOB}/*  "
        f"https://console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{JOB}"
    )


def test_logs_of_a_job_by_arn_with_stream_prefixes_and_json(cli, deployed):
    training_job()
    write(TRAINING_GROUP, f"{JOB}/algo-1-1714567890", "from host 1")
    write(TRAINING_GROUP, f"{JOB}/algo-2-1714567890", "from host 2")

    plain = cli("logs", "--job", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{JOB}", "--prefix")
    as_json = cli("logs", "--job", JOB, "--json")

    assert plain.exit_code == 0, plain.output
    assert sorted(plain.stdout.splitlines()) == ["[algo-1-1714567890] from host 1", "[algo-2-1714567890] from host 2"]
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert document["log_group"] == TRAINING_GROUP and document["log_stream_prefix"] == f"{JOB}/"
    assert sorted(e["message"] for e in document["events"]) == ["from host 1", "from host 2"]


def test_following_a_job_prints_what_is_written_until_it_ends(cli, deployed, monkeypatch, no_wait):
    training_job()
    stream = f"{JOB}/algo-1-1714567890"
    write(TRAINING_GROUP, stream, "loading weights", "step 1 loss 2.31")
    statuses = iter(["InProgress", "InProgress", "Completed"])
    describe = logs_command.job_source

    def running(sagemaker, job, region):
        source = describe(sagemaker, job, region)
        source.describe = lambda: next(statuses)
        return source

    monkeypatch.setattr(logs_command, "job_source", running)
    writes = iter([("step 2 loss 2.05",), ("saved", "done")])

    def written_meanwhile(seconds):
        write(TRAINING_GROUP, stream, *next(writes))

    monkeypatch.setattr(logs_command.time, "sleep", written_meanwhile)

    result = cli("logs", "--job", JOB, "-f")

    assert result.exit_code == 0, result.output
    # Each event once, though FilterLogEvents' startTime gives the last one seen again; the end after the job's.
    assert result.stdout.splitlines() == ["loading weights", "step 1 loss 2.31", "step 2 loss 2.05", "saved", "done"]


def test_ctrl_c_ends_following_the_endpoints_logs_cleanly(cli, deployed, monkeypatch, no_wait):
    group = f"/aws/sagemaker/Endpoints/{deployed.endpoint}"
    write(group, "AllTraffic/i-0abc123", "INFO  Model server started")

    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(logs_command.time, "sleep", interrupted)

    result = cli("logs", "--endpoint", "--follow")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["INFO  Model server started"]
    assert result.stderr.startswith(f"logs of endpoint {deployed.endpoint}: {group} *")
    assert "Traceback" not in result.output and "interrupted" not in result.output


def test_logs_of_the_endpoint_default_to_the_last_hour(cli, deployed):
    group = f"/aws/sagemaker/Endpoints/{deployed.endpoint}"
    write(group, "AllTraffic/i-0abc123", "yesterday", at=now_ms() - 2 * 3600 * 1000)
    write(group, "AllTraffic/i-0abc123", "just now")

    assert cli("logs", "--endpoint").stdout.splitlines() == ["just now"]
    assert cli("logs", "--endpoint", "--since", "3h").stdout.splitlines() == ["yesterday", "just now"]


def test_logs_of_an_unknown_job_says_where_the_names_are(cli, deployed):
    result = cli("logs", "--job", "pipelines-nope")

    assert result.exit_code == 3, result.output
    assert result.stderr.strip() == (
        f"llmp: no training or processing job pipelines-nope in {REGION}: `llmp follow` and `llmp status` name the "
        "runs' jobs"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--job", JOB, "--endpoint"], "--job and --endpoint name two sources: give one"),
        (["--since", "yesterday"], "--since 'yesterday': a number and s, m, h or d"),
    ],
)
def test_logs_refuses_what_it_cannot_read(cli, deployed, args, message):
    result = cli("logs", *args)

    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_logs_by_default_read_the_newest_runs_failing_step(cli, deployed, stubbed):
    write(TRAINING_GROUP, f"{JOB}/algo-1-1714567890", "torch.OutOfMemoryError: CUDA out of memory")
    sagemaker = stubbed("sagemaker")
    sagemaker.add_response(
        "list_pipeline_executions",
        {"PipelineExecutionSummaries": [{"PipelineExecutionArn": RUN, "PipelineExecutionStatus": "Failed"}]},
        {"PipelineName": deployed.finetune, "SortBy": "CreationTime", "SortOrder": "Descending", "MaxResults": 1},
    )
    sagemaker.add_response(
        "describe_pipeline_execution",
        {"PipelineExecutionArn": RUN, "PipelineExecutionStatus": "Failed"},
        {"PipelineExecutionArn": RUN},
    )
    t0 = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)
    prepare = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:processing-job/pipelines-abc123def456-PrepareData-q"
    sagemaker.add_response(
        "list_pipeline_execution_steps",
        {
            "PipelineExecutionSteps": [
                {
                    "StepName": "Train",
                    "StepStatus": "Failed",
                    "StartTime": t0 + datetime.timedelta(minutes=5),
                    "Metadata": {"TrainingJob": {"Arn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{JOB}"}},
                },
                {
                    "StepName": "PrepareData",
                    "StepStatus": "Succeeded",
                    "StartTime": t0,
                    "Metadata": {"ProcessingJob": {"Arn": prepare}},
                },
            ]
        },
        {"PipelineExecutionArn": RUN, "SortOrder": "Descending"},
    )
    sagemaker.add_response(
        "describe_training_job",
        {
            "TrainingJobName": JOB,
            "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{JOB}",
            "TrainingJobStatus": "Failed",
            "SecondaryStatus": "Failed",
            "AlgorithmSpecification": {"TrainingInputMode": "File"},
            "ModelArtifacts": {"S3ModelArtifacts": "s3://models/trained/"},
            "ResourceConfig": {"VolumeSizeInGB": 100},
            "StoppingCondition": {},
            "CreationTime": t0,
        },
        {"TrainingJobName": JOB},
    )

    result = cli("logs")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["torch.OutOfMemoryError: CUDA out of memory"]
    assert result.stderr.startswith(f"logs of training job {JOB}: {TRAINING_GROUP} {JOB}/*")


def test_logs_by_default_with_no_run_yet_says_so(cli, deployed):
    result = cli("logs")

    assert result.exit_code == 3, result.output
    assert "llm-platform-dev-finetune has never run: no job to read" in result.stderr
