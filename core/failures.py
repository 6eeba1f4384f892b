"""What a person sees when synth or the plan fails: one message on stderr and exit status 2, never a traceback
(DEBUG=1 in the environment prints the traceback too).

Only the standard library is imported here, so that the entry points (app.py, `python -m generators.plan`) can import
this first and report even a broken import of everything else.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
EXIT_STATUS = 2
# A message's first line is the summary; the lines after it often hold the reason itself (the CDK's "Validation
# failed with the following errors:", one line per rule a name breaks): each is kept, cut so that no input is
# echoed whole, up to MAX_LINES of them.
FIRST_LINE_CHARACTERS = 200
LINE_CHARACTERS = 1000
MAX_LINES = 20


class Refused(Exception):
    """A failure whose message is already written for a person: it is printed as it is."""


def exit_on_failure(run: Callable[[], None], *, program: str) -> None:
    """Run `run`; turn anything it raises (but an exit or Ctrl-C) into its message on stderr and exit status 2."""
    try:
        run()
    except Exception as error:  # the one place every failure becomes a message
        if os.environ.get("DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        print(describe(error, program=program), file=sys.stderr)
        raise SystemExit(EXIT_STATUS) from None


def describe(error: Exception, *, program: str) -> str:
    """A Refused (a ConfigError is one) as written; anything else as what was raised, its message's first line, cut
    short, and where in the project's code it came from, then the message's other lines, indented."""
    if isinstance(error, Refused):
        return str(error)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = cut(lines[0], FIRST_LINE_CHARACTERS) if lines else "(no message)"
    where = _where(error)
    summary = (
        f"{program}: {type(error).__name__}: {message}{f' (at {where})' if where else ''}; DEBUG=1 shows the traceback"
    )
    return "\n".join([summary, *_reasons(lines[1:])])


def _reasons(lines: list[str]) -> list[str]:
    """The lines after the first, indented under it: each cut to LINE_CHARACTERS, at most MAX_LINES of them."""
    shown = [f"  {cut(line, LINE_CHARACTERS)}" for line in lines[:MAX_LINES]]
    if len(lines) > MAX_LINES:
        shown.append(f"  ... and {len(lines) - MAX_LINES} more lines")
    return shown


def cut(text: str, limit: int = FIRST_LINE_CHARACTERS) -> str:
    """`text`, or its first `limit` characters ending in "...": no input is echoed whole."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(error: BaseException) -> str | None:
    """`core/x.py:42`: the deepest frame of the traceback in the project's own files."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        path = Path(frame.filename)
        if path.is_absolute() and path.is_relative_to(REPO_ROOT) and ".venv" not in path.parts:
            found = f"{path.relative_to(REPO_ROOT)}:{frame.lineno}"
    return found
