"""Where `python app.py`'s time goes: imports, config, each stack, the SageMaker SDK pipeline definitions, asset
hashing, the checks (cdk-nag acknowledgements and packs) and the CDK's built-in template validation.

Runs in a fresh interpreter, as the CLI runs app.py, and writes JSON for bench/synth.py:

    python -m bench.synth_phases --json phases.json                      # timers around the parts of one build
    python -m bench.synth_phases --json p.json --warm-rebuild            # and a second build, warm
    python -m bench.synth_phases --json p.json --variant no-validation   # one part switched off (see VARIANTS)
    python -m bench.synth_phases --json p.json --profile app.prof        # the build under cProfile

The first build is the real one (cold: every jsii type and SDK module loads on first use). Every jsii request is
counted and timed (time spent waiting on the node process, plus serialization), so each phase says how many
round trips it made. A variant switches one part off for the whole process (bench/synth.py runs each in fresh
processes, alternating with the app as it is): the difference is what that part costs a `cdk synth`, one-time
loading included. A warm second build in the same process shows how much of a synthesis is one-time loading.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import importlib
import inspect
import json
import os
import pkgutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"
# Phase labels bench/synth.py reads back.
CHECK_PHASE = "cdk-nag acknowledgements applied (compliance.check)"
DEFINITIONS_PHASE_PREFIX = "SageMaker SDK:"

# What offline_sdk.py imports lazily on its first call; imported up front here when the synth cache is off (with it
# on, a synth whose results are cached never imports them), so that the SDK's import time and the definitions' own
# time are told apart.
SAGEMAKER_MODULES = (
    "sagemaker",
    "sagemaker.workflow.pipeline_context",
    "sagemaker.workflow.pipeline",
    "sagemaker.workflow.steps",
    "sagemaker.workflow.model_step",
    "sagemaker.pytorch",
    "sagemaker.processing",
    "sagemaker.model",
)


class JsiiMeter:
    """Counts and times every request this process sends to the jsii node process.

    All of them go through one method (_NodeProcess.send), which returns only when node has answered: its time is
    node's work plus the IPC. A `complete` request is the answer to a callback (node calling Python code, such as
    an aspect's visit()).
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds = 0.0
        self.installed = False

    def install(self) -> None:
        from jsii._kernel.providers import process

        original = process._NodeProcess.send
        meter = self

        @functools.wraps(original)
        def send(self: Any, request: Any, response_type: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(self, request, response_type)
            finally:
                meter.seconds += time.perf_counter() - started
                meter.calls[type(request).__name__.strip("_").removesuffix("Request")] += 1

        process._NodeProcess.send = send
        self.installed = True

    def snapshot(self) -> tuple[int, int, float]:
        """(requests, callbacks answered, seconds) so far."""
        return sum(self.calls.values()), self.calls["Complete"], self.seconds


def _process_tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (and the children they reaped), Linux only."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15]) / ticks  # utime, stime, cutime, cstime
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_so_far() -> float | None:
    """CPU seconds used so far by this process and the jsii node processes (None where /proc is missing)."""
    if not Path("/proc/self/stat").exists():
        return None
    cpu = time.process_time()
    try:
        from jsii._kernel import Kernel

        node = Kernel().provider._process._process  # started by the first jsii call
        cpu += _process_tree_cpu(node.pid)
    except Exception:  # no node process yet, or jsii's internals moved: Python's own CPU only
        pass
    return cpu


@dataclass
class Phase:
    label: str
    seconds: float  # inclusive wall time
    calls: int = 1
    jsii_requests: int = 0
    jsii_callbacks: int = 0
    jsii_seconds: float = 0.0
    children_seconds: float = 0.0  # time inside other timed phases nested in this one

    @property
    def exclusive_seconds(self) -> float:
        return self.seconds - self.children_seconds


@dataclass
class Timeline:
    """Named, possibly nested, timed phases; a label called several times accumulates."""

    meter: JsiiMeter
    phases: dict[str, Phase] = field(default_factory=dict)
    _open: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def phase(self, label: str) -> Iterator[None]:
        requests0, callbacks0, jsii0 = self.meter.snapshot()
        started = time.perf_counter()
        self._open.append(label)
        try:
            yield
        finally:
            self._open.pop()
            elapsed = time.perf_counter() - started
            requests1, callbacks1, jsii1 = self.meter.snapshot()
            existing = self.phases.get(label)
            if existing is None:
                self.phases[label] = Phase(
                    label, elapsed, 1, requests1 - requests0, callbacks1 - callbacks0, jsii1 - jsii0
                )
            else:
                existing.seconds += elapsed
                existing.calls += 1
                existing.jsii_requests += requests1 - requests0
                existing.jsii_callbacks += callbacks1 - callbacks0
                existing.jsii_seconds += jsii1 - jsii0
            if self._open:
                parent = self._open[-1]
                self.phases.setdefault(parent, Phase(parent, 0.0, 0)).children_seconds += elapsed

    def wrap(self, owner: Any, name: str, label: str) -> Callable[[], None]:
        """Time every call of owner.name under `label`; returns the function that undoes it."""
        raw = inspect.getattr_static(owner, name)
        original = getattr(owner, name)
        timeline = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with timeline.phase(label):
                return original(*args, **kwargs)

        if isinstance(raw, (staticmethod, classmethod)):
            setattr(owner, name, staticmethod(timed))
        else:
            setattr(owner, name, timed)
        return lambda: setattr(owner, name, raw)


def _stack_classes() -> list[type]:
    """Every Stack subclass defined in the app's stacks package (storage, training, serving, pipeline, ...)."""
    import stacks
    from aws_cdk import Stack

    found = []
    for module_info in pkgutil.iter_modules(stacks.__path__):
        if not module_info.name.endswith("_stack"):
            continue
        module = importlib.import_module(f"stacks.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Stack) and value.__module__ == module.__name__:
                found.append(value)
    return sorted(found, key=lambda cls: cls.__name__)


def _instrument_build(timeline: Timeline) -> list[Callable[[], None]]:
    """Timers around the parts of the build the report names; returns the undo functions."""
    from aws_cdk import aws_lambda, aws_s3_assets
    from cdk_nag import NagSuppressions

    from infrastructure import compliance
    from infrastructure.constructs.training_pipeline import finetune_pipeline, staging_pipeline

    undo = []
    for cls in _stack_classes():
        undo.append(timeline.wrap(cls, "__init__", f"construct {cls.__name__} (own constructs)"))
    undo.append(
        timeline.wrap(
            finetune_pipeline,
            "finetune_definition",
            f"{DEFINITIONS_PHASE_PREFIX} fine-tuning pipeline definition (JSON)",
        )
    )
    undo.append(
        timeline.wrap(
            staging_pipeline, "staging_definition", f"{DEFINITIONS_PHASE_PREFIX} weights-staging pipeline definition"
        )
    )
    undo.append(timeline.wrap(aws_s3_assets.Asset, "__init__", "asset hashing + staging: s3_assets.Asset (code dirs)"))
    undo.append(timeline.wrap(aws_lambda.Code, "from_asset", "asset hashing + staging: lambda Code.from_asset"))
    for name in ("add_resource_suppressions", "add_resource_suppressions_by_path", "add_stack_suppressions"):
        if hasattr(NagSuppressions, name):
            undo.append(timeline.wrap(NagSuppressions, name, "cdk-nag: NagSuppressions.* calls"))
    # check() applies the acknowledgements from Python and adds the three packs as aspects (they run in app.synth()).
    undo.append(timeline.wrap(compliance, "check", CHECK_PHASE))
    return undo


def _cdk_context() -> dict[str, Any]:
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


@dataclass
class Build:
    construct_seconds: float
    synth_seconds: float
    jsii_requests: int
    jsii_callbacks: int
    jsii_seconds: float

    @property
    def total_seconds(self) -> float:
        return self.construct_seconds + self.synth_seconds


def build_once(
    timeline: Timeline,
    config_path: Path,
    outdir: Path,
    *,
    validation: bool = True,
    check: Callable[[Any], None] | None = None,
) -> Build:
    """Build and synthesize the app as app.py does; `check` replaces infrastructure.compliance.check for this build."""
    import app as cdk_app
    from core.config import load_config
    from infrastructure import compliance, template_validation

    original_check = compliance.check
    if check is not None:
        compliance.check = check
    try:
        requests0, callbacks0, jsii0 = timeline.meter.snapshot()
        started = time.perf_counter()
        with timeline.phase("load and validate the config"):
            config = load_config(config_path)
        with timeline.phase("build the app (every stage, stack and construct)"):
            app = template_validation.new_app(context=_cdk_context(), outdir=str(outdir))
            cdk_app.build_app(app, config, config_path=cdk_app.relative_to_repo(config_path))
            if validation:
                template_validation.install(app)
        constructed = time.perf_counter()
        with timeline.phase("app.synth(): aspects (the checks), validation, templates"):
            app.synth()
        finished = time.perf_counter()
        requests1, callbacks1, jsii1 = timeline.meter.snapshot()
    finally:
        compliance.check = original_check
    return Build(
        constructed - started, finished - constructed, requests1 - requests0, callbacks1 - callbacks0, jsii1 - jsii0
    )


class _ShimmedAspects:
    """Stands in for aws_cdk.Aspects inside infrastructure.compliance while check() runs: aspects of a `dropped` type
    are not added, the rest are added as usual."""

    def __init__(self, real: Any, *, dropped: tuple[type, ...]) -> None:
        self.real, self.dropped = real, dropped

    def of(self, scope: Any) -> Any:
        aspects, dropped = self.real.of(scope), self.dropped

        class Adder:
            def add(self, aspect: Any, **kwargs: Any) -> None:
                if not isinstance(aspect, dropped):
                    aspects.add(aspect, **kwargs)

        return Adder()


def _without_extra_packs() -> Callable[[], None]:
    """Only the AwsSolutions pack: check() adds the NIST 800-53 R5 and HIPAA Security packs to nothing. Returns the
    function that restores infrastructure.compliance."""
    from cdk_nag import HIPAASecurityChecks, NIST80053R5Checks

    from infrastructure import compliance

    real = compliance.Aspects
    compliance.Aspects = _ShimmedAspects(real, dropped=(NIST80053R5Checks, HIPAASecurityChecks))
    return lambda: setattr(compliance, "Aspects", real)


# What each variant switches off: build_once keyword arguments. Each runs as the first build of a fresh process,
# as every `cdk synth` does, so its difference from "as-app" includes the one-time loading of what it drops.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "as-app": ("as app.py", {}),
    "no-validation": ("template validation off (CDK_VALIDATION=false)", {"validation": False}),
    "no-synth-cache": ("synth cache off (SYNTH_CACHE=off: the SageMaker SDK imported, its definitions and image "
                       "lookups made)", {"environment": {"SYNTH_CACHE": "off"}}),
    "no-checks": ("no cdk-nag checks (infrastructure.compliance.check skipped: no acknowledgements, none of the 3 "
                  "packs)",
                  {"check": lambda scope: None}),
    "aws-solutions-only": ("as app.py without the NIST 800-53 R5 and HIPAA Security packs",
                           {"prepare": _without_extra_packs}),
}  # fmt: skip


def run(
    config_path: Path, *, variant: str, profile_path: Path | None, warm_rebuild: bool, outdir: Path | None = None
) -> dict[str, Any]:
    description, variant_options = VARIANTS[variant]
    options = {key: value for key, value in variant_options.items() if key not in ("prepare", "environment")}
    os.environ.update(variant_options.get("environment", {}))
    meter = JsiiMeter()
    timeline = Timeline(meter)
    profiler = cProfile.Profile() if profile_path else None
    process_started = time.perf_counter()
    if profiler:
        profiler.enable()
    with tempfile.TemporaryDirectory(prefix="bench-synth-phases-") as scratch:
        # Imports, in app.py's order. jsii itself first, so that the node process start is counted with aws_cdk.
        with timeline.phase("import jsii"):
            import jsii  # noqa: F401
        meter.install()
        with timeline.phase("import aws_cdk (starts node, loads the aws-cdk-lib assembly)"):
            import aws_cdk  # noqa: F401
        with timeline.phase("import cdk_nag (loads its assembly)"):
            import cdk_nag  # noqa: F401
        with timeline.phase("import app.py's modules (stacks.*, pydantic, PyYAML, aws_cdk submodules)"):
            import app  # noqa: F401
        from core import synth_cache

        if synth_cache.directory() is None:
            with timeline.phase("import the SageMaker SDK (done by the first pipeline definition)"):
                for module in SAGEMAKER_MODULES:
                    importlib.import_module(module)
        _instrument_build(timeline)
        if "prepare" in variant_options:
            variant_options["prepare"]()
        first = build_once(timeline, config_path, outdir or Path(scratch) / "first", **options)
        first_done = time.perf_counter()
        first_cpu = cpu_so_far()
        if profiler:
            profiler.disable()
            profiler.dump_stats(str(profile_path))
        phases = [{**asdict(phase), "exclusive_seconds": phase.exclusive_seconds} for phase in timeline.phases.values()]
        warm = None
        if warm_rebuild:
            timeline.phases.clear()
            warm = build_once(timeline, config_path, Path(scratch) / "warm", **options)
            warm_phases = [
                {**asdict(phase), "exclusive_seconds": phase.exclusive_seconds} for phase in timeline.phases.values()
            ]
    return {
        "config": str(config_path),
        "variant": variant,
        "description": description,
        "seconds_to_first_synth": first_done - process_started,
        "cpu_seconds_to_first_synth": first_cpu,
        "phases": phases,
        "first_build": {**asdict(first), "total_seconds": first.total_seconds},
        "warm_build": None if warm is None else {**asdict(warm), "total_seconds": warm.total_seconds},
        "warm_phases": warm_phases if warm is not None else [],
        "jsii_requests_by_kind": dict(meter.calls.most_common()),
        "profiled": profiler is not None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, required=True, help="where to write the measurements")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="config file (default: the default)")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="as-app", help="what to switch off")
    parser.add_argument("--profile", type=Path, help="run the first build under cProfile and write the stats here")
    parser.add_argument("--warm-rebuild", action="store_true", help="build and synthesize a second time, warm")
    parser.add_argument("--outdir", type=Path, help="keep the first build's cloud assembly here")
    args = parser.parse_args(argv)
    os.chdir(REPO_ROOT)  # as the CLI runs app.py: relative paths (config, assets) resolve from the repo
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    result = run(
        args.config.resolve(),
        variant=args.variant,
        profile_path=args.profile,
        warm_rebuild=args.warm_rebuild,
        outdir=args.outdir.resolve() if args.outdir else None,
    )
    args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
