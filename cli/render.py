"""Output: Rich text for people, one JSON document on stdout for scripts (`--json`), failures on stderr."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from cli.errors import CliError


class Output:
    """Where a command writes. With `json`, stdout carries exactly one JSON document and notes go to stderr."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        # Consoles look sys.stdout and sys.stderr up at each write: a test's captured streams, a pipe, a terminal.
        self.console = Console(highlight=False, soft_wrap=True)
        self.stderr = Console(stderr=True, highlight=False, soft_wrap=True)

    @property
    def notes(self) -> Console:
        """Progress and hints for a person: on stdout, or on stderr when stdout is JSON."""
        return self.stderr if self.json_mode else self.console

    def result(self, data: dict[str, Any], human: Callable[[Console], None]) -> None:
        """The command's result: `data` as JSON, or `human` drawing it for a person."""
        if self.json_mode:
            sys.stdout.write(json.dumps(data, indent=2, default=jsonable) + "\n")
        else:
            human(self.console)

    def failure(self, error: CliError) -> None:
        """One line on stderr; with --json also {"error": ..., "exit_status": ...} on stdout."""
        self.stderr.print(f"llmp: {error}", markup=False)
        if self.json_mode:
            sys.stdout.write(json.dumps({"error": str(error), "exit_status": int(error.code)}) + "\n")


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def when(value: datetime.datetime | None) -> str:
    """`2026-05-01 14:03 UTC`: times in one zone, to the minute."""
    if value is None:
        return "-"
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float) -> str:
    """`1h02m`, `4m05s`, `12s`."""
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


STATUS_STYLES = {
    "Succeeded": "green",
    "InService": "green",
    "Approved": "green",
    "Executing": "cyan",
    "Starting": "cyan",
    "Creating": "cyan",
    "Updating": "cyan",
    "Stopping": "yellow",
    "Stopped": "yellow",
    "PendingManualApproval": "yellow",
    "Failed": "red",
    "Rejected": "red",
    "OutOfService": "red",
}


def styled(status: str | None) -> str:
    """A status word, coloured where a terminal shows colour ([style]...[/] markup)."""
    if status is None:
        return "[dim]not deployed[/]"
    if status.endswith("_COMPLETE") and "ROLLBACK" not in status and "DELETE" not in status:
        style = "green"
    elif status.endswith(("_FAILED", "ROLLBACK_COMPLETE")):
        style = "red"
    elif status.endswith("_IN_PROGRESS"):
        style = "cyan"
    else:
        style = STATUS_STYLES.get(status, "")
    return f"[{style}]{status}[/]" if style else status


def key_value_table(rows: list[tuple[str, str]]) -> Table:
    """Two columns, no borders: what, and its state."""
    table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table
