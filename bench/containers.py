"""The time of `make test-containers` with every image's environment built anew (`--rebuild`), then its tests:
what a new machine, or a lock bump, costs. The registry here sends no caching headers, so pip's cache keeps no
download and every wheel (GBs of torch CUDA builds) is downloaded again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# The bound for the whole target on this 2-core machine, installs included, from a warm cache.
TARGET_SECONDS = 30 * 60
TIMING = re.compile(r"^(?P<name>[\w.-]+): set-up (?P<setup>\d+) s, tests (?P<tests>\d+) s(?P<failed>, FAILED)?$", re.M)
PASSED = re.compile(r"^=*\s*(\d+ (?:passed|failed).*? in [\d.]+s.*?)\s*=*$", re.M)


@dataclass
class EnvironmentTiming:
    name: str
    setup_seconds: int
    test_seconds: int
    passed: bool
    pytest_summary: str


@dataclass
class ContainersResult:
    wall_seconds: float
    environments: list[EnvironmentTiming]
    exit_code: int


def parse(output: str) -> list[EnvironmentTiming]:
    """The runner's closing lines, each with the pytest summary printed in that environment (in order)."""
    summary = output.rsplit("== test-containers", 1)[-1]
    pytest_lines = PASSED.findall(output)
    timings = []
    for index, found in enumerate(TIMING.finditer(summary)):
        timings.append(
            EnvironmentTiming(
                found["name"],
                int(found["setup"]),
                int(found["tests"]),
                not found["failed"],
                pytest_lines[index] if index < len(pytest_lines) else "",
            )
        )
    return timings


def run(*, log: Any = print) -> ContainersResult:
    log("containers: scripts/test_containers.py --rebuild")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "scripts/test_containers.py", "--rebuild"],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    return ContainersResult(wall, parse(result.stdout + result.stderr), result.returncode)


def markdown(result: ContainersResult) -> str:
    met = result.wall_seconds < TARGET_SECONDS and result.exit_code == 0
    lines = [
        "## Container test environments",
        "",
        "`make test-containers` with every venv rebuilt (`scripts/test_containers.py --rebuild`; every wheel "
        "downloaded: the registry's answers carry no caching headers): per image, the set-up (venv, the image's lock, "
        "then what the job installs at start) and its tests. With the venvs kept, a run is the tests alone. 1 run.",
        "",
        "| environment | set-up s | tests s | pytest |",
        "|---|---:|---:|---|",
        *[
            f"| {e.name} | {e.setup_seconds} | {e.test_seconds} | "
            f"{e.pytest_summary or '(no summary)'}{'' if e.passed else ' **FAILED**'} |"
            for e in result.environments
        ],
        "",
        f"Whole target: {result.wall_seconds:.0f} s, exit status {result.exit_code}. Target: under "
        f"{TARGET_SECONDS // 60} minutes on 2 cores. Result: **{'meets' if met else 'misses'}**.",
    ]
    return "\n".join(lines) + "\n"
