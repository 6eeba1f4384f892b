"""Follow a SageMaker pipeline run: its steps, live, until it ends.

The steps come from the run's definition (the pipeline's JSON: Steps, and a Condition step's IfSteps and ElseSteps),
their states from ListPipelineExecutionSteps, the run's from DescribePipelineExecution. Ctrl-C stops the following,
never the run.

On a terminal the steps are redrawn in place; anywhere else (a pipe, a CI log, --json's stderr) each change is one
timestamped line. A step that runs a job shows its name, its page in the console of the region's partition and its
CloudWatch log group and streams, so a failure has a way out: `llmp logs`.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from cli.render import duration, styled
from core.config.fields import aws_regions

# Seconds between two looks at a run. A run takes minutes to hours; DescribePipelineExecution and
# ListPipelineExecutionSteps are cheap, throttled calls (the clients retry with backoff).
POLL_SECONDS = 15.0
# PipelineExecutionStatus: Executing, Stopping, and these, where a run has ended (SageMaker API reference,
# DescribePipelineExecution); CompletedWithFailures: it ended with failed steps allowed to fail.
RUN_ENDED = {"Succeeded", "Failed", "Stopped", "CompletedWithFailures"}
STEP_ENDED = {"Succeeded", "Failed", "Stopped"}
# The AWS console of each partition that has a public one; the partition comes from the region
# (core.config.fields.aws_regions: the CDK's region facts). The isolated partitions' consoles are not linked.
CONSOLE_HOSTS = {
    "aws": "console.aws.amazon.com",
    "aws-cn": "console.amazonaws.cn",
    "aws-us-gov": "console.amazonaws-us-gov.com",
}
# A step's job: what it is called, its page in the SageMaker console, and the log group SageMaker writes its
# streams into (one stream per instance, `<job name>/algo-<n>-<epoch>`).
JOB_KINDS = {
    "TrainingJob": ("training job", "jobs", "/aws/sagemaker/TrainingJobs"),
    "ProcessingJob": ("processing job", "processing-jobs", "/aws/sagemaker/ProcessingJobs"),
}


def console_url(region: str, fragment: str, service: str = "sagemaker") -> str | None:
    """The page `fragment` of the service's console in the region's partition, or None where there is no public
    console."""
    host = CONSOLE_HOSTS.get(aws_regions().get(region, ""))
    if host is None:
        return None
    return f"https://{host}/{service}/home?region={region}#/{fragment}"


@dataclass(frozen=True)
class Job:
    """A SageMaker job a step ran, and where to look at it."""

    kind: str  # training job, processing job
    name: str
    console: str | None
    log_group: str

    @property
    def log_streams(self) -> str:
        """The job's streams in its log group: one per instance, each named after the job."""
        return f"{self.name}/*"

    def describe(self) -> str:
        where = f"{self.kind} {self.name}"
        if self.console:
            where += f"  {self.console}"
        return f"{where}  logs: {self.log_group} {self.log_streams}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "console": self.console,
            "log_group": self.log_group,
            "log_stream_prefix": f"{self.name}/",
        }


def job_of(metadata: dict[str, Any], region: str) -> Job | None:
    """The training or processing job a step's metadata names (once SageMaker has created it), or None."""
    for key, (kind, page, group) in JOB_KINDS.items():
        arn = metadata.get(key, {}).get("Arn")
        if arn:
            name = arn.rpartition("/")[2]
            return Job(kind, name, console_url(region, f"{page}/{name}"), group)
    return None


def region_of(arn: str) -> str:
    """arn:aws:sagemaker:us-east-1:... -> us-east-1."""
    return arn.split(":")[3] if arn.count(":") >= 5 else ""


@dataclass
class Run:
    """What one look at a run found."""

    arn: str
    status: str
    failure: str | None = None
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)  # step name -> ListPipelineExecutionSteps entry

    @property
    def ended(self) -> bool:
        return self.status in RUN_ENDED

    @property
    def region(self) -> str:
        return region_of(self.arn)

    def job(self, name: str) -> Job | None:
        """The job step `name` ran, if it ran one."""
        return job_of(self.steps.get(name, {}).get("Metadata", {}), self.region)

    def failed_steps(self) -> list[str]:
        return [name for name, step in self.steps.items() if step.get("StepStatus") == "Failed"]

    def as_json(self, order: list[str]) -> dict[str, Any]:
        return {
            "arn": self.arn,
            "status": self.status,
            "failure": self.failure,
            "steps": [_step_json(name, self.steps.get(name), self.job(name)) for name in order],
        }


def _step_json(name: str, step: dict[str, Any] | None, job: Job | None) -> dict[str, Any]:
    if step is None:
        return {"name": name, "status": None}
    return {
        "name": name,
        "status": step.get("StepStatus"),
        "started": step.get("StartTime"),
        "ended": step.get("EndTime"),
        "failure": step.get("FailureReason"),
        "job": _job_arn(step.get("Metadata", {})),
        "job_details": job.as_json() if job else None,
    }


def _job_arn(metadata: dict[str, Any]) -> str | None:
    for kind in ("TrainingJob", "ProcessingJob", "RegisterModel", "Model"):
        if kind in metadata and "Arn" in metadata[kind]:
            return metadata[kind]["Arn"]
    return None


def definition_steps(definition: str) -> tuple[list[str], int]:
    """The step names of a pipeline definition in the order it lists them, and how many one run goes through (a
    Condition step runs one of its branches: the longer one is counted until the run ends)."""
    names: list[str] = []

    def walk(steps: list[dict[str, Any]]) -> int:
        count = 0
        for step in steps:
            names.append(step["Name"])
            count += 1
            if step.get("Type") == "Condition":
                arguments = step.get("Arguments", {})
                count += max(walk(arguments.get("IfSteps", [])), walk(arguments.get("ElseSteps", [])))
        return count

    on_path = walk(json.loads(definition).get("Steps", []))
    return names, on_path


def look(sagemaker: Any, arn: str) -> Run:
    execution = sagemaker.describe_pipeline_execution(PipelineExecutionArn=arn)
    steps: dict[str, dict[str, Any]] = {}
    pages = sagemaker.get_paginator("list_pipeline_execution_steps").paginate(
        PipelineExecutionArn=arn, SortOrder="Descending"
    )
    for page in pages:
        for step in page.get("PipelineExecutionSteps", []):
            # Newest first, asked for (the API documents no default order): a step listed twice keeps its latest.
            steps.setdefault(step["StepName"], step)
    return Run(arn, execution["PipelineExecutionStatus"], execution.get("FailureReason") or None, steps)


def steps_table(order: list[str], run: Run, now: datetime.datetime) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 2))
    for column in ("step", "state", "time", "detail"):
        table.add_column(column, no_wrap=column != "detail")
    for name in order:
        step = run.steps.get(name)
        if step is None:
            table.add_row(name, "[dim]waiting[/]" if not run.ended else "[dim]not run[/]", "", "")
            continue
        started, ended = step.get("StartTime"), step.get("EndTime")
        took = duration(((ended or now) - started).total_seconds()) if started else ""
        detail = step.get("FailureReason") or _outcome(step.get("Metadata", {})) or ""
        job = run.job(name)
        if job and step.get("StepStatus") not in ("Succeeded", "Failed"):
            detail = f"{job.kind} {job.name}"
        table.add_row(name, styled(step.get("StepStatus")), took, Text(detail))
    return table


def jobs_lines(order: list[str], run: Run) -> list[str]:
    """For each step running a job, or failed in one: its name, console page and logs (the ways out)."""
    found = []
    for name in order:
        step, job = run.steps.get(name), run.job(name)
        if step is not None and job is not None and step.get("StepStatus") in ("Executing", "Failed", "Stopping"):
            found.append(f"{name}: {job.describe()}")
    return found


def timestamp(value: datetime.datetime) -> str:
    """2026-05-01T12:05:00Z: one zone, to the second, sortable."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ChangeLines:
    """One timestamped line per change of the run's or a step's state, for a reader that is not a terminal."""

    def __init__(self, console: Console, order: list[str]) -> None:
        self.console = console
        self.order = order
        self.seen: dict[str, str | None] = {}

    def show(self, run: Run, now: datetime.datetime) -> None:
        if not run.ended:
            self._run(run, now)  # started (or stopping) before its steps' news
        steps = sorted(
            ((name, step) for name, step in run.steps.items()),
            key=lambda item: (item[1].get("StartTime") or now, self._index(item[0])),
        )
        for name, step in steps:
            status = step.get("StepStatus")
            if self.seen.get(name) == status:
                continue
            self.seen[name] = status
            at = (step.get("EndTime") if status in STEP_ENDED else step.get("StartTime")) or now
            line = f"{timestamp(at)}  {name}  {_word(status)}"
            if status in STEP_ENDED and step.get("StartTime") and step.get("EndTime"):
                line += f" after {duration((step['EndTime'] - step['StartTime']).total_seconds())}"
            if reason := step.get("FailureReason"):
                line += f": {reason}"
            elif outcome := _outcome(step.get("Metadata", {})):
                line += f" ({outcome})"
            job = run.job(name)
            if job and status != "Succeeded":
                line += f"  {job.describe()}"
            self.console.print(line, markup=False, highlight=False)
        if run.ended:
            self._run(run, now)  # ended after its steps' news

    def _run(self, run: Run, now: datetime.datetime) -> None:
        if self.seen.get("") != run.status:
            self.seen[""] = run.status
            line = f"{timestamp(now)}  run {_word(run.status)}" + (f": {run.failure}" if run.failure else "")
            self.console.print(line, markup=False, highlight=False)

    def _index(self, name: str) -> int:
        return self.order.index(name) if name in self.order else len(self.order)


def _word(status: str | None) -> str:
    """Executing -> started, Succeeded -> succeeded: what happened, as a log line says it."""
    return {"Executing": "started", "Starting": "starting"}.get(status or "", (status or "?").lower())


def _outcome(metadata: dict[str, Any]) -> str:
    if "Condition" in metadata:
        return f"condition {str(metadata['Condition'].get('Outcome', '')).lower()}"
    if "Fail" in metadata:
        return metadata["Fail"].get("ErrorMessage", "")
    return ""


def follow(
    sagemaker: Any, arn: str, definition: str, *, console: Console | None, poll_seconds: float | None = None
) -> Run:
    """Look at the run every `poll_seconds` until it ends, and show it on `console` (None: quietly): redrawn in place
    on a terminal, one timestamped line per change elsewhere. Ctrl-C raises KeyboardInterrupt to the caller; the run
    goes on."""
    poll = POLL_SECONDS if poll_seconds is None else poll_seconds
    order, on_path = definition_steps(definition)
    if console is None or not console.is_terminal:
        lines = ChangeLines(console, order) if console is not None else None
        while True:
            run = look(sagemaker, arn)
            now = datetime.datetime.now(datetime.UTC)
            if lines is not None:
                lines.show(run, now)
            if run.ended:
                if console is not None:  # the whole run once more, as a terminal's last frame shows it
                    console.print(steps_table(order, run, now))
                return run
            time.sleep(poll)
    progress = Progress(
        SpinnerColumn(finished_text="•"),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("starting", total=on_path)
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            run = look(sagemaker, arn)
            done = sum(1 for step in run.steps.values() if step.get("StepStatus") in STEP_ENDED)
            progress.update(
                task,
                description=styled(run.status),
                completed=done if not run.ended else on_path if run.status == "Succeeded" else done,
            )
            live.update(_frame(progress, order, run))
            if run.ended:
                progress.stop_task(task)
                live.update(_frame(progress, order, run))
                break
            time.sleep(poll)
    return run


def _frame(progress: Progress, order: list[str], run: Run) -> Group:
    """The progress bar, the steps, and the jobs running (or failed) with their console pages and logs."""
    parts: list[Any] = [progress, steps_table(order, run, datetime.datetime.now(datetime.UTC))]
    parts += [Text(line) for line in jobs_lines(order, run)]
    return Group(*parts)
