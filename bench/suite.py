"""The test suite's wall time after set-up, its slowest tests, and (opt-in) the set-up time of `make test` in a fresh
clone.

The suite runs as `make test` runs it after lint (`.venv/bin/python -m pytest`), with `-q --durations=0` added and
the Makefile's environment. The fresh clone is `git clone` of this repository (its committed HEAD: uncommitted work
is not in it) into a temporary folder, then, in it, the Makefile's set-up targets (the virtualenv with every
requirement, checkov's own virtualenv, node_modules) and then `make test` itself; it downloads and installs
everything, so it takes minutes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import Sample
from bench.synth import children_cpu, environment

REPO_ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 180.0
SETUP_TARGETS = (".venv/.test-deps", ".venv-checkov/.installed", "node_modules/.installed")


@dataclass
class SuiteResult:
    wall: Sample
    cpu: Sample
    summary: str  # pytest's last line, e.g. "510 passed in 254.90s"
    slowest: list[tuple[float, str, str]]  # (seconds, phase, test id), the 10 slowest
    folders: list[tuple[str, float, int]]  # (folder, seconds, tests with a recorded duration)
    exit_codes: list[int]


@dataclass
class FreshCloneResult:
    commit: str
    clone_seconds: float
    setup_seconds: float | None  # None when the set-up targets were not found in the Makefile
    test_seconds: float
    setup_targets: tuple[str, ...]
    exit_code: int
    tail: str = ""
    notes: list[str] = field(default_factory=list)


def _durations(output: str) -> list[tuple[float, str, str]]:
    """pytest's --durations lines, slowest first: (seconds, phase, test id)."""
    rows = []
    for match in re.finditer(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", output, re.MULTILINE):
        rows.append((float(match.group(1)), match.group(2), match.group(3)))
    return sorted(rows, reverse=True)


def by_folder(rows: list[tuple[float, str, str]]) -> list[tuple[str, float, int]]:
    """(folder, seconds, tests) summed over every phase of every test, largest first."""
    seconds: dict[str, float] = {}
    tests: dict[str, set[str]] = {}
    for duration, _phase, test in rows:
        path = test.split("::", 1)[0]
        folder = "/".join(path.split("/")[:2]) if path.count("/") >= 2 else path
        seconds[folder] = seconds.get(folder, 0.0) + duration
        tests.setdefault(folder, set()).add(test)
    return sorted(((folder, total, len(tests[folder])) for folder, total in seconds.items()), key=lambda r: -r[1])


def run(*, runs: int = 1, log: Any = print) -> SuiteResult:
    walls, cpus, codes = [], [], []
    output = ""
    for index in range(runs):
        log(f"suite: pytest run {index + 1}/{runs}")
        cpu_before, started = children_cpu(), time.perf_counter()
        result = subprocess.run(
            [str(REPO_ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "--durations=0"],
            cwd=REPO_ROOT,
            env=environment(),
            capture_output=True,
            text=True,
        )
        walls.append(time.perf_counter() - started)
        cpus.append(children_cpu() - cpu_before)
        codes.append(result.returncode)
        output = result.stdout + result.stderr
    lines = [line for line in output.strip().splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else "(no output)"
    rows = _durations(output)
    return SuiteResult(Sample.of(walls), Sample.of(cpus), summary, rows[:10], by_folder(rows), codes)


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def fresh_clone(*, log: Any = print) -> FreshCloneResult:
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain")
    with tempfile.TemporaryDirectory(prefix="bench-fresh-clone-") as scratch:
        clone = Path(scratch) / "repo"
        log(f"fresh clone: git clone {REPO_ROOT} (HEAD {commit[:12]})")
        started = time.perf_counter()
        subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True)
        clone_seconds = time.perf_counter() - started
        # A clean environment for the clone: the Makefile's own exports, no virtualenv of this checkout.
        env = {key: value for key, value in environment().items() if key not in ("VIRTUAL_ENV", "CDK_HOME")}
        # The set-up targets as the Makefile names them (through $(VENV)); `make -n` knows whether they exist.
        targets = tuple(
            target
            for target in SETUP_TARGETS
            if subprocess.run(["make", "-n", target], cwd=clone, env=env, capture_output=True).returncode == 0
        )
        setup_seconds = None
        if len(targets) == len(SETUP_TARGETS):
            log("fresh clone: make " + " ".join(targets))
            started = time.perf_counter()
            setup = subprocess.run(["make", *targets], cwd=clone, env=env, capture_output=True, text=True)
            setup_seconds = time.perf_counter() - started
            if setup.returncode != 0:
                return FreshCloneResult(
                    commit, clone_seconds, setup_seconds, 0.0, targets, setup.returncode,
                    (setup.stdout + setup.stderr)[-2000:], ["set-up failed"],
                )  # fmt: skip
        log("fresh clone: make test")
        started = time.perf_counter()
        test = subprocess.run(["make", "test"], cwd=clone, env=env, capture_output=True, text=True)
        test_seconds = time.perf_counter() - started
        notes = []
        summaries = re.findall(r"^=*\s*(\d+ (?:passed|failed).*? in [\d.]+s.*?)\s*=*$", test.stdout, re.MULTILINE)
        if summaries:
            notes.append(f"pytest in the clone: `{summaries[-1]}`")
        if dirty:
            notes.append(f"the clone is HEAD {commit[:12]}; this checkout had uncommitted changes, not measured here")
        result = FreshCloneResult(
            commit, clone_seconds, setup_seconds, test_seconds, targets, test.returncode,
            (test.stderr + test.stdout)[-1500:], notes,
        )  # fmt: skip
        shutil.rmtree(clone, ignore_errors=True)
    return result


def markdown(result: SuiteResult) -> str:
    wall = result.wall
    passed = all(code == 0 for code in result.exit_codes)
    lines = [
        "## Test suite",
        "",
        "`.venv/bin/python -m pytest -q --durations=0` in the repo, after set-up, with the Makefile's "
        "environment (what `make test` runs after lint).",
        "",
        "| figure | runs | median | lowest-highest | spread |",
        "|---|---:|---:|---:|---:|",
        f"| wall time | {wall.runs} | {wall.median:.1f} s | {wall.low:.1f}-{wall.high:.1f} s | "
        f"{wall.spread_percent:.1f}% |",
        f"| CPU time (all processes) | {result.cpu.runs} | {result.cpu.median:.1f} s | {result.cpu.low:.1f}-"
        f"{result.cpu.high:.1f} s | {result.cpu.spread_percent:.1f}% |",
        "",
        f"pytest: `{result.summary}`" + ("" if passed else " (**not all tests passed** in this run)") + ".",
        f"Target: under {TARGET_SECONDS:.0f} s on 2 cores. Result: "
        f"**{'meets' if wall.median < TARGET_SECONDS else 'misses'}** ({wall.median:.0f} s).",
        "",
        "The 10 slowest (from the last run):",
        "",
        "| s | phase | test |",
        "|---:|---|---|",
        *[f"| {seconds:.2f} | {phase} | `{test}` |" for seconds, phase, test in result.slowest],
        "",
        "Where the suite's time goes, by folder (setup, call and teardown of every test, as pytest reports them; "
        "session fixtures count once, in the first test that uses them):",
        "",
        "| folder | s | tests |",
        "|---|---:|---:|",
        *[f"| `{folder}` | {seconds:.1f} | {count} |" for folder, seconds, count in result.folders],
    ]
    return "\n".join(lines) + "\n"


def clone_markdown(clone: FreshCloneResult | None) -> str:
    lines = ["## Fresh clone: set-up time of `make test`", ""]
    if clone is None:
        lines.append(
            "Not measured in this run (it downloads and installs everything, several minutes): "
            "`make bench BENCH_FRESH_CLONE=1`."
        )
        return "\n".join(lines) + "\n"
    setup = "n/a (set-up targets not found)" if clone.setup_seconds is None else f"{clone.setup_seconds:.0f}"
    lines += [
        f"`git clone` of this repository (HEAD {clone.commit[:12]}) into a temporary folder, then in it the "
        f"Makefile's set-up (`make {' '.join(clone.setup_targets)}`: the virtualenv with every pinned requirement, "
        "checkov's virtualenv and node_modules from package-lock.json), then `make test` (lint and the whole "
        "suite). 1 run.",
        "",
        "| step | s |",
        "|---|---:|",
        f"| git clone | {clone.clone_seconds:.1f} |",
        f"| set-up | {setup} |",
        f"| make test after set-up (lint + pytest) | {clone.test_seconds:.0f} |",
        "",
        f"Exit status {clone.exit_code}.",
        *[f"Note: {note}." for note in clone.notes],
    ]
    if clone.exit_code != 0:
        lines += ["", "```", clone.tail, "```"]
    return "\n".join(lines) + "\n"
