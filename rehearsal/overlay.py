"""The rehearsal's overlay, generated from the config it is applied to: what moto cannot take, changed for one stage.

    .venv/bin/python -m rehearsal.overlay > config/overlays/moto-rehearsal.yaml            # config/default.yaml's
    .venv/bin/python -m rehearsal.overlay --config config/examples/promotion.yaml --stage prod

The emulator's CreateEndpointConfig takes exactly the instance types SageMaker's API takes for an endpoint (the
enum of the pinned botocore's service model: rehearsal/emulator.py, fix endpoint-instance-types), so a stage is
rehearsed on its own instance type and the overlay is empty. It changes something only where a config serves on a
type outside that enum (of the catalog, ml.p3dn.24xlarge: a training instance SageMaker does not host endpoints on).
For the stage rehearsed, the overlay then puts the endpoint on an instance type the emulator accepts (asked of the
emulator itself, for every type of core/catalog/instances.py), and changes with it only what the config's own checks
then require: a tensor parallel degree that divides the new GPUs, a smaller max_batch_size that fits their memory.
Every candidate is loaded and checked exactly as `cdk synth` would (core.config.load_config, core.synth_checks); the
first that passes is kept: the configured tensor parallel degree on each type with GPUs for it, cheapest first, then
other degrees (the most GPUs first); then the largest batch that passes, up to the configured one. Where none passes,
the overlay says why instead, and the stage cannot be rehearsed. Training instance types need no change: moto skips
AWS::SageMaker::Pipeline and never sees them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMITTED = REPO_ROOT / "config" / "overlays" / "moto-rehearsal.yaml"
OVERLAY_SCHEMA = REPO_ROOT / "docs" / "config-overlay.schema.json"
WRAP = 116  # comment lines within the project's 120 columns, indented


@cache
def emulator_endpoint_instance_types() -> tuple[str, ...]:
    """The instance types of core/catalog/instances.py that the emulator's CreateEndpointConfig accepts, cheapest
    first. Asked of moto with the emulator's fixes (in this process, nothing else reached), so it stays exact when
    moto, the fixes or botocore change."""
    from moto import mock_aws

    from core.catalog.instances import INSTANCE_TYPES
    from rehearsal import emulator
    from rehearsal.deployment import Aws
    from rehearsal.gaps import probe_instance_type

    with mock_aws(), emulator.patched():
        aws = Aws(None, "us-east-1")
        accepted = [name for name in INSTANCE_TYPES if probe_instance_type(aws, name, account="123456789012").accepted]
    return tuple(sorted(accepted, key=lambda name: (INSTANCE_TYPES[name].hourly_usd, name)))


@dataclass(frozen=True)
class StageOverlay:
    """What the rehearsal changes in one stage's serving, and why; or why no change lets the emulator deploy it."""

    stage: str
    serving: dict[str, Any] = field(default_factory=dict)  # key -> value under stages.<stage>.serving
    why: dict[str, str] = field(default_factory=dict)  # key -> the reason, written as a comment above it
    refusal: str | None = None  # why no instance type the emulator accepts passes the config's checks for the stage
    refused: dict[str, str] = field(default_factory=dict)  # with a refusal: candidate -> what the checks said


def for_stage(config_path: str | Path, stage: str) -> StageOverlay:
    """The overlay that lets the emulator deploy `stage` of the config, with the config's checks still passing."""
    from core.config import load_config
    from core.sizing import head_splits

    serving = load_config(config_path).stages[stage].serving
    accepted = emulator_endpoint_instance_types()
    if serving.instance_type in accepted:
        return StageOverlay(stage)
    with tempfile.TemporaryDirectory(prefix="rehearsal-overlay-") as scratch:
        checker = _Checker(Path(config_path), stage, Path(scratch))
        tp = serving.tensor_parallel_degree
        # The configured tensor parallel degree on every candidate with GPUs for it, then the others, most GPUs first.
        attempts = [(i, tp) for i in accepted if _gpu_count(i) % tp == 0]
        for i in accepted:
            splits = head_splits(serving.catalog_model, serving.engine, _gpu_count(i))
            attempts += [(i, d) for d in reversed(splits) if d != tp]
        problems: dict[str, str] = {}  # candidate -> why the checks refuse it, at batch 1, at its most GPUs tried
        for instance_type, degree in attempts:
            changes: dict[str, Any] = {"instance_type": instance_type}
            if degree != tp:
                changes["tensor_parallel_degree"] = degree
            # One sequence is the least memory the KV cache can take: if the checks refuse it, no batch passes.
            problem = checker.problem({**changes, "max_batch_size": 1})
            if problem is None:
                return _explained(serving, stage, changes, checker)
            if degree == max([d for i, d in attempts if i == instance_type]):
                problems[instance_type] = problem.replace(instance_type, "<type>")
        for instance_type in accepted:  # no degree splits the model's heads on its GPUs: the configured one says why
            if instance_type not in problems:
                problem = checker.problem({"instance_type": instance_type, "max_batch_size": 1})
                problems[instance_type] = (problem or "").replace(instance_type, "<type>")
    return _refusal(serving, stage, {i: problems[i] for i in accepted})  # in the order candidates are tried


def _explained(serving: Any, stage: str, changes: dict[str, Any], checker: _Checker) -> StageOverlay:
    """The largest batch that passes with `changes`, and the reason for each key changed."""
    configured = serving.max_batch_size
    why = {
        "instance_type": (
            f"the emulator's CreateEndpointConfig rejects {serving.instance_type}, as SageMaker does (it is not in "
            "ProductionVariantInstanceType, botocore's enum of the types an endpoint takes); "
            f"{changes['instance_type']} is the first it accepts that the config's checks pass (cheapest first; "
            "those with GPUs for the configured tensor_parallel_degree before the others)"
        )
    }
    if "tensor_parallel_degree" in changes:
        why["tensor_parallel_degree"] = (
            f"no instance type the emulator accepts passes the config's checks with {serving.tensor_parallel_degree}; "
            f"{changes['tensor_parallel_degree']} is the most of the {_gpu_count(changes['instance_type'])} GPU(s) of "
            f"{changes['instance_type']} that does"
        )
    refused = checker.problem(changes)
    if refused:  # the largest batch the checks pass (one sequence does: for_stage checked it)
        batch = next(b for b in range(configured - 1, 0, -1) if not checker.problem({**changes, "max_batch_size": b}))
        changes = {**changes, "max_batch_size": batch}
        first = refused.split("; ")[0].split(": ", 1)[-1]  # what does not fit, without the field or the suggestions
        why["max_batch_size"] = f"the config's checks refuse {configured} on {changes['instance_type']}: {first}"
    return StageOverlay(stage, changes, why)


def _refusal(serving: Any, stage: str, problems: dict[str, str]) -> StageOverlay:
    by_problem: dict[str, list[str]] = {}
    for instance_type, problem in problems.items():
        by_problem.setdefault(problem, []).append(instance_type)
    refusal = (
        f"no instance type the emulator accepts for an endpoint passes the config's checks for stage {stage} "
        f"({serving.model} {serving.dtype} on engine {serving.engine}, tensor_parallel_degree "
        f"{serving.tensor_parallel_degree}, configured on {serving.instance_type}), so its serving stack cannot "
        "deploy on the emulator"
    )
    return StageOverlay(stage, refusal=refusal, refused={", ".join(t): p for p, t in by_problem.items()})


def _gpu_count(instance_type: str) -> int:
    from core.catalog.instances import INSTANCE_TYPES

    return INSTANCE_TYPES[instance_type].gpu_count


class _Checker:
    """Loads the config with a candidate overlay and runs synth's checks on it, as `cdk synth -c stage=` would."""

    def __init__(self, config_path: Path, stage: str, scratch: Path) -> None:
        self.config_path, self.stage, self.file = config_path, stage, scratch / "candidate.yaml"

    def problem(self, serving: dict[str, Any]) -> str | None:
        """None when the checks pass; else their problems, one per line, without the file's header."""
        from core import synth_checks
        from core.config import ConfigError, load_config

        self.file.write_text(yaml.safe_dump({"stages": {self.stage: {"serving": serving}}}))
        try:
            config = load_config(self.config_path, only_stage=self.stage, overlays=(self.file,))
            synth_checks.check(config, config_path=str(self.config_path))
        except ConfigError as err:
            lines = [line.strip().removeprefix("- ") for line in str(err).splitlines()[1:]]
            return "; ".join(lines) or str(err)
        return None


# --- the file -------------------------------------------------------------------------------------------------


def render(overlays: list[StageOverlay], *, config_path: str, destination: Path) -> str:
    """The overlay as a YAML file: the overlay schema on its first line, each change under the reason for it."""
    schema = os.path.relpath(OVERLAY_SCHEMA, destination.resolve().parent)
    lines = [
        f"# yaml-language-server: $schema={schema}",
        f"# Generated by `python -m rehearsal.overlay --config {config_path}` (rehearsal/overlay.py); `make rehearse`",
        "# writes one like it for whatever config and stage it rehearses. Never use it for a real deploy: it changes",
        "# only what moto cannot take, and the rehearsal prints every change.",
    ]
    stages = [o for o in overlays if o.serving]
    if not stages:
        return "\n".join([*lines, "# Nothing to change: the emulator takes every stage as configured.", "{}", ""])
    lines.append("stages:")
    for overlay in stages:
        lines += [f"  {overlay.stage}:", "    serving:"]
        for key, value in overlay.serving.items():
            reason = overlay.why.get(key)
            if reason:
                lines += textwrap.wrap(reason, WRAP, initial_indent="      # ", subsequent_indent="      # ")
            lines.append(f"      {key}: {yaml.safe_dump(value).removesuffix(chr(10)).removesuffix('...').strip()}")
    return "\n".join(lines) + "\n"


def stages(config_path: str | Path) -> list[str]:
    """Every stage of the config: the rehearsal can deploy each (checked against its own removal_policy)."""
    from core.config import load_config

    return list(load_config(config_path).stages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rehearsal.overlay", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="config/default.yaml", help="the config (default config/default.yaml)")
    parser.add_argument("--stage", action="append", help="a stage (repeatable; default: every stage)")
    parser.add_argument("--output", type=Path, default=COMMITTED, help="where the file will live (for its schema line)")
    args = parser.parse_args(argv)
    overlays = [for_stage(args.config, stage) for stage in args.stage or stages(args.config)]
    for refused in (o for o in overlays if o.refusal):
        print(f"stage {refused.stage}: {refused.refusal}:", file=sys.stderr)
        for candidates, problem in refused.refused.items():
            print(f"  - {candidates}: {problem}", file=sys.stderr)
    sys.stdout.write(render(overlays, config_path=args.config, destination=args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
