"""`make gpu-check`: on one CUDA GPU, what CPU tests cannot show, through the project's own handler and train.py.

    python -m bench.gpu_check                                  # every part; .gpu-check/result.json and .md
    python -m bench.gpu_check --output /tmp/out/gpu-check.json # the results somewhere else (a .md beside it)
    python -m bench.gpu_check --only train-fp16,inject-gptj    # some units (names below)

Units (each in its own process, so that a CUDA fault or DeepSpeed's global state cannot spill into the next):
- environment: versions, the GPU, DeepSpeed's transformer_inference op loaded (prebuilt, or JIT-compiled once);
- inject-gptj, inject-opt, inject-bloom: a small model of each architecture (random weights, saved with
  save_pretrained) loaded by lmi_loading.load_model with kernel injection on and served by lmi_generation's
  TextGenerator (one 1-prompt request, then a 3-prompt left-padded one), against Hugging Face generate on the same
  weights: greedy tokens (criterion below) and the per-token speed ratio;
- int8-bloom: dtype int8 through load_model on a plain Hugging Face BLOOM folder, against the fp16 reference;
- int8-checkpoint-bloom: a pre-sharded int8 checkpoint written by DeepSpeed (save_mp_checkpoint_path), staged
  without Hugging Face weights and loaded by load_model on the meta device, against the model that wrote it and the
  fp16 reference;
- train-fp16: train.py --backend torch --fp16: loss finite and falling, the loss scaler updating every step.

Each part ends PASS, FAIL or UNAVAILABLE (cannot run in this environment: the reason and the fix, no traceback).
Exit status: 0 every part passed, or no CUDA GPU is visible (nothing is checked); 1 a part failed; 3 nothing
failed but some part could not run here. About 3 to 4 minutes of units (estimated), plus a one-time JIT compile of
DeepSpeed's op where it is not prebuilt. docs/gpu-check.md says how to run it and what each part proves.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / ".gpu-check" / "result.json"
PASS, FAIL, UNAVAILABLE = "PASS", "FAIL", "UNAVAILABLE"
# Calibrated on CPU for the models these parts build (initializer range 0.05): fp16 moves their logits by at most
# 0.011 against fp32, DeepSpeed-style per-row int8 weights by at most 0.14; the median top-1/top-2 margin is 0.37
# to 2.4. The tolerances sit about ten (fp16) and three and a half (int8) times above those shifts.
FP16_TOLERANCE = 0.1
INT8_TOLERANCE = 0.5
MIN_COVERAGE = 0.5
CRITERION = (
    "greedy tokens equal to the reference's at every compared position; a row may part from the reference only "
    "where the reference's top-1 logit leads its top-2 by at most the tolerance (a near-tie that fused fp16 or "
    "int8 kernels may legitimately break the other way), and is not compared past that point; at least "
    f"{MIN_COVERAGE:.0%} of all generated positions compared"
)
# unit -> (parts it reports, needs DeepSpeed, seconds it may take at most)
UNITS: dict[str, tuple[tuple[str, ...], bool, int]] = {
    "environment": (("environment",), True, 420),  # includes a JIT compile of transformer_inference
    "inject-gptj": (("inject-gptj",), True, 150),
    "inject-opt": (("inject-opt",), True, 150),
    "inject-bloom": (("inject-bloom",), True, 150),
    "int8-bloom": (("int8-bloom",), True, 150),
    "int8-checkpoint-bloom": (("int8-checkpoint-bloom",), True, 150),
    "train-fp16": (("train-fp16",), False, 150),
}
BLOOM_UNITS = ("inject-bloom", "int8-bloom", "int8-checkpoint-bloom")
LMI_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.27.0-deepspeed0.12.6-cu121"


def log(message: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class PartResult:
    name: str
    status: str
    summary: str
    numbers: dict[str, Any] = field(default_factory=dict)
    fix: str | None = None
    seconds: float = 0.0


# --- the comparison criterion ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowAgreement:
    positions: int  # tokens the reference generated, up to and including its first EOS
    agreed: int  # leading positions where the candidate chose the reference's token
    margin: float | None  # the reference's top-1 minus top-2 logit where the two first differ
    verdict: str  # "equal", "near-tie" or "diverged"


def compare_greedy(
    reference: Sequence[int], candidate: Sequence[int], margins: Sequence[float], *, tolerance: float, eos_ids=()
) -> RowAgreement:
    """One generated row against the reference row, whose top-1/top-2 logit margin is known at every position."""
    length = len(reference)
    for position, token in enumerate(reference):
        if token in eos_ids:
            length = position + 1
            break
    for position in range(length):
        chosen = candidate[position] if position < len(candidate) else None
        if chosen != reference[position]:
            margin = float(margins[position])
            return RowAgreement(length, position, margin, "near-tie" if margin <= tolerance else "diverged")
    return RowAgreement(length, length, None, "equal")


def judge_agreement(rows: Sequence[RowAgreement], *, tolerance: float) -> tuple[bool, str, dict[str, Any]]:
    """Every row together: (passed, one line saying why, the numbers)."""
    positions = sum(row.positions for row in rows)
    agreed = sum(row.agreed for row in rows)
    coverage = agreed / positions if positions else 0.0
    # [row, new tokens agreed before the two parted, the reference's margin there]
    parted = {
        verdict: [[index, row.agreed, round(row.margin, 4)] for index, row in enumerate(rows) if row.verdict == verdict]
        for verdict in ("near-tie", "diverged")
    }
    numbers = {
        "rows": len(rows),
        "positions": positions,
        "compared": agreed,
        "coverage": round(coverage, 3),
        "tolerance_logits": tolerance,
        "near_ties": parted["near-tie"],
        "diverged": parted["diverged"],
    }
    text = f"greedy tokens equal at {agreed}/{positions} positions ({coverage:.0%})"
    if parted["near-tie"]:
        text += f"; {len(parted['near-tie'])} row(s) parted at a near-tie (margin <= {tolerance})"
    if parted["diverged"]:
        index, position, margin = parted["diverged"][0]
        more = len(parted["diverged"]) - 1
        text += (
            f"; row {index} diverged at new token {position}, where the reference's top-1 logit led its top-2 by "
            f"{margin:.3f} (> {tolerance}): not a near-tie" + (f"; {more} more row(s) diverged" if more else "")
        )
        return False, text, numbers
    if coverage < MIN_COVERAGE:
        return False, f"{text}: fewer than {MIN_COVERAGE:.0%} of the positions compared, inconclusive", numbers
    return True, text, numbers


# --- running the units ------------------------------------------------------------------------------------------


def run_process(command: Sequence[str], *, timeout: float, env: dict[str, str]) -> tuple[int | None, list[str]]:
    """Run a unit, echoing its output as it comes; (exit code or None if it ran past `timeout`, its last lines)."""
    process = subprocess.Popen(
        list(command),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # its own process group: a timeout also ends nvcc/ninja under it
    )
    tail: collections.deque[str] = collections.deque(maxlen=30)

    def pump() -> None:
        for line in process.stdout:
            line = line.rstrip()
            tail.append(line[:500])
            print(line if len(line) <= 300 else line[:300] + " ...", file=sys.stderr, flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code = None
    reader.join(timeout=10)
    return code, list(tail)


def run_unit(unit: str, scratch: Path, *, timeout: float) -> list[PartResult]:
    parts = UNITS[unit][0]
    result_file = scratch / f"{unit}.result.json"
    # DeepSpeed on the GPU whatever the caller exported (the Makefile sets cpu for the tests); nothing from the hub.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DS_ACCELERATOR": "cuda", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    command = [
        sys.executable,
        "-m",
        "bench.gpu_check",
        "--unit",
        unit,
        "--unit-result",
        str(result_file),
        "--scratch",
        str(scratch),
    ]
    started = time.monotonic()
    log(f"{unit}: starting (at most {timeout:.0f} s)")
    code, tail = run_process(command, timeout=timeout, env=env)
    seconds = time.monotonic() - started
    if result_file.is_file():
        return [PartResult(**item) for item in json.loads(result_file.read_text())]
    what = f"ran past its {timeout:.0f} s" if code is None else f"exited with status {code}"
    last = " | ".join(line for line in tail[-6:] if line.strip())
    return [
        PartResult(part, FAIL, f"the process {what} before reporting; last output: {last}", seconds=seconds)
        for part in parts
    ]


def child(unit: str, result_file: Path, scratch: Path) -> int:
    from bench import gpu_check_units

    results = gpu_check_units.run(unit, scratch)
    result_file.write_text(json.dumps([asdict(result) for result in results], indent=1, default=str))
    return 0


# --- the report -------------------------------------------------------------------------------------------------


def exit_code(results: Sequence[PartResult]) -> int:
    statuses = {result.status for result in results}
    return 1 if FAIL in statuses else 3 if UNAVAILABLE in statuses else 0


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# make gpu-check", "", report["headline"], ""]
    if report.get("environment"):
        lines += ["Environment: " + ", ".join(f"{key} {value}" for key, value in report["environment"].items()), ""]
    if report["parts"]:
        lines += ["| part | status | result | seconds |", "|---|---|---|---:|"]
        for part in report["parts"]:
            summary = part["summary"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {part['name']} | {part['status']} | {summary} | {part['seconds']:.0f} |")
        lines += ["", f"Token criterion: {report['criterion']}.", ""]
        for part in report["parts"]:
            if part.get("fix"):
                lines.append(f"- {part['name']}: fix: {part['fix']}")
            if part.get("numbers"):
                lines.append(f"- {part['name']}: `{json.dumps(part['numbers'], default=str)}`")
    return "\n".join(lines) + "\n"


def write_report(output: Path, report: dict[str, Any]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1, default=str) + "\n")
    output.with_suffix(".md").write_text(render_markdown(report))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON (a .md is written beside it)")
    parser.add_argument("--only", help=f"comma-separated units: {', '.join(UNITS)} (default: all)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop starting units after this (default 480)")
    for internal in ("--unit", "--unit-result", "--scratch"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.unit:
        return child(args.unit, Path(args.unit_result), Path(args.scratch))
    units = [unit.strip() for unit in args.only.split(",")] if args.only else list(UNITS)
    unknown = [unit for unit in units if unit not in UNITS]
    if unknown:
        parser.error(f"--only: unknown unit(s) {', '.join(unknown)}; expected some of {', '.join(UNITS)}")
    import torch

    report: dict[str, Any] = {"check": "make gpu-check", "criterion": CRITERION, "parts": [], "environment": {}}
    if not torch.cuda.is_available():
        report["headline"] = (
            f"No CUDA GPU is visible here (torch.cuda.is_available() is False; torch {torch.__version__}), so "
            "nothing was checked. Run it on a GPU host or inside the LMI DeepSpeed image: docs/gpu-check.md."
        )
        print(f"make gpu-check: {report['headline']}", file=sys.stderr)
        write_report(args.output, {**report, "exit_code": 0})
        return 0
    if any(UNITS[unit][1] for unit in units) and "environment" not in units:
        units.insert(0, "environment")
    started = time.monotonic()
    results: list[PartResult] = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        for unit in units:
            parts, needs_deepspeed, limit = UNITS[unit]
            blocked = _blocked(unit, needs_deepspeed, results)
            remaining = args.budget_s - (time.monotonic() - started)
            if blocked:
                results += [PartResult(part, UNAVAILABLE, blocked[0], fix=blocked[1]) for part in parts]
            elif remaining < 20:
                results += [
                    PartResult(
                        part,
                        UNAVAILABLE,
                        f"not run: the {args.budget_s:.0f} s budget was spent",
                        fix="run it again (a JIT-compiled DeepSpeed op is cached by then), or raise "
                        "--budget-s, or --only this unit",
                    )
                    for part in parts
                ]
            else:
                results += run_unit(unit, Path(scratch), timeout=min(limit, remaining))
            for result in results[-len(parts) :]:
                log(f"{result.name}: {result.status}: {result.summary}")
    code = exit_code(results)
    environment = next((result for result in results if result.name == "environment"), None)
    counts = collections.Counter(result.status for result in results)
    report.update(
        headline=f"{', '.join(f'{n} {status}' for status, n in counts.items())} in {time.monotonic() - started:.0f} "
        f"s; exit status {code}.",
        environment=environment.numbers if environment else {},
        parts=[asdict(result) for result in results],
        exit_code=code,
    )
    write_report(args.output, report)
    print(render_markdown(report), file=sys.stderr)
    log(f"wrote {args.output} and {args.output.with_suffix('.md').name}")
    return code


def _blocked(unit: str, needs_deepspeed: bool, results: Sequence[PartResult]) -> tuple[str, str | None] | None:
    """Why a unit cannot run here, from what the environment unit found, or None."""
    environment = next((result for result in results if result.name == "environment"), None)
    if not needs_deepspeed or unit == "environment" or environment is None:
        return None
    if environment.status != PASS:
        return f"needs DeepSpeed's inference kernels, which are not usable here: {environment.summary}", environment.fix
    refusal = environment.numbers.get("bloom_kernel_injection")
    if unit in BLOOM_UNITS and refusal != "allowed":
        return (
            f"BLOOM kernel injection cannot run with transformers {environment.numbers.get('transformers')}: {refusal}",
            f"run inside the LMI 0.27.0 image ({LMI_IMAGE}, transformers 4.39.0), or install transformers==4.39.0 "
            "beside DeepSpeed (docs/gpu-check.md)",
        )
    return None


if __name__ == "__main__":
    sys.exit(main())
