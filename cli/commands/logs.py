"""`llmp logs`: the CloudWatch logs of a pipeline step's job or of the stage's endpoint, printed, or followed as they
are written (like `kubectl logs -f`).

    llmp logs                  the newest fine-tuning run's failing step (else its running one, else its last one)
    llmp logs --staging        the same, of the weights-staging pipeline's newest run
    llmp logs --job NAME       a training or processing job, by name or ARN
    llmp logs --endpoint       the stage's endpoint (every instance's stream)
    llmp logs -f ...           keep printing what is written until the job ends (the endpoint: until Ctrl-C)

SageMaker writes a job's logs into /aws/sagemaker/TrainingJobs or /aws/sagemaker/ProcessingJobs, one stream per
instance named `<job>/algo-<n>-<epoch>`, and an endpoint's into /aws/sagemaker/Endpoints/<endpoint>, one stream per
variant and instance. The events come from FilterLogEvents, polled; Ctrl-C ends the following, and llmp with it, with
exit status 0.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from cli import aws as aws_module
from cli import follow as following
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output

# Seconds between two looks at the logs while following: CloudWatch Logs makes an event searchable a few seconds
# after it is written, and FilterLogEvents allows 5 requests a second per account and region (CloudWatch Logs quotas).
POLL_SECONDS = 5.0
# TrainingJobStatus and ProcessingJobStatus: the job has ended once it is one of these (SageMaker API reference).
JOB_ENDED = {"Completed", "Failed", "Stopped"}
ENDPOINT_LOG_GROUP = "/aws/sagemaker/Endpoints/{name}"
SINCE = re.compile(r"^(\d+)([smhd])$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class Source:
    """Whose logs: a log group, the streams of it to read, and how to tell that nothing more will be written."""

    what: str  # training job pipelines-abc-Train-x, endpoint llm-platform-dev
    log_group: str
    stream_prefix: str | None  # None: every stream of the group
    console: str | None
    describe: Any = None  # () -> the job's status, for a job; None for the endpoint (it never ends)

    def ended(self) -> bool:
        return self.describe is not None and self.describe() in JOB_ENDED


@dataclass
class Tail:
    """The events of a source after a point in time, each once however often it is asked."""

    logs: Any
    source: Source
    since_ms: int = 0
    seen: set[tuple[str, str]] = field(default_factory=set)  # (stream, event id) at since_ms

    def fetch(self) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"logGroupName": self.source.log_group, "startTime": self.since_ms}
        if self.source.stream_prefix:
            query["logStreamNamePrefix"] = self.source.stream_prefix
        try:
            events = [
                event
                for page in self.logs.get_paginator("filter_log_events").paginate(**query)
                for event in page.get("events", [])
            ]
        except self.logs.exceptions.ResourceNotFoundException:
            return []  # the group is made when the first stream is written: nothing yet
        # Only the source's streams, however the service applied the prefix (moto 5.2.5, which the tests run on,
        # ignores logStreamNamePrefix in FilterLogEvents; AWS applies it, and this keeps what it returned).
        prefix = self.source.stream_prefix or ""
        events = [event for event in events if event.get("logStreamName", "").startswith(prefix)]
        # FilterLogEvents' startTime is inclusive: the events at the last time seen come again, and are dropped.
        events.sort(key=lambda event: (event["timestamp"], event.get("ingestionTime", 0)))
        new = [e for e in events if (e.get("logStreamName", ""), e["eventId"]) not in self.seen]
        if new:
            latest = max(e["timestamp"] for e in new)
            if latest != self.since_ms:
                self.seen = set()
            self.since_ms = latest
            self.seen |= {(e.get("logStreamName", ""), e["eventId"]) for e in events if e["timestamp"] == latest}
        return new


@handled
def logs(
    job: Annotated[
        str | None, typer.Option("--job", help="a training or processing job's name (or ARN)", show_default=False)
    ] = None,
    endpoint: Annotated[bool, typer.Option("--endpoint", help="the stage's endpoint's logs")] = False,
    staging: Annotated[
        bool, typer.Option("--staging", help="the weights-staging pipeline's newest run, not fine-tuning's")
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events until the job ends (Ctrl-C stops)")
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="only events of the last 30s, 10m, 2h, 1d (default: a job's all, the endpoint's 1h)"
        ),
    ] = None,
    prefix: Annotated[
        bool, typer.Option("--prefix", help="start each line with its stream (one per instance)")
    ] = False,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Print the CloudWatch logs of a job of the stage's pipelines, or of its endpoint; with -f, follow them as they are
    written. Without --job or --endpoint: the newest fine-tuning run's failing step's job (else its running one, else
    its last one). With --json: one document of the events, or with -f one JSON line per event."""
    out = Output(json_mode=json_output)
    if job and endpoint:
        raise CliError("--job and --endpoint name two sources: give one", Exit.USAGE)
    start = _since(since, default="1h" if endpoint else None)
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    source = _chosen_source(aws, target, job=job, endpoint=endpoint, staging=staging)
    _announce(out, source)
    tail = Tail(aws.client("logs", target.region), source, since_ms=start)
    try:
        printed = _read(tail, follow=follow, json_output=json_output, prefix=prefix)
    except KeyboardInterrupt:
        return  # Ctrl-C ends the following: nothing else to say
    if json_output and not follow:
        out.result(_events_document(source, printed), lambda console: None)


def _chosen_source(aws: Any, target: aws_module.Stage, *, job: str | None, endpoint: bool, staging: bool) -> Source:
    """The source the options name: the endpoint, a job, or the newest run of a pipeline."""
    sagemaker = aws.client("sagemaker", target.region)
    with aws_errors():
        if endpoint:
            return endpoint_source(aws.outputs(target, "serving")["EndpointName"], target.region)
        if job:
            return job_source(sagemaker, job, target.region)
        pipeline = aws.outputs(target, "training")["StagingPipelineName" if staging else "FinetunePipelineName"]
        return run_source(sagemaker, pipeline, target)


def _announce(out: Output, source: Source) -> None:
    """Which logs these are, on stderr: stdout holds only the events."""
    out.stderr.print(
        f"logs of {source.what}: {source.log_group} {source.stream_prefix or ''}*"
        + (f"  {source.console}" if source.console else ""),
        markup=False,
        highlight=False,
    )


def _read(tail: Tail, *, follow: bool, json_output: bool, prefix: bool) -> list[dict[str, Any]]:
    """Print the events once, or (following) until the source ends; with --json and no -f, the events are kept for one
    document instead, and returned."""
    printed: list[dict[str, Any]] = []
    with aws_errors():
        while True:
            # Whether it had ended before this look: then this look has everything it wrote.
            done = follow and tail.source.ended()
            for event in tail.fetch():
                if follow or not json_output:
                    _print(event, tail.source, json_lines=json_output, prefix=prefix)
                else:
                    printed.append(_event_json(event))
            if not follow or done:
                break
            time.sleep(POLL_SECONDS)
    return printed


def _events_document(source: Source, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "source": source.what,
        "log_group": source.log_group,
        "log_stream_prefix": source.stream_prefix,
        "events": events,
    }


def job_source(sagemaker: Any, job: str, region: str) -> Source:
    """A training or processing job by name or ARN; exit 3 if there is neither in the region."""
    name = job.rpartition("/")[2] if job.startswith("arn:") else job
    for key, (kind, page, group) in following.JOB_KINDS.items():
        describe = getattr(sagemaker, f"describe_{'training' if key == 'TrainingJob' else 'processing'}_job")
        parameter = f"{key}Name"
        try:
            describe(**{parameter: name})
        except sagemaker.exceptions.ClientError as error:
            if "Could not find" in error.response.get("Error", {}).get("Message", ""):
                continue
            raise
        status = f"{key}Status"
        return Source(
            f"{kind} {name}",
            group,
            f"{name}/",
            following.console_url(region, f"{page}/{name}"),
            lambda describe=describe, parameter=parameter, status=status: describe(**{parameter: name})[status],
        )
    raise CliError(
        f"no training or processing job {name} in {region}: `llmp follow` and `llmp status` name the runs' jobs",
        Exit.AWS_STATE,
    )


def endpoint_source(name: str, region: str) -> Source:
    return Source(
        f"endpoint {name}",
        ENDPOINT_LOG_GROUP.format(name=name),
        None,
        following.console_url(region, f"endpoints/{name}"),
    )


def run_source(sagemaker: Any, pipeline: str, target: aws_module.Stage) -> Source:
    """The job of the newest run of `pipeline` worth reading: its failed step's, else its running step's, else its
    last step's."""
    runs = sagemaker.list_pipeline_executions(
        PipelineName=pipeline, SortBy="CreationTime", SortOrder="Descending", MaxResults=1
    )["PipelineExecutionSummaries"]
    if not runs:
        raise CliError(
            f"{pipeline} has never run: no job to read; `llmp logs --endpoint` reads the endpoint's", Exit.AWS_STATE
        )
    run = following.look(sagemaker, runs[0]["PipelineExecutionArn"])
    by_start = sorted(run.steps, key=lambda name: run.steps[name].get("StartTime") or datetime.datetime.max)
    for wanted in ("Failed", "Executing", None):
        chosen = [n for n in by_start if run.job(n) and wanted in (None, run.steps[n].get("StepStatus"))]
        if chosen:
            found = run.job(chosen[-1])
            assert found is not None
            return job_source(sagemaker, found.name, target.region)
    raise CliError(
        f"the newest run of {pipeline} ({run.status}) has started no job yet: `llmp follow --stage {target.name}` "
        "shows its steps",
        Exit.AWS_STATE,
    )


def _since(value: str | None, *, default: str | None) -> int:
    """Milliseconds since the epoch to read from: 0 for everything."""
    value = value or default
    if value is None:
        return 0
    matched = SINCE.match(value)
    if not matched:
        raise CliError(f"--since {value!r}: a number and s, m, h or d (30s, 10m, 2h, 1d)", Exit.USAGE)
    seconds = int(matched[1]) * SECONDS[matched[2]]
    return int((time.time() - seconds) * 1000)


def _event_json(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "timestamp": datetime.datetime.fromtimestamp(event["timestamp"] / 1000, datetime.UTC).isoformat(),
        "stream": event.get("logStreamName"),
        "message": event.get("message", "").rstrip("\n"),
    }


def _print(event: dict[str, Any], source: Source, *, json_lines: bool, prefix: bool) -> None:
    """One event on stdout as it is (or as one JSON line), written at once: a reader of a pipe sees it now."""
    if json_lines:
        line = json.dumps(_event_json(event))
    else:
        line = event.get("message", "").rstrip("\n")
        if prefix:
            stream = event.get("logStreamName", "")
            line = f"[{stream.removeprefix(source.stream_prefix or '')}] {line}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
