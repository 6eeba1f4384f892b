"""Synth: the whole app through the pinned CDK CLI against a minimal app (one stack, one bucket) through the same CLI,
venv and cdk.json flags, interleaved; then where the whole app's time goes.

The CLI pairs run three times per round: as `make synth` does (the CDK's template validation on, the SageMaker SDK's
results and the validation's reports served from the synth cache, core/synth_cache.py: the headline figure), with
the synth cache off (SYNTH_CACHE=off: what a fresh clone's first synth pays), and with `--no-validation` on both
sides, so that the ratio is seen every way.

The breakdown runs app.py's build in fresh interpreters (bench/synth_phases.py), as the CLI does: once as it is
(with timers, and with a warm second build that shows what is one-time loading), once per variant with one part
switched off, and once under cProfile with the jsii node process under V8's CPU profiler.
"""

from __future__ import annotations

import filecmp
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import profiles
from bench.stats import Sample, paired_ratios

REPO_ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = REPO_ROOT / "node_modules" / ".bin"
CDK_CLI = NODE_BIN / "cdk"
CONFIG = "config/default.yaml"
TARGET_RATIO = 1.8

# The Makefile's exports: the same quiet, offline CLI a `make synth` runs (and PATH with the project's Node first).
MAKE_ENVIRONMENT = {
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "CDK_DISABLE_VERSION_CHECK": "1",
    "CDK_HOME": str(REPO_ROOT / ".cdk-home"),
    "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
    "DS_ACCELERATOR": "cpu",
}

MINIMAL_APP = '''"""The smallest CDK app worth synthesizing: one stack with one bucket (bench/synth.py's baseline)."""

from aws_cdk import App, Stack
from aws_cdk import aws_s3 as s3

app = App()
stack = Stack(app, "Minimal")
s3.Bucket(stack, "Bucket")
app.synth()
'''

# Measured by default, in alternating order, `variant_rounds` times each: what the synth cache saves, and what the
# checks (cdk-nag's acknowledgements and three packs) and the built-in validation cost a synthesis.
# bench/synth_phases.py also has aws-solutions-only (the AwsSolutions pack alone) for a closer look by hand.
VARIANT_ORDER = ("as-app", "no-synth-cache", "no-checks", "no-validation")
# The synth cache off, for the CLI runs and the phases' variant.
CACHE_OFF = {"SYNTH_CACHE": "off"}
# `make bench` on 2026-11-29 (BENCHMARKS.md then), before the two cuts now in the app: the SageMaker SDK session
# and config validation shared per process (infrastructure/constructs/training_pipeline/offline_sdk.py), and the cdk-nag
# acknowledgements applied from Python instead of by a Python aspect (infrastructure/compliance.py).
BEFORE_CUTS = {
    "date": "2026-11-29",
    "whole_seconds": 20.02,
    "minimal_seconds": 5.59,
    "ratio": 3.58,
    "definitions_seconds": 4.22,
    "aspect_callbacks": 428,
    "aspect_jsii_requests": 1464,
}
# jsii requests of one fresh build and synth of the default config before the round-trip cuts (bench/synth_phases.py's
# count on 2026-12-01, the app as of 85670d3 with the synth cache).
BEFORE_ROUND_TRIPS = 2819
# Callers worth showing from the Python profile: the SDK's config validation and botocore's service-model loading.
INTERESTING_CALLERS = ("validate_sagemaker_config", "loaders.py:375(load_service_model)")


class BenchError(RuntimeError):
    """A benchmark could not run; the message says what failed and how to reproduce it."""


def environment() -> dict[str, str]:
    """The Makefile's environment: its exports, and node_modules/.bin first on PATH (the CLI's and jsii's Node)."""
    path = os.environ.get("PATH", "")
    if not path.startswith(f"{NODE_BIN}{os.pathsep}"):
        path = f"{NODE_BIN}{os.pathsep}{path}"
    return {**os.environ, **MAKE_ENVIRONMENT, "PATH": path}


def venv_python() -> str:
    candidate = REPO_ROOT / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def write_minimal_app(directory: Path) -> Path:
    """app.py and a cdk.json with the repo's flags and the same interpreter, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    settings = json.loads((REPO_ROOT / "cdk.json").read_text())
    settings["app"] = f"{venv_python()} app.py"
    settings.pop("watch", None)
    (directory / "cdk.json").write_text(json.dumps(settings, indent=2))
    (directory / "app.py").write_text(MINIMAL_APP)
    return directory


@dataclass(frozen=True)
class Timing:
    wall: float  # seconds on the clock
    cpu: float  # user + system seconds of the whole process tree (CLI, Python, jsii's node): other load barely moves it


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# Runs a command as the subreaper of its descendants (Linux): app.py exits without waiting for its jsii node process
# (app.exit_without_teardown), which then ends as an orphan; adopted and reaped here, its CPU time still counts in
# the caller's RUSAGE_CHILDREN. Writes the command's own wall time (what a person waits) to the file argv[1].
_REAPER = """
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
started = time.perf_counter()
code = subprocess.call(sys.argv[2:])
elapsed = time.perf_counter() - started
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
with open(sys.argv[1], "w") as out:
    out.write(repr(elapsed))
sys.exit(code)
"""


def timed_run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, what: str) -> Timing:
    """Wall time until `command` exits; CPU time of everything it started, including processes that outlive it."""
    cpu_before = children_cpu()
    with tempfile.NamedTemporaryFile(suffix=".wall") as wall:
        reaped = [sys.executable, "-c", _REAPER, wall.name, *command] if sys.platform == "linux" else command
        started = time.perf_counter()
        result = subprocess.run(reaped, cwd=cwd, env=env or environment(), capture_output=True, text=True)
        measured = Path(wall.name).read_text()
        elapsed = float(measured) if measured else time.perf_counter() - started
    if result.returncode != 0:
        tail = (result.stderr or result.stdout)[-3000:]
        raise BenchError(f"{what} failed (exit {result.returncode}): {' '.join(command)} in {cwd}\n{tail}")
    return Timing(elapsed, children_cpu() - cpu_before)


def cli_synth(cwd: Path, outdir: Path, *extra: str, env: dict[str, str] | None = None) -> Timing:
    command = [str(CDK_CLI), "synth", "--quiet", "-o", str(outdir), *extra]
    return timed_run(command, cwd=cwd, env={**environment(), **(env or {})}, what="cdk synth")


def compare_assemblies(first: Path, second: Path) -> list[str]:
    """Relative paths that differ between two cloud assemblies (present in one only, or different bytes)."""
    differences: list[str] = []

    def walk(comparison: filecmp.dircmp, prefix: str) -> None:
        differences.extend(f"{prefix}{name} (only in one)" for name in comparison.left_only + comparison.right_only)
        _, mismatch, errors = filecmp.cmpfiles(
            comparison.left, comparison.right, comparison.common_files, shallow=False
        )
        differences.extend(f"{prefix}{name}" for name in mismatch + errors)
        for name, sub in comparison.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(first, second), "")
    return sorted(differences)


def count_files(root: Path) -> tuple[int, int]:
    files = [path for path in root.rglob("*") if path.is_file()]
    return len(files), sum(1 for path in files if path.name.endswith(".template.json"))


@dataclass
class SynthResult:
    full_wall: Sample
    minimal_wall: Sample
    ratio_wall: Sample
    full_cpu: Sample
    minimal_cpu: Sample
    ratio_cpu: Sample
    # The same pairs with `cdk synth --no-validation` on both sides (None: not measured).
    full_wall_unvalidated: Sample | None = None
    minimal_wall_unvalidated: Sample | None = None
    ratio_wall_unvalidated: Sample | None = None
    ratio_cpu_unvalidated: Sample | None = None
    # The whole app with the synth cache off (SYNTH_CACHE=off), paired with the same rounds' minimal app.
    full_wall_uncached: Sample | None = None
    ratio_wall_uncached: Sample | None = None
    ratio_cpu_uncached: Sample | None = None
    cache_differences: list[str] | None = None  # files that differ between the assemblies with and without the cache
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # the first round's measurements
    rounds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # every round's, per variant
    python_profile: profiles.PythonProfile | None = None
    node_profile: profiles.NodeProfile | None = None
    cli_differences: list[str] | None = None
    cli_assembly: Path | None = None  # the first CLI run's output (the artifacts section reads its templates)
    assembly_files: tuple[int, int] = (0, 0)


def run_phases(work: Path, variant: str, *, warm: bool = False) -> dict[str, Any]:
    out = work / f"phases-{variant}.json"
    command = [venv_python(), "-m", "bench.synth_phases", "--json", str(out), "--variant", variant]
    if warm:
        command.append("--warm-rebuild")
    timed_run(command, cwd=REPO_ROOT, what=f"synth phases ({variant})")
    return json.loads(out.read_text())


def run_profiles(work: Path) -> tuple[profiles.PythonProfile, profiles.NodeProfile | None]:
    """One more fresh build: Python under cProfile, the jsii node process under --cpu-prof (via JSII_NODE)."""
    node_dir = work / "node-profile"
    node_dir.mkdir(exist_ok=True)
    wrapper = work / "node-with-cpu-profile.sh"
    wrapper.write_text(f'#!/bin/sh\nexec node --cpu-prof --cpu-prof-dir="{node_dir}" "$@"\n')
    wrapper.chmod(0o755)
    python_stats = work / "app.prof"
    timed_run(
        [venv_python(), "-m", "bench.synth_phases", "--json", str(work / "phases-profiled.json"),
         "--profile", str(python_stats)],
        cwd=REPO_ROOT, env={**environment(), "JSII_NODE": str(wrapper)}, what="profiled synth",
    )  # fmt: skip
    return (
        profiles.summarize_python(python_stats, interesting=INTERESTING_CALLERS),
        profiles.summarize_node(node_dir),
    )


def run(work: Path, *, runs: int = 3, variant_rounds: int = 2, log: Any = print) -> SynthResult:
    """A warm-up, the variants and profiles first (they also warm the disk cache), then the interleaved CLI runs."""
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANT_ORDER}
    # Untimed: fills the synth cache for this code, config and environment, as a person's earlier synth has.
    log("synth: warm-up synth of the whole app (fills the synth cache)")
    cli_synth(REPO_ROOT, work / "warm-up", "-c", f"config={CONFIG}")
    for index in range(variant_rounds):
        order = VARIANT_ORDER if index % 2 == 0 else tuple(reversed(VARIANT_ORDER))
        for variant in order:
            log(f"synth: fresh-process build {index + 1}/{variant_rounds}, variant {variant}")
            rounds[variant].append(run_phases(work, variant, warm=index == 0 and variant == "as-app"))
    variants = {name: runs_of[0] for name, runs_of in rounds.items()}
    log("synth: profiled build (cProfile + node --cpu-prof)")
    python_profile, node_profile = run_profiles(work)

    minimal_dir = write_minimal_app(work / "minimal-app")
    full: list[Timing] = []
    minimal: list[Timing] = []
    full_unvalidated: list[Timing] = []
    minimal_unvalidated: list[Timing] = []
    uncached: list[Timing] = []
    outputs: list[Path] = []
    # The cache as a person's second `make synth` finds it: filled by the variants above (the same config and code).
    for index in range(runs):
        log(f"synth: CLI round {index + 1}/{runs} (whole app, minimal app, whole app without the synth cache, "
            "then both with --no-validation)")  # fmt: skip
        outputs.append(work / f"cli-full-{index}")
        full.append(cli_synth(REPO_ROOT, outputs[-1], "-c", f"config={CONFIG}"))
        minimal.append(cli_synth(minimal_dir, work / f"cli-minimal-{index}"))
        uncached.append(cli_synth(REPO_ROOT, work / f"cli-uncached-{index}", "-c", f"config={CONFIG}", env=CACHE_OFF))
        full_unvalidated.append(
            cli_synth(REPO_ROOT, work / f"cli-full-unvalidated-{index}", "-c", f"config={CONFIG}", "--no-validation")
        )
        minimal_unvalidated.append(cli_synth(minimal_dir, work / f"cli-minimal-unvalidated-{index}", "--no-validation"))
    result = SynthResult(
        Sample.of([t.wall for t in full]),
        Sample.of([t.wall for t in minimal]),
        paired_ratios([t.wall for t in full], [t.wall for t in minimal]),
        Sample.of([t.cpu for t in full]),
        Sample.of([t.cpu for t in minimal]),
        paired_ratios([t.cpu for t in full], [t.cpu for t in minimal]),
        full_wall_unvalidated=Sample.of([t.wall for t in full_unvalidated]),
        minimal_wall_unvalidated=Sample.of([t.wall for t in minimal_unvalidated]),
        ratio_wall_unvalidated=paired_ratios([t.wall for t in full_unvalidated], [t.wall for t in minimal_unvalidated]),
        ratio_cpu_unvalidated=paired_ratios([t.cpu for t in full_unvalidated], [t.cpu for t in minimal_unvalidated]),
        full_wall_uncached=Sample.of([t.wall for t in uncached]),
        ratio_wall_uncached=paired_ratios([t.wall for t in uncached], [t.wall for t in minimal]),
        ratio_cpu_uncached=paired_ratios([t.cpu for t in uncached], [t.cpu for t in minimal]),
        cache_differences=compare_assemblies(outputs[0], work / "cli-uncached-0"),
        variants=variants,
        rounds=rounds,
        python_profile=python_profile,
        node_profile=node_profile,
        cli_assembly=outputs[0],
        assembly_files=count_files(outputs[0]),
    )
    if len(outputs) >= 2:
        result.cli_differences = compare_assemblies(outputs[0], outputs[1])
    return result


def markdown(result: SynthResult) -> str:
    """The section of BENCHMARKS.md (bench/synth_report.py)."""
    from bench import synth_report

    return synth_report.markdown(result)
