"""Synth: the whole app through the pinned CDK CLI against a minimal app (one stack, one bucket) through the same CLI,
venv and cdk.json flags, interleaved; then where the whole app's time goes.

The CLI pairs run twice per round: as `make synth` does (the CDK's built-in template validation on, the headline
figure) and with `--no-validation` on both sides, so that the ratio is seen both ways.

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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import profiles
from bench.stats import Sample, paired_ratios, verdict
from bench.synth_phases import CHECK_PHASE, DEFINITIONS_PHASE_PREFIX

REPO_ROOT = Path(__file__).resolve().parent.parent
CDK_CLI = REPO_ROOT / "node_modules" / ".bin" / "cdk"
CONFIG = "config/default.yaml"
TARGET_RATIO = 1.5

# The Makefile's exports: the same quiet, offline CLI a `make synth` runs.
MAKE_ENVIRONMENT = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
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

# Measured by default, in alternating order, `variant_rounds` times each: what the checks (cdk-nag's
# acknowledgements and three packs) and the built-in validation cost a synthesis. bench/synth_phases.py also has
# aws-solutions-only (the AwsSolutions pack alone) for a closer look by hand.
VARIANT_ORDER = ("as-app", "no-checks", "no-validation")
# `make bench` on 2026-11-29 (BENCHMARKS.md then), before the two cuts now in the app: the SageMaker SDK session
# and config validation shared per process (stacks/constructs/training_pipeline/definition.py), and the cdk-nag
# acknowledgements applied from Python instead of by a Python aspect (stacks/compliance.py).
BEFORE_CUTS = {
    "date": "2026-11-29",
    "whole_seconds": 20.02,
    "minimal_seconds": 5.59,
    "ratio": 3.58,
    "definitions_seconds": 4.22,
    "aspect_callbacks": 428,
    "aspect_jsii_requests": 1464,
}
# Callers worth showing from the Python profile: the SDK's config validation and botocore's service-model loading.
INTERESTING_CALLERS = ("validate_sagemaker_config", "loaders.py:375(load_service_model)")


class BenchError(RuntimeError):
    """A benchmark could not run; the message says what failed and how to reproduce it."""


def environment() -> dict[str, str]:
    return {**os.environ, **MAKE_ENVIRONMENT}


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


def timed_run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, what: str) -> Timing:
    cpu_before = children_cpu()
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env or environment(), capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        tail = (result.stderr or result.stdout)[-3000:]
        raise BenchError(f"{what} failed (exit {result.returncode}): {' '.join(command)} in {cwd}\n{tail}")
    return Timing(elapsed, children_cpu() - cpu_before)


def cli_synth(cwd: Path, outdir: Path, *extra: str) -> Timing:
    return timed_run([str(CDK_CLI), "synth", "--quiet", "-o", str(outdir), *extra], cwd=cwd, what="cdk synth")


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
    """Variants and profiles first (they also warm the disk cache), then the interleaved CLI runs."""
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANT_ORDER}
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
    outputs: list[Path] = []
    for index in range(runs):
        log(f"synth: CLI round {index + 1}/{runs} (whole app, minimal app, then both with --no-validation)")
        outputs.append(work / f"cli-full-{index}")
        full.append(cli_synth(REPO_ROOT, outputs[-1], "-c", f"config={CONFIG}"))
        minimal.append(cli_synth(minimal_dir, work / f"cli-minimal-{index}"))
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


# --- the report ------------------------------------------------------------------------------------------------


def _row(name: str, sample: Sample, unit: str = "s", digits: int = 2) -> str:
    return (
        f"| {name} | {sample.runs} | {sample.median:.{digits}f} {unit} | {sample.low:.{digits}f}-"
        f"{sample.high:.{digits}f} {unit} | {sample.spread_percent:.1f}% |"
    )


def _phase_table(phases: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| phase (first build in a fresh process) | calls | inclusive s | own s | jsii requests | "
        "node answered in s | callbacks into Python |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in phases:
        lines.append(
            f"| {phase['label']} | {phase['calls']} | {phase['seconds']:.2f} | {phase['exclusive_seconds']:.2f} | "
            f"{phase['jsii_requests']} | {phase['jsii_seconds']:.2f} | {phase['jsii_callbacks']} |"
        )
    return lines


def _phase_seconds(phases: list[dict[str, Any]], needle: str) -> float:
    return sum(phase["seconds"] for phase in phases if needle in phase["label"])


def _cpu(variant: dict[str, Any] | None) -> float | None:
    return None if variant is None else variant.get("cpu_seconds_to_first_synth")


def _samples(result: SynthResult, name: str) -> tuple[Sample, Sample | None] | None:
    """(wall, CPU) to the end of the first synth over the variant's rounds."""
    runs = result.rounds.get(name) or []
    if not runs:
        return None
    cpus = [run["cpu_seconds_to_first_synth"] for run in runs if run.get("cpu_seconds_to_first_synth") is not None]
    return Sample.of([run["seconds_to_first_synth"] for run in runs]), Sample.of(cpus) if cpus else None


def _saving(result: SynthResult, name: str, key: str = "cpu_seconds_to_first_synth") -> Sample | None:
    """Seconds (CPU by default, or wall with key="seconds_to_first_synth") the variant saves against app.py, per
    round (positive: cheaper)."""
    base, other = result.rounds.get("as-app") or [], result.rounds.get(name) or []
    pairs = [(a.get(key), b.get(key)) for a, b in zip(base, other, strict=False)]
    savings = [a - b for a, b in pairs if a is not None and b is not None]
    return Sample.of(savings) if savings else None


WALL = "seconds_to_first_synth"


def _saving_text(sample: Sample | None) -> str:
    if sample is None:
        return "n/a"
    if sample.runs == 1:
        return f"{sample.median:+.2f}"
    return f"{sample.median:+.2f} ({sample.low:+.2f} to {sample.high:+.2f})"


def markdown(result: SynthResult) -> str:
    lines = [
        "## Synth: the whole app against a minimal app",
        "",
        f"`node_modules/.bin/cdk synth --quiet -c config={CONFIG}` (every stage, every stack) against the same CLI on "
        "a one-stack, one-bucket app in a temporary folder with the same virtualenv and cdk.json flags, run in "
        "alternation (whole, minimal, whole, minimal, ...), with the Makefile's environment (telemetry and version "
        "check off, CDK_HOME in the repo). Each round also runs both with `--no-validation` (the CDK's built-in "
        "CloudFormation template validation off, on both sides). Wall time is what a person waits; CPU time (user + "
        "system of the whole process tree: the CLI, Python and jsii's node) is what the work costs, and moves far "
        "less when other processes share the machine.",
        "",
        "| figure | runs | median | lowest-highest | spread |",
        "|---|---:|---:|---:|---:|",
        _row("whole app, wall", result.full_wall),
        _row("minimal app, wall", result.minimal_wall),
        _row("**ratio whole / minimal, wall** (per pair)", result.ratio_wall, "x"),
        _row("whole app, CPU", result.full_cpu),
        _row("minimal app, CPU", result.minimal_cpu),
        _row("ratio whole / minimal, CPU (per pair)", result.ratio_cpu, "x"),
        *_unvalidated_rows(result),
        "",
        f"Target: at most {TARGET_RATIO}x. Result: **{verdict(result.ratio_wall.median, TARGET_RATIO)}** "
        f"({result.ratio_wall.median:.2f}x wall, {result.ratio_cpu.median:.2f}x CPU; the whole app costs "
        f"{result.full_wall.median - result.minimal_wall.median:.1f} s more than the minimal one).",
        *_unvalidated_text(result),
    ]
    app = result.variants.get("as-app")
    if app:
        lines += _breakdown(result, app)
    lines += _profile_sections(result)
    lines += _hotspots(result)
    return "\n".join(lines) + "\n"


def _unvalidated_rows(result: SynthResult) -> list[str]:
    if not (result.full_wall_unvalidated and result.minimal_wall_unvalidated and result.ratio_wall_unvalidated):
        return []
    rows = [
        _row("whole app, wall, `--no-validation`", result.full_wall_unvalidated),
        _row("minimal app, wall, `--no-validation`", result.minimal_wall_unvalidated),
        _row("ratio whole / minimal, wall, both `--no-validation` (per pair)", result.ratio_wall_unvalidated, "x"),
    ]
    if result.ratio_cpu_unvalidated:
        rows.append(
            _row("ratio whole / minimal, CPU, both `--no-validation` (per pair)", result.ratio_cpu_unvalidated, "x")
        )
    return rows


def _unvalidated_text(result: SynthResult) -> list[str]:
    whole_off, minimal_off = result.full_wall_unvalidated, result.minimal_wall_unvalidated
    if not (whole_off and minimal_off and result.ratio_wall_unvalidated):
        return []
    whole_cost = result.full_wall.median - whole_off.median
    minimal_cost = result.minimal_wall.median - minimal_off.median
    return [
        "",
        f"With the built-in validation off on both sides the ratio is {result.ratio_wall_unvalidated.median:.2f}x: "
        f"the validation costs the whole app {whole_cost:.1f} s and the minimal app {minimal_cost:.1f} s (medians), "
        f"{_share(minimal_cost, result.minimal_wall.median)} of the minimal app's time against "
        f"{_share(whole_cost, result.full_wall.median)} of the whole app's, mostly the validation engine's start, "
        "which both pay. The headline figure keeps validation on both sides, as `make synth` runs.",
    ]


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "n/a"


def _breakdown(result: SynthResult, app: dict[str, Any]) -> list[str]:
    first, warm = app["first_build"], app.get("warm_build")
    lines = [
        "",
        "### Where the time goes in app.py's process",
        "",
        "A fresh `python` process builds and synthesizes the app as app.py does, with timers around each part "
        "(1 run: a profile, to compare the parts with each other). `jsii requests`: calls from Python into the jsii "
        "node process; `node answered in`: the time Python waited for them; callbacks: node calling Python code "
        "back (an aspect or other construct code written in Python; the app has none left).",
        "",
        *_phase_table(app["phases"]),
        "",
        f"From interpreter start to the end of the first `app.synth()`: {app['seconds_to_first_synth']:.2f} s wall, "
        f"{_fmt(_cpu(app))} CPU (Python + node). The CLI adds its own start, starting the app, and reading the "
        "assembly back: compare the minimal app's time above.",
    ]
    if warm:
        lines += [
            "",
            f"A second build of the same app in the same process (every module, jsii type and engine already loaded, "
            f"the SDK definitions cached) takes {warm['total_seconds']:.2f} s (construct "
            f"{warm['construct_seconds']:.2f} s + synth {warm['synth_seconds']:.2f} s) against "
            f"{first['total_seconds']:.2f} s for the first: about "
            f"{first['total_seconds'] - warm['total_seconds']:.0f} s of every `cdk synth` is one-time loading, "
            "paid again by each fresh process.",
        ]
    lines += [
        "",
        f"### Variants: one part switched off, each in fresh processes, {_round_count(result)} rounds in "
        "alternating order",
        "",
        "Medians over the rounds; a saving is the median of the per-round differences against app.py (lowest to "
        "highest in brackets). Construct and app.synth() times are the first round's. CPU can exceed wall time: "
        "node's compiler and garbage-collector threads run beside the main thread.",
        "",
        "| variant | wall to end of first synth, s | wall saved vs app.py, s | CPU, s | CPU saved vs app.py, s | "
        "construct, s | app.synth(), s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in VARIANT_ORDER:
        variant, samples = result.variants.get(name), _samples(result, name)
        if not variant or not samples:
            continue
        wall, cpu = samples
        build = variant["first_build"]
        saved = "" if name == "as-app" else _saving_text(_saving(result, name))
        saved_wall = "" if name == "as-app" else _saving_text(_saving(result, name, WALL))
        lines.append(
            f"| {variant['description']} | {wall.median:.2f} | {saved_wall} | {_fmt(cpu.median if cpu else None)} | "
            f"{saved} | {build['construct_seconds']:.2f} | {build['synth_seconds']:.2f} |"
        )
    return lines


def _round_count(result: SynthResult) -> int:
    return max((len(runs) for runs in result.rounds.values()), default=0)


def _fmt(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _profile_sections(result: SynthResult) -> list[str]:
    lines: list[str] = []
    python_profile = result.python_profile
    if python_profile:
        lines += [
            "",
            "### Python profile (cProfile, one fresh build; cProfile slows Python-heavy code 1.5-2x)",
            "",
            f"Self time by where the code lives ({python_profile.total_seconds:.1f} s profiled in all):",
            "",
            "| where | self s |",
            "|---|---:|",
        ]
        lines += [f"| {where} | {seconds:.2f} |" for where, seconds in python_profile.buckets[:14]]
        lines += ["", "Largest cumulative times:", "", "| function | calls | self s | cumulative s |"]
        lines += ["|---|---:|---:|---:|"]
        lines += [
            f"| `{name}` | {calls} | {own:.2f} | {cum:.2f} |" for name, calls, own, cum in python_profile.top_cumulative
        ]
        for function, callers in python_profile.callers.items():
            lines += ["", f"Callers of `{function}`:", ""]
            lines += [f"- `{caller}`: {calls} calls, {cum:.2f} s" for caller, calls, cum in callers[:6]]
    node_profile = result.node_profile
    if node_profile:
        lines += [
            "",
            f"### jsii node process profile (V8 --cpu-prof, same run; {node_profile.total_seconds:.1f} s sampled)",
            "",
            "| step (inclusive) | s |",
            "|---|---:|",
        ]
        lines += [f"| {label} | {seconds:.2f} |" for label, seconds in node_profile.steps]
        lines += ["", "| self time by package | s |", "|---|---:|"]
        lines += [f"| {name} | {seconds:.2f} |" for name, seconds in node_profile.packages]
    return lines


def _median(sample: Sample | None) -> float | None:
    return None if sample is None else sample.median


def _hotspots(result: SynthResult) -> list[str]:
    """What was cut, where the remaining time goes, and what the target would take, from this run's figures."""
    app = result.variants.get("as-app")
    if not app:
        return []
    before = BEFORE_CUTS
    phases = app["phases"]
    definitions = _phase_seconds(phases, DEFINITIONS_PHASE_PREFIX)
    acknowledgements = _phase_seconds(phases, CHECK_PHASE)
    whole, minimal = result.full_wall.median, result.minimal_wall.median
    lines = [
        "",
        "### What was cut, and where the time goes now",
        "",
        f"Two cuts this benchmark found are in the app now. Before them (`make bench` on {before['date']}) the whole "
        f"app took {before['whole_seconds']:.1f} s, {before['ratio']:.2f}x the minimal app's "
        f"{before['minimal_seconds']:.1f} s; in this run it takes {whole:.1f} s, {result.ratio_wall.median:.2f}x "
        f"the minimal app's {minimal:.1f} s. Both cuts leave the cloud assembly byte-identical (checked for the "
        "default, promotion and BLOOM configs when they were applied), and no check is lost.",
        "",
        f"1. **SageMaker SDK pipeline definitions: {before['definitions_seconds']:.1f} s for the 6 definitions before, "
        f"{definitions:.2f} s now.** Each `offline_session()` built a new boto3 Session, so botocore parsed its "
        "service models again for every definition, and the SDK validated its constant config against a JSON "
        "schema twice per definition (the second time through the name `sagemaker.session` imported, which the "
        "patch on `sagemaker.utils` missed). Now `definition._offline_boto_session(region)` is `functools.cache`d "
        "(one boto3 session per region per process), `_validate_sdk_config()` validates SDK_CONFIG once per "
        "process, and `offline_session` skips the validation in both `sagemaker.utils` and `sagemaker.session`.",
        f"2. **cdk-nag acknowledgements: {before['aspect_callbacks']} node->Python callbacks per synth before "
        f"({before['aspect_jsii_requests']} jsii requests inside them), {app['first_build']['jsii_callbacks']} "
        "now.** A Python aspect (`CompliancePackAcknowledgements`) was called back by node for every construct. Now "
        "`compliance.check()` applies the same acknowledgements eagerly from Python (`_acknowledge` over "
        "`_own_resources(scope)`: one `find_all()` per stage, leaving out nested Stages as aspects do, and each "
        "resource's type read once) and adds only the three packs as aspects: "
        f"{acknowledgements:.2f} s in this run.",
        *_remaining(result, app),
        *_target(result, sdk=_sdk_seconds(app)),
    ]
    return lines


def _sdk_seconds(app: dict[str, Any]) -> float:
    """The SageMaker SDK's import and the pipeline definitions: what a cache of the definitions would take away."""
    phases = app["phases"]
    return _phase_seconds(phases, "import the SageMaker SDK") + _phase_seconds(phases, DEFINITIONS_PHASE_PREFIX)


def _remaining(result: SynthResult, app: dict[str, Any]) -> list[str]:
    """The in-process build's parts (one run, they add up), then what switching parts off saves (all in)."""
    phases = app["phases"]
    imports = sum(phase["seconds"] for phase in phases if phase["label"].startswith("import"))
    sdk_import = _phase_seconds(phases, "import the SageMaker SDK")
    config = _phase_seconds(phases, "load and validate the config")
    definitions = _phase_seconds(phases, DEFINITIONS_PHASE_PREFIX)
    acknowledgements = _phase_seconds(phases, CHECK_PHASE)
    building = _phase_seconds(phases, "build the app (every stage, stack and construct)")
    synthesis = app["first_build"]["synth_seconds"]
    node = dict(result.node_profile.steps) if result.node_profile else {}
    samples = _samples(result, "as-app")
    in_process = samples[0].median if samples else app["seconds_to_first_synth"]
    whole, minimal = result.full_wall.median, result.minimal_wall.median
    synth_note = _node_note(
        node,
        (
            ("the packs' aspects", profiles.NODE_ASPECTS),
            ("their rules", profiles.NODE_NAG_RULES),
            ("built-in validation", profiles.NODE_VALIDATION),
            ("its engine start", profiles.NODE_VALIDATION_ENGINE),
            ("templates and assets written", "templates and assets written (synthNestedAssemblies)"),
        ),
    )
    lines = [
        "",
        "Where the whole app's time goes now, in the fresh in-process build above (one run: these parts add up to "
        "its time to the end of the first synth):",
        "",
        "| part | s | evidence |",
        "|---|---:|---|",
        f"| imports | {imports:.2f} | aws_cdk and cdk_nag (node start, their assemblies), the app's modules, and the "
        f"SageMaker SDK ({sdk_import:.2f} s of it) |",
        f"| config | {config:.2f} | load and validate the config |",
        f"| SageMaker SDK pipeline definitions (6) | {definitions:.2f} | the definitions' phases |",
        f"| jsii construct building | {building - definitions - acknowledgements:.2f} | building every stage, stack "
        "and construct, less the definitions and the acknowledgements |",
        f"| cdk-nag acknowledgements (compliance.check) | {acknowledgements:.2f} | its phase |",
        f"| app.synth(): the three nag packs, the built-in validation, templates written | {synthesis:.2f} | its "
        f"phase{synth_note.replace('; node profile:', '; node profile of the profiled run:')} |",
        f"| sum | {imports + config + building + synthesis:.2f} | against {app['seconds_to_first_synth']:.2f} s from "
        "interpreter start to the end of the first synth |",
        "",
        f"Around it, the CLI (its own start, starting app.py, reading the assembly back) adds about "
        f"{whole - in_process:.1f} s: its wall time {whole:.2f} s less the in-process {in_process:.2f} s "
        "(medians, different runs). The floor every CDK app pays, the minimal app "
        + (
            f"without validation, is {result.minimal_wall_unvalidated.median:.2f} s (CLI, Python and node start, "
            "aws_cdk's import, one bucket)."
            if result.minimal_wall_unvalidated
            else f"with validation, is {minimal:.2f} s."
        ),
        "",
        "What each part costs a `cdk synth` all in (one-time loading included), from switching it off in fresh "
        "processes:",
        "",
        f"- the cdk-nag checks (acknowledgements and the AwsSolutions, NIST 800-53 R5 and HIPAA Security packs): "
        f"{_saving_text(_saving(result, 'no-checks', WALL))} s wall, {_saving_text(_saving(result, 'no-checks'))} s "
        "CPU (`no-checks`);",
        f"- the CDK's built-in CloudFormation validation: {_saving_text(_saving(result, 'no-validation', WALL))} s "
        f"wall, {_saving_text(_saving(result, 'no-validation'))} s CPU in-process (`no-validation`)"
        + (
            f"; through the CLI (`--no-validation`) {whole - result.full_wall_unvalidated.median:.1f} s for the "
            f"whole app and {minimal - result.minimal_wall_unvalidated.median:.1f} s for the minimal one;"
            if result.full_wall_unvalidated and result.minimal_wall_unvalidated
            else ";"
        ),
        f"- the SageMaker SDK (import and definitions), which only a cache of the definitions across processes "
        f"would take away: {_sdk_seconds(app):.2f} s.",
        "",
    ]
    return lines


def _node_note(node: dict[str, float], parts: tuple[tuple[str, str], ...]) -> str:
    """`; node profile: rules 0.88 s, ...` for the steps the node profile has (nothing without a profile)."""
    found = [f"{name} {node[label]:.2f} s" for name, label in parts if label in node]
    return f"; node profile: {', '.join(found)}" if found else ""


def _target(result: SynthResult, *, sdk: float) -> list[str]:
    """What the target would require: the CLI medians, less the parts above where a part is not measured through
    the CLI."""
    whole, minimal = result.full_wall.median, result.minimal_wall.median
    target = TARGET_RATIO * minimal
    checks = _median(_saving(result, "no-checks", WALL))
    if result.full_wall_unvalidated:
        unvalidated, how = result.full_wall_unvalidated.median, "measured: `cdk synth --no-validation`"
    else:
        validation = _median(_saving(result, "no-validation", WALL))
        unvalidated = None if validation is None else whole - validation
        how = "estimated: the `no-validation` saving"
    lines = [
        f"**The {TARGET_RATIO}x target** means the whole app in {TARGET_RATIO} x {minimal:.2f} s (the minimal app's "
        f"median) = {target:.2f} s, {whole - target:.1f} s less than its {whole:.2f} s. The minimal app pays the "
        "CLI's start, Python's and node's start, aws_cdk's import and the validation engine's start as well; what "
        f"the whole app adds on top is {whole - minimal:.1f} s. What it would take, the minimal app unchanged (with "
        "validation):",
        "",
        "| whole app | s | ratio to the minimal app's median | target |",
        "|---|---:|---:|---|",
    ]
    options: list[tuple[str, float]] = [
        ("as it is (measured)", whole),
        ("SageMaker SDK definitions cached across processes (estimated: its import and the definitions gone)",
         whole - sdk),
    ]  # fmt: skip
    if unvalidated is not None:
        options.append((f"built-in validation off in the whole app only ({how})", unvalidated))
        if checks is not None:
            options.append(("built-in validation and the cdk-nag checks off (estimated: less the `no-checks` saving)",
                            unvalidated - checks))  # fmt: skip
            options.append(("both off, and the SDK definitions cached (estimated)", unvalidated - checks - sdk))
    reached = []
    for name, seconds in options:
        meets = seconds <= target
        reached += [name.split(" (")[0]] if meets else []
        lines.append(f"| {name} | {seconds:.1f} | {seconds / minimal:.2f}x | {'meets' if meets else 'misses'} |")
    lines.append("")
    if whole <= target:
        lines.append("The whole app meets the target as it is.")
    else:
        lines.append(
            "So the target is not reachable without dropping checks (the built-in validation, the nag packs) or "
            "caching the SageMaker SDK's pipeline definitions across processes"
            + (f" (of the rows above, only these meet it: {'; '.join(reached)})" if reached else "")
            + ". The project keeps the checks and chose not to cache the definitions: the state in such a cache "
            "could go stale (SDK version, config, definition.py), and every `cdk synth` in the CDK pipeline is a "
            "fresh process on a fresh build machine anyway, where the cache would be empty."
        )
    return lines
