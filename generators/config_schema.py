"""The JSON Schema of the config file, generated from the typed models, so that editors flag mistakes while typing.

    python -m generators.config_schema > docs/config.schema.json                    (make docs)
    python -m generators.config_schema --overlay > docs/config-overlay.schema.json

Every example config names the schema on its first line (`# yaml-language-server: $schema=...`). The schema says
what one field alone accepts: its type, enum, range and pattern, unknown keys refused (the models' extra=forbid),
and the value checks of core/config/fields.py turned into enums and patterns (VALUE_CHECKS). What depends on
several fields or on the catalogs' arithmetic (does the model fit the GPUs, is the SMP layout possible, the AWS API
limits of core/api_limits/rules.py) stays with synth, which remains the authority: a file the schema accepts may
still be refused by `make synth`, never the reverse.

An overlay (config/overlays/) is a partial file merged over a config, so it has its own schema: the same, with no
key required.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import typing
from collections.abc import Callable
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from core.catalog.instances import INSTANCE_TYPES
from core.catalog.models import COMMIT_PATTERN, MODELS, check_commit
from core.config import fields
from core.config.platform import PlatformConfig

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_PATH = "docs/config.schema.json"
OVERLAY_SCHEMA_PATH = "docs/config-overlay.schema.json"


def _validator(annotated: Any) -> Callable[..., Any]:
    """The validator function an `Annotated[..., AfterValidator(f)]` (or BeforeValidator) type carries."""
    (check,) = [m.func for m in typing.get_args(annotated)[1:] if hasattr(m, "func")]
    return check


def _name_pattern(annotated: Any) -> JsonSchemaValue:
    """fields._check_name's rule as a pattern: a lowercase letter first, then letters, digits and '-', not ending
    with '-', at most max_len characters (read from the check itself, so the two cannot drift apart)."""
    max_len = inspect.getclosurevars(_validator(annotated)).nonlocals["max_len"]
    return {"type": "string", "pattern": f"^[a-z]([a-z0-9-]{{0,{max_len - 2}}}[a-z0-9])?$"}


def _regions() -> list[str]:
    return sorted(fields.aws_regions())


_TAG_KEY, _TAG_VALUE = typing.get_args(fields.Tags)

# Each value check of the config types (an AfterValidator or BeforeValidator on a field's type) -> the JSON Schema
# that says the same, or as much of it as JSON Schema can. A test walks the models and fails on a check missing here.
# Patterns use [0-9] and [a-z], not \d and \w: JSON Schema's patterns are ECMA-262, where those classes differ from
# Python's.
VALUE_CHECKS: dict[Callable[..., Any], Callable[[], JsonSchemaValue]] = {
    _validator(fields.AccountId): lambda: {
        "type": "string",
        "pattern": "^[0-9]{12}$",
        "title": "AWS account id (12 digits, quoted)",
    },
    _validator(fields.Region): lambda: {"type": "string", "enum": _regions(), "title": "AWS region"},
    _validator(fields.InstanceTypeName): lambda: {
        "type": "string",
        "enum": list(INSTANCE_TYPES),
        "title": "GPU instance type of core/catalog/instances.py",
    },
    _validator(fields.ModelName): lambda: {
        "type": "string",
        "enum": list(MODELS),
        "title": "model of core/catalog/models.py",
    },
    _validator(fields.StageName): lambda: _name_pattern(fields.StageName),
    _validator(fields.ProjectName): lambda: _name_pattern(fields.ProjectName),
    # Tag keys and values also keep to letters, digits, spaces and _ . : / = + - @, where "letters" are Python's
    # Unicode \w: no ECMA-262 pattern without the u flag says that, so only the lengths and the aws: prefix are here.
    _validator(_TAG_KEY): lambda: {
        "type": "string",
        "minLength": 1,
        "maxLength": 128,
        "not": {"pattern": "^[aA][wW][sS]:"},
    },
    _validator(_TAG_VALUE): lambda: {"type": "string", "maxLength": 256},
    check_commit: lambda: {"type": "string", "pattern": COMMIT_PATTERN, "title": "commit (40 lowercase hex digits)"},
}


def _is_model_rule(check: Callable[..., Any]) -> bool:
    """A model validator (a whole model's rule, e.g. ServingConfig's fit check) rather than one value's check."""
    owner = getattr(check, "__qualname__", "").split(".")[0]
    return any(owner == model.__name__ for model in config_models())


def config_models() -> list[type]:
    """Every model of the config, PlatformConfig first, then as the file nests them."""
    found: list[type] = []

    def visit(model: type) -> None:
        if model in found:
            return
        found.append(model)
        for info in model.model_fields.values():
            for nested in _models_in(info.annotation):
                visit(nested)

    visit(PlatformConfig)
    return found


def _models_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type) and issubclass(annotation, fields.BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


class _ConfigJsonSchema(GenerateJsonSchema):
    """pydantic's generator, with the value checks as constraints, dict keys checked, and no made-up field titles
    ("Latency P90 Seconds"): editors show each field's description instead."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def function_after_schema(self, schema: core_schema.AfterValidatorFunctionSchema) -> JsonSchemaValue:
        return self._with_check(schema["function"]["function"], super().function_after_schema(schema))

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        return self._with_check(schema["function"]["function"], super().function_before_schema(schema))

    def _with_check(self, check: Callable[..., Any], inner: JsonSchemaValue) -> JsonSchemaValue:
        constraint = VALUE_CHECKS.get(check)
        return {**inner, **constraint()} if constraint else inner

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        # pydantic turns a key pattern into patternProperties, which lets every other key through unchecked; a
        # mapping here (stages, tags) takes any key that passes the key's own checks, so say exactly that.
        keys = {k: v for k, v in self.generate_inner(schema["keys_schema"]).items() if k not in ("type", "title")}
        values = self.generate_inner(schema["values_schema"])
        return {"type": "object", **({"propertyNames": keys} if keys else {}), "additionalProperties": values}


def unmapped_value_checks() -> list[str]:
    """Value checks of the config types that VALUE_CHECKS does not map (a test keeps this empty)."""
    found: dict[str, Callable[..., Any]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if str(node.get("type", "")).startswith("function-"):
                check = node["function"]["function"]
                found[f"{check.__module__}.{check.__qualname__}"] = check
            for value in node.values():
                walk(value)
        elif isinstance(node, list | tuple):
            for value in node:
                walk(value)

    walk(PlatformConfig.__pydantic_core_schema__)
    # _exact_literal makes 1 and true different choices of a Literal; JSON Schema's enum already compares that way.
    exempt = {fields.StrictModel._exact_literal.__func__}
    return sorted(
        name
        for name, check in found.items()
        if check not in VALUE_CHECKS and not _is_model_rule(check) and getattr(check, "__func__", check) not in exempt
    )


def config_schema() -> dict[str, Any]:
    """The schema of a whole config file."""
    schema = PlatformConfig.model_json_schema(mode="validation", schema_generator=_ConfigJsonSchema)
    head = {
        "$schema": SCHEMA_DIALECT,
        "title": "LLM platform configuration",
        "description": "A config file of this platform (config/default.yaml, config/examples/). Generated from "
        "core/config/ by `python -m generators.config_schema` (make docs); `make synth` checks more than this "
        "schema can say (docs/synth-checks.md).",
    }
    return {**head, **{k: v for k, v in schema.items() if k not in ("title", "description")}}


def overlay_schema() -> dict[str, Any]:
    """The schema of an overlay: the config's, with no key required, since an overlay sets only what it changes."""

    def optional(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: optional(v) for k, v in node.items() if k != "required"}
        if isinstance(node, list):
            return [optional(v) for v in node]
        return node

    schema = optional(config_schema())
    schema["title"] = "LLM platform configuration overlay"
    schema["description"] = (
        "An overlay (config/overlays/), merged over a config file key by key with -c overlay=... (OVERLAY=...): "
        "any part of a config, nothing required. Generated by `python -m generators.config_schema --overlay` "
        "(make docs); the merged file is checked by `make synth`."
    )
    return schema


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overlay", action="store_true", help="the schema of an overlay (nothing required)")
    args = parser.parse_args(argv)
    sys.stdout.write(render(overlay_schema() if args.overlay else config_schema()))


if __name__ == "__main__":
    main()
