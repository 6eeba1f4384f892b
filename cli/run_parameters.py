"""The fine-tuning pipeline's run parameters: as its source declares them (what `finetune --help` lists), and each
--param NAME=VALUE checked against the deployed definition before a run starts."""

from __future__ import annotations

import ast
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.errors import CliError, Exit
from core import bucket_layout
from core.config import REPO_ROOT, TrainingConfig

# StartPipelineExecution: a parameter value is a string of at most 1024 characters (SageMaker API reference,
# Parameter.Value).
MAX_PARAMETER_VALUE = 1024
PARAMETER_TYPES = {"Integer": int, "Float": float, "String": str, "Boolean": bool}
# Where the fine-tuning pipeline declares its run parameters: run_parameters() of this file, one
# sdk.Parameter<Type>("Name", default_value=...) each. The CLI never imports infrastructure/ (the CDK side:
# tests/cli/test_no_cdk.py), so `finetune --help` reads that function's source.
PIPELINE_SOURCE = REPO_ROOT / "infrastructure" / "constructs" / "training_pipeline" / "finetune_pipeline.py"


@dataclass(frozen=True)
class RunParameter:
    """A run parameter as the pipeline's source declares it: its name, SageMaker type and default."""

    name: str
    type: str  # Integer, Float, String, Boolean (SageMaker's Parameter types)
    default: str  # as help shows it: the config field it comes from and that field's own default


def declared_run_parameters(source: Path = PIPELINE_SOURCE) -> list[RunParameter]:
    """The run parameters in the order run_parameters() declares them; [] when the source is not there (an install
    without infrastructure/): the deployed definition still checks every --param."""
    try:
        tree = ast.parse(source.read_text())
    except OSError:
        return []
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_parameters"]
    calls = [
        node
        for function in functions
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("Parameter")
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    return [
        RunParameter(call.args[0].value, call.func.attr.removeprefix("Parameter"), _default(call))  # type: ignore[union-attr]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset))
    ]


def _default(call: ast.Call) -> str:
    """`training.max_steps` -> "training.max_steps (unset: 1000)"; `s3("DataBucket",
    bucket_layout.RAW_DATA)` -> "s3://<data bucket>/raw/"; a literal as itself."""
    value = next((k.value for k in call.keywords if k.arg == "default_value"), None)
    if value is None:
        return "none"
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "training":
        field = TrainingConfig.model_fields.get(value.attr)
        unless = f" (unset: {field.default})" if field is not None else ""
        return f"training.{value.attr}{unless}"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "s3" and value.args:
        bucket = value.args[0].value if isinstance(value.args[0], ast.Constant) else "?"
        prefix = value.args[1] if len(value.args) > 1 else None
        path = getattr(bucket_layout, prefix.attr, "") if isinstance(prefix, ast.Attribute) else ""
        # DataBucket -> data bucket: the stack's logical name, as a person names it.
        return f"s3://<{re.sub(r'(?<!^)(?=[A-Z])', ' ', str(bucket)).lower()}>/{path}"
    try:
        return repr(ast.literal_eval(value))
    except ValueError:
        return ast.unparse(value)


def run_parameters_help() -> str:
    """The run parameters as `finetune --help` lists them, one a line (click keeps a paragraph's lines after \\b),
    or "" when the pipeline's source is not there."""
    declared = declared_run_parameters()
    if not declared:
        return ""
    width = max(len(p.name) for p in declared)
    rows = [f"  {p.name:<{width}}  {p.type:<7}  {p.default}" for p in declared]
    return "\n\n\b\nRun parameters (--param NAME=VALUE), defaults from the stage's config:\n" + "\n".join(rows)


def pipeline_parameters(given: list[str], definition: str, pipeline: str) -> dict[str, str]:
    """NAME=VALUE pairs checked against the pipeline's own parameters (names and types, from its definition)."""
    declared = {p["Name"]: p for p in json.loads(definition).get("Parameters", [])}
    listing = ", ".join(f"{n} ({p['Type']}, default {p.get('DefaultValue')})" for n, p in declared.items())
    parameters: dict[str, str] = {}
    for pair in given:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise CliError(f"--param takes NAME=VALUE, got {pair!r}; the parameters: {listing}", Exit.USAGE)
        if name not in declared:
            raise CliError(
                f"{pipeline} has no parameter {name!r}{_did_you_mean(name, declared)}; its parameters: {listing}",
                Exit.USAGE,
            )
        if name in parameters:
            raise CliError(f"--param {name} is given twice", Exit.USAGE)
        kind = declared[name]["Type"]
        if not _has_type(value, kind):
            raise CliError(f"--param {name}: {value!r} is not a {kind}", Exit.USAGE)
        if len(value) > MAX_PARAMETER_VALUE:
            raise CliError(f"--param {name}: longer than SageMaker's {MAX_PARAMETER_VALUE} characters", Exit.USAGE)
        parameters[name] = value
    return parameters


def _did_you_mean(name: str, declared: dict[str, Any]) -> str:
    """ ": did you mean MaxSteps?" for a name close to a declared one (case aside), else ""."""
    lowered = {n.lower(): n for n in declared}
    close = difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=0.6)
    return f": did you mean {lowered[close[0]]}?" if close else ""


def _has_type(value: str, kind: str) -> bool:
    if kind == "Boolean":
        return value in ("true", "false")
    if kind in ("Integer", "Float"):
        try:
            number = int(value) if kind == "Integer" else float(value)
        except ValueError:
            return False
        # Every numeric parameter of these pipelines is a count, a rate or a threshold: above zero.
        return number > 0
    return True


def check_input_data(uri: str, data_bucket: str) -> None:
    """The training role reads only raw/ of the stage's data bucket (infrastructure/storage_stack.py): anything else
    would fail inside the run, minutes later."""
    allowed = f"s3://{data_bucket}/{bucket_layout.RAW_DATA}"
    if not uri.startswith(allowed):
        raise CliError(
            f"--param InputData: the pipeline may read only under {allowed}; upload there with `llmp upload-data`",
            Exit.USAGE,
        )
