"""`make rehearse-examples`: the deploy rehearsal of every file in config/examples/, one after another, as a table.

    .venv/bin/python -m rehearsal.examples                                   # every example
    .venv/bin/python -m rehearsal.examples config/examples/promotion.yaml    # some

Each example runs `python -m rehearsal.rehearse --config <file>` in its own process (its own emulator, work
directory and CDK CLI runs; 20-35 seconds each on 2 cores). Outcomes: PASS (deployed as configured, checked,
redeployed with no change, destroyed, checked against the stage's removal policy), SKIP (the rehearsal says why the
config cannot be rehearsed on moto: exit status 3; no example today), FAIL (a check failed, or the rehearsal could
not run). Exit status 1 when any
example failed. The make target runs tests/rehearsal/test_rehearse_examples.py, which also holds the documented
outcome of each example.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO_ROOT / "config" / "examples").glob("*.yaml"))
TIMEOUT_SECONDS = 600  # one rehearsal, deploy to destroy, takes 20-35 seconds on 2 cores


@dataclass(frozen=True)
class Outcome:
    example: str  # the file's name
    result: str  # PASS, SKIP or FAIL
    detail: str  # the stage and its result line; why it cannot be rehearsed; or what failed
    seconds: float
    output: str  # everything the rehearsal printed, for a failure's message

    def row(self) -> str:
        return f"{self.result:<4}  {self.example:<28} {self.seconds:6.1f} s  {self.detail}"


def rehearse_example(config: Path) -> Outcome:
    """One example's rehearsal, as `make rehearse CONFIG=<config>` runs it."""
    started = time.monotonic()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "rehearsal.rehearse", "--config", _shown(config)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        return Outcome(config.name, "FAIL", f"no result within {TIMEOUT_SECONDS} s", time.monotonic() - started, output)
    seconds = time.monotonic() - started
    output = completed.stdout + completed.stderr
    return Outcome(config.name, *_result(completed.returncode, completed.stdout, completed.stderr), seconds, output)


def _shown(config: Path) -> str:
    """The path as the table shows it: relative to the repository where it is inside it."""
    resolved = config.resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(config)


def _result(status: int, stdout: str, stderr: str) -> tuple[str, str]:
    stage = re.search(r"^Deploy rehearsal of stage (\S+)", stdout, re.MULTILINE)
    summary = re.search(r"^Result: .*$", stdout, re.MULTILINE)
    where = f"stage {stage.group(1)}: " if stage else ""
    if status == 0:
        return "PASS", where + (summary.group(0) if summary else "exit status 0")
    if status == 3:
        reason = re.search(r"^rehearsal: cannot rehearse \S+ on moto: (.*)$", stderr, re.MULTILINE)
        return "SKIP", reason.group(1) if reason else stderr.strip()
    if summary:
        return "FAIL", where + summary.group(0)
    last = [line for line in stderr.splitlines() if line.strip()][-1:] or [f"exit status {status}"]
    return "FAIL", where + f"exit status {status}: {last[0]}"


def table(outcomes: list[Outcome]) -> str:
    counts = {result: sum(o.result == result for o in outcomes) for result in ("PASS", "SKIP", "FAIL")}
    total = sum(o.seconds for o in outcomes)
    return "\n".join(
        [
            "Deploy rehearsal of each example on moto (PASS: deployed and checked; SKIP: cannot be rehearsed, and why)",
            *(o.row() for o in outcomes),
            f"{counts['PASS']} passed, {counts['SKIP']} skipped with a reason, {counts['FAIL']} failed ({total:.0f} s)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    configs = [Path(p) for p in (sys.argv[1:] if argv is None else argv)] or EXAMPLES
    outcomes = []
    for config in configs:
        outcomes.append(outcome := rehearse_example(config))
        print(outcome.row(), flush=True)
    print(f"\n{table(outcomes)}")
    return 1 if any(o.result == "FAIL" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
