"""What a person sees when synth or the plan fails: one message on stderr and exit status 2, never a traceback
(DEBUG=1 in the environment prints the traceback too).

Only the standard library is imported here, so that the entry points (app.py, `python -m stacks.plan`) can import
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
    """A Refused (a ConfigError is one) as written; anything else as one line: what was raised, its message's first
    line, cut short, and where in the project's code it came from."""
    if isinstance(error, Refused):
        return str(error)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = lines[0] if lines else "(no message)"
    if len(message) > 200:
        message = message[:197] + "..."
    where = _where(error)
    return (
        f"{program}: {type(error).__name__}: {message}{f' (at {where})' if where else ''}; DEBUG=1 shows the traceback"
    )


def _where(error: BaseException) -> str | None:
    """`stacks/x.py:42`: the deepest frame of the traceback in the project's own files."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        path = Path(frame.filename)
        if path.is_absolute() and path.is_relative_to(REPO_ROOT) and ".venv" not in path.parts:
            found = f"{path.relative_to(REPO_ROOT)}:{frame.lineno}"
    return found
