"""Follow a SageMaker pipeline run: its steps, live, until it ends.

The steps come from the run's definition (the pipeline's JSON: Steps, and a Condition step's IfSteps and ElseSteps),
their states from ListPipelineExecutionSteps, the run's from DescribePipelineExecution. Ctrl-C stops the following,
never the run.
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

from cli.render import duration, styled

# Seconds between two looks at a run. A run takes minutes to hours; DescribePipelineExecution and
# ListPipelineExecutionSteps are cheap, throttled calls (the clients retry with backoff).
POLL_SECONDS = 15.0
# PipelineExecutionStatus: Executing, Stopping, and these, where a run has ended (SageMaker API reference,
# DescribePipelineExecution); CompletedWithFailures: it ended with failed steps allowed to fail.
RUN_ENDED = {"Succeeded", "Failed", "Stopped", "CompletedWithFailures"}
STEP_ENDED = {"Succeeded", "Failed", "Stopped"}


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

    def as_json(self, order: list[str]) -> dict[str, Any]:
        return {
            "arn": self.arn,
            "status": self.status,
            "failure": self.failure,
            "steps": [_step_json(name, self.steps.get(name)) for name in order],
        }


def _step_json(name: str, step: dict[str, Any] | None) -> dict[str, Any]:
    if step is None:
        return {"name": name, "status": None}
    return {
        "name": name,
        "status": step.get("StepStatus"),
        "started": step.get("StartTime"),
        "ended": step.get("EndTime"),
        "failure": step.get("FailureReason"),
        "job": _job_arn(step.get("Metadata", {})),
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
        table.add_row(name, styled(step.get("StepStatus")), took, detail)
    return table


def _outcome(metadata: dict[str, Any]) -> str:
    if "Condition" in metadata:
        return f"condition {str(metadata['Condition'].get('Outcome', '')).lower()}"
    if "Fail" in metadata:
        return metadata["Fail"].get("ErrorMessage", "")
    return ""


def follow(
    sagemaker: Any, arn: str, definition: str, *, console: Console | None, poll_seconds: float | None = None
) -> Run:
    """Look at the run every `poll_seconds` until it ends; draw its steps on `console` (None: quietly). Ctrl-C raises
    KeyboardInterrupt to the caller; the run goes on."""
    poll = POLL_SECONDS if poll_seconds is None else poll_seconds
    order, on_path = definition_steps(definition)
    if console is None:
        run = look(sagemaker, arn)
        while not run.ended:
            time.sleep(poll)
            run = look(sagemaker, arn)
        return run
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
            live.update(Group(progress, steps_table(order, run, datetime.datetime.now(datetime.UTC))))
            if run.ended:
                progress.stop_task(task)
                live.update(Group(progress, steps_table(order, run, datetime.datetime.now(datetime.UTC))))
                break
            time.sleep(poll)
    if not console.is_terminal:  # Live ends its last frame with a newline only on a terminal
        console.line()
    return run
