"""`make bench`: every benchmark, side by side, written to BENCHMARKS.md with the machine they ran on.

    python -m bench                                  # all of them (about 7 minutes on 2 cores)
    python -m bench --only synth,handler             # some: synth, handler, training, artifacts, cold-start, suite
    python -m bench --only containers                # make test-containers, venvs rebuilt (not in the default run)
    python -m bench --runs 5                         # interleaved synth pairs (default 3)
    python -m bench --fresh-clone                    # also git clone + make test set-up (minutes, downloads)
    python -m bench --output /tmp/BENCHMARKS.md      # somewhere else

Each section is measured on its own; a section that fails is reported as failed in the file (with the error) and
makes the command exit 1, without losing the others. With --only, the sections not measured (and their summary rows)
are kept from the file as it was (bench/earlier_report.py); each section says when it was measured. The GPU figures
come from `make bench-gpu` (bench/gpu.py), which fills the GPU section of the same file; this command keeps that
section as it is.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import earlier_report, machine
from bench.gpu import GPU_END, GPU_START
from bench.synth import MAKE_ENVIRONMENT

REPO_ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("synth", "handler", "training", "artifacts", "cold-start", "suite", "containers")
# make test-containers takes minutes of its own: measured when asked for (--only containers).
DEFAULT_SECTIONS = tuple(name for name in SECTIONS if name != "containers")
GPU_PLACEHOLDER = (
    "## GPU\n\nNot measured: `make bench-gpu` on a machine with a CUDA GPU fills this section (DeepSpeed "
    "kernel-injected generation latency per token against plain Hugging Face generate for a GPT-J-shaped model, and "
    "train.py's training tokens/s on one GPU).\n"
)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def gpu_section(path: Path) -> str:
    """The GPU section of an existing BENCHMARKS.md, markers included, or the placeholder."""
    if path.is_file():
        text = path.read_text()
        if GPU_START in text and GPU_END in text:
            return text[text.index(GPU_START) : text.index(GPU_END) + len(GPU_END)] + "\n"
    return f"{GPU_START}\n{GPU_PLACEHOLDER}{GPU_END}\n"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def machine_table(description: dict[str, str]) -> str:
    return "\n".join(["| | |", "|---|---|", *[f"| {key} | {value} |" for key, value in description.items()]])


class Report:
    """Sections by name (earlier_report.HEADINGS), each with when it ran, the load average around it and its wall
    time; their rows of the summary table."""

    def __init__(self) -> None:
        self.sections: dict[str, str] = {}
        self.summary: list[tuple[str, str, str, str]] = []  # (section, figure, target, result)
        self.failed: list[str] = []

    def measure(self, name: str, body: Callable[[], str]) -> None:
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        log(f"{name}: starting (1-minute load average {load_before:.2f})")
        try:
            text = body()
        except Exception as error:  # one broken benchmark must not lose the others
            self.failed.append(name)
            text = f"## {name}\n\nFAILED: {type(error).__name__}: {error}\n\n```\n{traceback.format_exc()[-3000:]}```\n"
        elapsed = time.perf_counter() - started
        self.sections[name] = (
            text.rstrip("\n")
            + f"\n\n_Section measured on {_now()} in {elapsed:.0f} s; 1-minute load average {load_before:.2f} "
            f"before, {os.getloadavg()[0]:.2f} after (2 = both cores busy)._\n"
        )
        log(f"{name}: done in {elapsed:.0f} s")


def run_sections(report: Report, only: set[str], runs: int, work: Path) -> None:
    from bench import artifacts, cold_start, containers, handler, suite, synth, training

    synth_result: Any = None
    if "synth" in only:

        def do_synth() -> str:
            nonlocal synth_result
            synth_result = synth.run(work / "synth", runs=runs, log=log)
            report.summary.append(
                (
                    "synth",
                    "Synth, whole app / minimal app (wall, per interleaved pair)",
                    f"<= {synth.TARGET_RATIO}x",
                    f"{synth_result.ratio_wall.median:.2f}x ({synth_result.ratio_wall.runs} pairs, "
                    f"{synth_result.ratio_wall.low:.2f}-{synth_result.ratio_wall.high:.2f}); CPU "
                    f"{synth_result.ratio_cpu.median:.2f}x",
                )
            )
            return synth.markdown(synth_result)

        (work / "synth").mkdir()
        report.measure("synth", do_synth)
    if "handler" in only:

        def do_handler() -> str:
            result = handler.run(log=log)
            ratio = result.request_over_inner
            report.summary.append(
                (
                    "handler",
                    "Inference: HTTP request / its model.generate",
                    f"<= {handler.TARGET_RATIO}x",
                    f"{ratio.median:.4f}x ({ratio.runs} requests, {ratio.low:.4f}-{ratio.high:.4f}); "
                    f"{result.request_overhead_ms.median:.2f} ms per request",
                )
            )
            return handler.markdown(result)

        report.measure("handler", do_handler)
    if "training" in only:

        def do_training() -> str:
            result = training.run(log=log)
            report.summary.append(
                (
                    "training",
                    "Training: train.py time per step / bare PyTorch loop",
                    f"<= {training.TARGET_RATIO}x",
                    f"{result.ratio.median:.3f}x ({result.ratio.runs} pairs, {result.ratio.low:.3f}-"
                    f"{result.ratio.high:.3f}); train.py's own loop {result.loop_overhead_ms.median:.2f} ms/step",
                )
            )
            return training.markdown(result)

        report.measure("training", do_training)
    if "artifacts" in only:

        def do_artifacts() -> str:
            result = artifacts.run(
                cli_assembly=getattr(synth_result, "cli_assembly", None),
                cli_differences=getattr(synth_result, "cli_differences", None),
            )
            identical = all(len(archive.sha256) == 1 for archive in result.archives)
            report.summary.append(
                (
                    "artifacts",
                    "Artifacts: same bytes on every build; two syntheses identical",
                    "identical",
                    ("archives identical" if identical else "ARCHIVES DIFFER")
                    + (
                        ""
                        if result.templates_compared is None
                        else "; templates identical"
                        if not result.template_differences
                        else "; TEMPLATES DIFFER"
                    ),
                )
            )
            return artifacts.markdown(result)

        report.measure("artifacts", do_artifacts)
    if "cold-start" in only:
        report.measure("cold-start", lambda: cold_start.markdown(cold_start.run()))
    if "suite" in only:

        def do_suite() -> str:
            result = suite.run(log=log)
            report.summary.append(
                (
                    "suite",
                    "Test suite wall time after set-up",
                    f"< {suite.TARGET_SECONDS:.0f} s",
                    f"{result.wall.median:.0f} s ({result.wall.runs} run); {result.summary}",
                )
            )
            return suite.markdown(result)

        report.measure("suite", do_suite)
    if "containers" in only:

        def do_containers() -> str:
            result = containers.run(log=log)
            report.summary.append(
                (
                    "containers",
                    "Container tests: make test-containers, every venv rebuilt",
                    f"< {containers.TARGET_SECONDS // 60} min",
                    f"{result.wall_seconds:.0f} s; exit status {result.exit_code}",
                )
            )
            return containers.markdown(result)

        report.measure("containers", do_containers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only", default=",".join(DEFAULT_SECTIONS), help=f"comma-separated, of: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--runs", type=int, default=3, help="interleaved synth pairs (default 3)")
    parser.add_argument("--fresh-clone", action="store_true", help="also time git clone + make test's set-up")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "BENCHMARKS.md", help="default: BENCHMARKS.md")
    args = parser.parse_args(argv)
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"--only {','.join(sorted(unknown))}: unknown section(s); choose from {', '.join(SECTIONS)}")
    if args.runs < 2:
        parser.error(f"--runs {args.runs}: at least 2 pairs are needed for a median and a spread")
    for name, value in MAKE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)  # the Makefile exports these; `python -m bench` alone gets them too
    os.chdir(REPO_ROOT)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))

    started = time.perf_counter()
    earlier = earlier_report.read(args.output, GPU_START)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        run_sections(report, only, args.runs, Path(scratch))
        from bench import suite

        if args.fresh_clone:

            def do_clone() -> str:
                result = suite.fresh_clone(log=log)
                setup = "n/a" if result.setup_seconds is None else f"{result.setup_seconds:.0f} s"
                report.summary.append(
                    (
                        "fresh clone",
                        "Fresh clone: set-up of make test (then make test itself)",
                        "",
                        f"{setup} (then {result.test_seconds:.0f} s); 1 run",
                    )
                )
                return suite.clone_markdown(result)

            report.measure("fresh clone", do_clone)
        elif "fresh clone" not in earlier.sections:
            report.sections["fresh clone"] = suite.clone_markdown(None)
    elapsed = time.perf_counter() - started

    measured = [*sorted(only), *(["fresh clone"] if args.fresh_clone else [])]
    # What this run did not measure stays as the file had it.
    kept = [name for name in earlier_report.HEADINGS if name not in report.sections and name in earlier.sections]
    sections = {name: report.sections.get(name) or earlier.sections.get(name) for name in earlier_report.HEADINGS}
    ours: dict[str, list[str]] = {}
    for section, figure, target, result in report.summary:
        ours.setdefault(section, []).append(f"| {figure} | {target} | {result} |")
    summary = [
        row
        for name in earlier_report.HEADINGS
        for row in (ours.get(name, []) if name in report.sections else earlier.summary.get(name, []))
    ]
    header = [
        "# Benchmarks",
        "",
        f"Generated by `make bench` ({_now()}, {elapsed / 60:.1f} minutes; sections: {', '.join(measured)})"
        + (f", the other sections kept from an earlier run ({', '.join(kept)})" if kept else "")
        + ". Every figure comes from runs measured side by side on one machine, with its run count, median and "
        "spread (lowest-highest, and (highest-lowest)/median). Other work on the machine shows in the load average "
        "printed under each section.",
        "",
        "## Machine",
        "",
        machine_table(machine.describe()),
        "",
        "## Summary",
        "",
        "| figure | target | result |",
        "|---|---|---|",
        *summary,
    ]
    if report.failed:
        header += ["", f"**Failed sections: {', '.join(report.failed)}** (details below)."]
    body = "\n".join(text for text in sections.values() if text)
    text = "\n".join(header) + "\n\n" + body + "\n" + gpu_section(args.output)
    args.output.write_text(text)
    log(f"wrote {args.output} in {elapsed / 60:.1f} minutes")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
