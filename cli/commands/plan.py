"""`llmp plan`: the plan `make synth` prints, from the synthesized cloud assembly (no AWS calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli.errors import CliError, Exit
from cli.options import AllStagesOption, ConfigOption, JsonOption, handled, load
from cli.render import Output
from core import synth_record
from core.config import DEFAULT_CONFIG, REPO_ROOT
from generators import plan as planning


@handled
def plan(
    assembly: Annotated[
        Path, typer.Option("--assembly", help="the cloud assembly `make synth` wrote", show_default="cdk.out")
    ] = REPO_ROOT / "cdk.out",
    config: ConfigOption = None,
    stage: AllStagesOption = None,
    json_output: JsonOption = False,
) -> None:
    """Per stage: the stacks, the GPU instances, the model and how it is sharded, whether it fits, and what it costs
    per hour; as `make synth` prints it, for the config it synthesized."""
    out = Output(json_mode=json_output)
    platform, config_path = load(config)
    if stage is not None:
        platform = platform.model_copy(update={"stages": {stage: _one(platform, stage, config_path)}})
    if not (assembly / "manifest.json").is_file():
        raise CliError(f"{assembly}: no cloud assembly here; run `make synth CONFIG={config_path}` first", Exit.USAGE)
    _check_synthesized_from(assembly, config or DEFAULT_CONFIG, config_path, out)
    try:
        text = planning.render(platform, assembly)
        stacks = {
            name: {
                stack: {"resources": len(template.get("Resources", {})), "summary": planning.resource_summary(template)}
                for stack, template in planning.stage_stacks(assembly, name)
            }
            for name in platform.stages
        }
    except planning.AssemblyError as error:
        raise CliError(f"{error} (CONFIG={config_path})", Exit.USAGE) from None
    data: dict[str, Any] = {"config": config_path, "assembly": str(assembly), "stages": stacks, "text": text}
    out.result(data, lambda console: console.print(text, end="", markup=False, highlight=False))


def _check_synthesized_from(assembly: Path, config_file: Path, config_path: str, out: Output) -> None:
    """Refuse an assembly that app.py synthesized from another config, or from this one before an edit."""
    record = synth_record.read(assembly)
    if record is None:
        out.stderr.print(
            f"llmp: note: {assembly} does not say which config it was synthesized from; `make synth "
            f"CONFIG={config_path}` records it",
            markup=False,
        )
        return
    if record["config_sha256"] == synth_record.config_digest(config_file):
        return
    synthesized = record.get("config", "another config")
    recorded = Path(synthesized) if Path(synthesized).is_absolute() else REPO_ROOT / synthesized
    what = f"{synthesized} as it was then" if recorded.resolve() == config_file.resolve() else synthesized
    raise CliError(
        f"{assembly} was synthesized from {what}, not from {config_path} as it is now: run `make synth "
        f"CONFIG={config_path}`",
        Exit.USAGE,
    )


def _one(platform: Any, stage: str, config_path: str) -> Any:
    if stage not in platform.stages:
        raise CliError(
            f"no stage named {stage!r} in {config_path}; its stages: {', '.join(platform.stages)}", Exit.USAGE
        )
    return platform.stages[stage]
