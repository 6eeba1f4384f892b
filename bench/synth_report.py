"""bench/synth.py's section of BENCHMARKS.md: the figures, where the time goes, and what the target takes, from one
SynthResult."""

from __future__ import annotations

from typing import Any

from bench import profiles
from bench.stats import Sample, verdict
from bench.synth import BEFORE_CUTS, BEFORE_ROUND_TRIPS, CONFIG, TARGET_RATIO, VARIANT_ORDER, SynthResult
from bench.synth_phases import CHECK_PHASE, DEFINITIONS_PHASE_PREFIX


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


def _saving(
    result: SynthResult, name: str, key: str = "cpu_seconds_to_first_synth", *, by_app: bool = False
) -> Sample | None:
    """Seconds (CPU by default, or wall with key="seconds_to_first_synth") the variant saves against app.py, per
    round (positive: cheaper); with by_app, what app.py saves against the variant (a part the variant switches off
    that makes the app faster: the synth cache)."""
    base, other = result.rounds.get("as-app") or [], result.rounds.get(name) or []
    pairs = [(a.get(key), b.get(key)) for a, b in zip(base, other, strict=False)]
    savings = [(b - a if by_app else a - b) for a, b in pairs if a is not None and b is not None]
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
        "check off, CDK_HOME in the repo, node_modules/.bin first on PATH). The whole app runs as `make synth` does: "
        "the SageMaker SDK's pipeline definitions and image URIs, and the template validation's reports, read from the "
        "synth cache (core/synth_cache.py, filled by the runs before, as by a person's earlier synth); each round "
        "also runs it with the cache off "
        "(`SYNTH_CACHE=off`: the SDK imported and run, as on a fresh clone), and both apps with `--no-validation` "
        "(the CDK's built-in CloudFormation template validation off, on both sides). Every check stays on in the "
        "headline: the three cdk-nag packs, the CDK's template validation (its report the engine's, for the same "
        "template bytes), and definitions that are the SDK's output byte for byte. Wall time is what a person "
        "waits; CPU time (user + "
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
        *_uncached_rows(result),
        *_unvalidated_rows(result),
        "",
        f"Target: at most {TARGET_RATIO}x. Result: **{verdict(result.ratio_wall.median, TARGET_RATIO)}** "
        f"({result.ratio_wall.median:.2f}x wall, {result.ratio_cpu.median:.2f}x CPU; the whole app costs "
        f"{result.full_wall.median - result.minimal_wall.median:.1f} s more than the minimal one).",
        *_uncached_text(result),
        *_unvalidated_text(result),
    ]
    app = result.variants.get("as-app")
    if app:
        lines += _breakdown(result, app)
    lines += _profile_sections(result)
    lines += _hotspots(result)
    return "\n".join(lines) + "\n"


def _uncached_rows(result: SynthResult) -> list[str]:
    if not (result.full_wall_uncached and result.ratio_wall_uncached):
        return []
    rows = [
        _row("whole app, wall, synth cache off", result.full_wall_uncached),
        _row("ratio whole (synth cache off) / minimal, wall (per pair)", result.ratio_wall_uncached, "x"),
    ]
    if result.ratio_cpu_uncached:
        rows.append(_row("ratio whole (synth cache off) / minimal, CPU (per pair)", result.ratio_cpu_uncached, "x"))
    return rows


def _uncached_text(result: SynthResult) -> list[str]:
    if not (result.full_wall_uncached and result.ratio_wall_uncached):
        return []
    identical = ""
    if result.cache_differences == []:
        identical = "The assemblies with and without the cache are byte-identical (all files, first round)."
    elif result.cache_differences:
        identical = f"**The assemblies with and without the cache differ**: {', '.join(result.cache_differences[:8])}"
    return [
        "",
        f"Without the synth cache (a fresh clone's first synth; it fills the cache) the whole app takes "
        f"{result.full_wall_uncached.median:.2f} s, {result.ratio_wall_uncached.median:.2f}x the minimal app "
        f"({verdict(result.ratio_wall_uncached.median, TARGET_RATIO)} the target): the cache saves "
        f"{result.full_wall_uncached.median - result.full_wall.median:.1f} s of wall time (medians). {identical}",
    ]


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
        f"With the template validation off on both sides the ratio is {result.ratio_wall_unvalidated.median:.2f}x: "
        f"the validation costs the whole app {whole_cost:.1f} s and the minimal app {minimal_cost:.1f} s (medians), "
        f"{_share(minimal_cost, result.minimal_wall.median)} of the minimal app's time against "
        f"{_share(whole_cost, result.full_wall.median)} of the whole app's: the minimal app starts the validation "
        "engine on every synth, the whole app only when a template changed (its report otherwise read from the synth "
        "cache, cut 6 below). The headline figure keeps validation on both sides, as `make synth` runs.",
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
        f"Six cuts this benchmark found are in the app now. Before the first two (`make bench` on "
        f"{before['date']}) the whole app took {before['whole_seconds']:.1f} s, {before['ratio']:.2f}x the "
        f"minimal app's {before['minimal_seconds']:.1f} s; in this run it takes {whole:.1f} s, "
        f"{result.ratio_wall.median:.2f}x the minimal app's {minimal:.1f} s. All six leave the cloud assembly "
        "byte-identical (the first two checked for the default, promotion and BLOOM configs when they were applied, "
        "the last two for the default and promotion configs; the cache by tests/core/test_synth_cache.py and by "
        "this run, above), and no check is lost.",
        "",
        f"1. **SageMaker SDK pipeline definitions: {before['definitions_seconds']:.1f} s for the 6 definitions before, "
        f"{_generated_seconds(result, definitions):.2f} s now when the SDK makes them (the synth cache off).** Each "
        "`offline_session()` built a new boto3 Session, so botocore parsed its "
        "service models again for every definition, and the SDK validated its constant config against a JSON "
        "schema twice per definition (the second time through the name `sagemaker.session` imported, which the "
        "patch on `sagemaker.utils` missed). Now `offline_sdk._offline_boto_session(region)` is `functools.cache`d "
        "(one boto3 session per region per process), `_validate_sdk_config()` validates SDK_CONFIG once per "
        "process, and `offline_session` skips the validation in both `sagemaker.utils` and `sagemaker.session`.",
        f"2. **cdk-nag acknowledgements: {before['aspect_callbacks']} node->Python callbacks per synth before "
        f"({before['aspect_jsii_requests']} jsii requests inside them), {app['first_build']['jsii_callbacks']} "
        "now.** A Python aspect (`CompliancePackAcknowledgements`) was called back by node for every construct. Now "
        "`compliance.check()` applies the same acknowledgements eagerly from Python (`_acknowledge` over "
        "`_own_resources(scope)`: one `find_all()` per stage, leaving out nested Stages as aspects do, and each "
        "resource's type read once) and adds only the three packs as aspects: "
        f"{acknowledgements:.2f} s in this run.",
        "3. **The synth cache** (core/synth_cache.py): the SageMaker SDK's pipeline definitions and image URIs, kept "
        "on disk under the sha256 of every input that shapes them (the function and its arguments, every file under "
        "core/, infrastructure/ and training/, the installed distributions and the SDK's own files), so an entry is "
        "never stale, only unused. A synth whose results are all cached never imports the SDK or boto3: "
        f"{_saving_text(_saving(result, 'no-synth-cache', WALL, by_app=True))} s wall and "
        f"{_saving_text(_saving(result, 'no-synth-cache', by_app=True))} s CPU saved all in (the `no-synth-cache` "
        f"variant; with the cache off the SDK's import and the definitions take {_sdk_seconds(result):.2f} s of "
        "the build)"
        + (
            f", {result.full_wall_uncached.median - whole:.1f} s through the CLI." if result.full_wall_uncached else "."
        ),
        f"4. **jsii round trips: {BEFORE_ROUND_TRIPS} per build and synth before, "
        f"{app['first_build'].get('jsii_requests', '?')} in this run.** Each read of a construct from Python is a "
        "round trip to node. The region check read `Stack.of()`, its name and region and the type of every "
        "resource (4 each, in a callback during synth); it now reads each stack once (`find_all()` per stack) "
        "and each resource type from its L1 class's constant (infrastructure/construct_reads.py), as the "
        "acknowledgements do. Statements are added with `Role.add_to_policy` (a bool back, not a struct jsii "
        "reads field by field), statement ids read each construct id once, and the endpoint metrics share one "
        "`Duration`.",
        "5. **Exit without teardown** (app.exit_without_teardown): once the cloud assembly is written, app.py runs "
        "its atexit handlers, removes jsii's temporary runtime copy as jsii's own exit does, tells node to exit and "
        "ends, instead of waiting for node's exit (0.86 s measured) and the interpreter's teardown of the app's "
        "modules and jsii objects (0.8 s): the CLI waits for neither now. Node still ends by itself; its CPU time "
        "is counted in the figures above (bench/synth.py reaps what outlives the CLI).",
        "6. **The CDK's template validation through the synth cache** (infrastructure/template_validation.py): the app "
        "is made with the built-in CloudFormation Validate plugin off and a plugin of the same name in its place, "
        "which runs the real one on a miss and keeps its report under the sha256 of the templates' bytes, accounts and "
        "regions (and the installed aws-cdk-lib, which bundles the engine); a hit returns that report, so the "
        "validation-report.json is the same file either way (tests/infrastructure/test_template_validation.py compares "
        "it with the built-in plugin's, violations included). The engine's start and checks (about 3 s) are paid only "
        "when a template changed: switching validation off now saves "
        f"{_saving_text(_saving(result, 'no-validation', WALL, by_app=True))} s wall.",
        *_remaining(result, app),
        *_target(result),
    ]
    return lines


def _generated_seconds(result: SynthResult, fallback: float) -> float:
    """The six definitions' time when the SDK generates them: the `no-synth-cache` variant's (else `fallback`)."""
    uncached = result.variants.get("no-synth-cache")
    return _phase_seconds(uncached["phases"], DEFINITIONS_PHASE_PREFIX) if uncached else fallback


def _sdk_seconds(result: SynthResult) -> float:
    """The SageMaker SDK's import and the pipeline definitions with the synth cache off (0 where not measured)."""
    uncached = result.variants.get("no-synth-cache")
    if not uncached:
        return 0.0
    phases = uncached["phases"]
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
        f"| pipeline definitions (6, from the synth cache) | {definitions:.2f} | the definitions' phases |",
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
        f"- the CDK's template validation (its report from the synth cache; the CDK's report machinery runs): "
        f"{_saving_text(_saving(result, 'no-validation', WALL))} s "
        f"wall, {_saving_text(_saving(result, 'no-validation'))} s CPU in-process (`no-validation`)"
        + (
            f"; through the CLI (`--no-validation`) {whole - result.full_wall_unvalidated.median:.1f} s for the "
            f"whole app and {minimal - result.minimal_wall_unvalidated.median:.1f} s for the minimal one;"
            if result.full_wall_unvalidated and result.minimal_wall_unvalidated
            else ";"
        ),
        f"- the synth cache, the other way round (`no-synth-cache`: the SDK imported, the definitions and image "
        f"lookups made): {_saving_text(_saving(result, 'no-synth-cache', WALL, by_app=True))} s wall, "
        f"{_saving_text(_saving(result, 'no-synth-cache', by_app=True))} s CPU saved by it.",
        "",
    ]
    return lines


def _node_note(node: dict[str, float], parts: tuple[tuple[str, str], ...]) -> str:
    """`; node profile: rules 0.88 s, ...` for the steps the node profile has (nothing without a profile)."""
    found = [f"{name} {node[label]:.2f} s" for name, label in parts if label in node]
    return f"; node profile: {', '.join(found)}" if found else ""


def _target(result: SynthResult) -> list[str]:
    """What the target takes: the CLI medians, and the parts switched off where a part is not measured through the
    CLI."""
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
        f"median) = {target:.2f} s, against its {whole:.2f} s. The minimal app pays the CLI's start, Python's and "
        "node's start, aws_cdk's import and the validation engine's start as well; what the whole app adds on top is "
        f"{whole - minimal:.1f} s. The whole app, the minimal app unchanged (with validation):",
        "",
        "| whole app | s | ratio to the minimal app's median | target |",
        "|---|---:|---:|---|",
    ]
    options: list[tuple[str, float]] = [("as `make synth` runs it, every check on (measured)", whole)]
    if result.full_wall_uncached:
        options.append(("synth cache off, every check on (measured)", result.full_wall_uncached.median))
    if unvalidated is not None:
        options.append((f"built-in validation off in the whole app only ({how})", unvalidated))
        if checks is not None:
            options.append(("built-in validation and the cdk-nag checks off (estimated: less the `no-checks` saving)",
                            unvalidated - checks))  # fmt: skip
    for index, (name, seconds) in enumerate(options):
        # The measured row's ratio is the headline's (the median of the per-pair ratios), not a ratio of medians.
        ratio = result.ratio_wall.median if index == 0 else seconds / minimal
        lines.append(f"| {name} | {seconds:.1f} | {ratio:.2f}x | {verdict(ratio, TARGET_RATIO)} |")
    lines.append("")
    if result.ratio_wall.median <= TARGET_RATIO:
        lines.append("The whole app meets the target with every check on.")
    else:
        lines.append(
            f"The whole app misses the target with every check on ({result.ratio_wall.median:.2f}x per pair; "
            f"{whole - target:.1f} s over at the medians); the rows above show what "
            "switching checks off would give, which the project does not do."
        )
    return lines
