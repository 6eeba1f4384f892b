"""Print what `cdk synth` produced, per stage: the plan a person reads before deploying.

    python -m stacks.plan [--assembly cdk.out] [--config config/default.yaml] [--stage dev]

It reads the synthesized cloud assembly (what will be deployed) and the config (why), and makes no AWS calls.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from stacks.config import DEFAULT_CONFIG, ConfigError, PlatformConfig, StageConfig, load_config


def stage_stacks(assembly: Path, stage: str) -> list[tuple[str, dict]]:
    """(stack name, template) for each stack of one stage's nested assembly."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    nested = [
        a["properties"]["directoryName"]
        for a in manifest["artifacts"].values()
        if a["type"] == "cdk:cloud-assembly" and a["properties"].get("displayName") == stage
    ]
    if not nested:
        raise SystemExit(f"{assembly}: stage {stage!r} was not synthesized; run `make synth` first")
    stage_dir = assembly / nested[0]
    stage_manifest = json.loads((stage_dir / "manifest.json").read_text())
    stacks = []
    for artifact in stage_manifest["artifacts"].values():
        if artifact["type"] == "aws:cloudformation:stack":
            props = artifact["properties"]
            template = json.loads((stage_dir / props["templateFile"]).read_text())
            stacks.append((props.get("stackName", artifact["displayName"]), template))
    return sorted(stacks)


def resource_summary(template: dict) -> str:
    """`19 resources: 4 S3::Bucket, 3 IAM::Role, ...`, most common first."""
    counts = collections.Counter(r["Type"].removeprefix("AWS::") for r in template.get("Resources", {}).values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{sum(counts.values())} resources: {kinds}"


def describe_stage(name: str, stage: StageConfig) -> str:
    account = stage.account or "the deploying credentials' account"
    data = "kept when the stack is deleted" if stage.removal_policy == "retain" else "deleted with the stack"
    return f"{name}: {account}, {stage.region}; data and key {data}"


def render(config: PlatformConfig, assembly: Path) -> str:
    lines = [f"Plan for {config.project}: {len(config.stages)} stage(s), in promotion order", ""]
    for name, stage in config.stages.items():
        lines.append(describe_stage(name, stage))
        for stack_name, template in stage_stacks(assembly, name):
            lines.append(f"  {stack_name:<34} {resource_summary(template)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assembly", type=Path, default=Path("cdk.out"), help="cloud assembly directory")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the config file that was synthesized")
    parser.add_argument("--stage", default=None, help="only this stage (as with `-c stage=...`)")
    args = parser.parse_args()
    try:
        config = load_config(args.config, only_stage=args.stage or None)
    except ConfigError as err:
        raise SystemExit(str(err)) from None
    print(render(config, args.assembly), end="")


if __name__ == "__main__":
    main()
