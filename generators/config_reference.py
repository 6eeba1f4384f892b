"""docs/config-reference.md: every config field, its type, default and meaning, generated from the typed models.

    python -m generators.config_reference > docs/config-reference.md      (make docs)

One section per model, in the order a file nests them, each with the paths where it appears. Types are read from the
JSON Schema editors check (generators/config_schema.py), defaults from the models, meanings from each Field's
description and each model's docstring; a test regenerates the page and compares.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from core.config.platform import PlatformConfig
from generators.config_schema import OVERLAY_SCHEMA_PATH, SCHEMA_PATH, config_models, config_schema

# An enum longer than this is named (its schema title) rather than listed.
LISTED_CHOICES = 8

HEADER = f"""# Configuration reference

Every key of a config file (`config/default.yaml`, `config/examples/*.yaml`), with its type, its default and what it
means. Generated from the typed models in `core/config/` by `python -m generators.config_reference >
docs/config-reference.md` (`make docs`); a test fails when this page is out of date. How the file is read and
checked, with examples: [configuration.md](configuration.md).

Editors check a file while it is typed against the JSON Schema generated from the same models,
[`{SCHEMA_PATH}`](config.schema.json) (overlays: [`{OVERLAY_SCHEMA_PATH}`](config-overlay.schema.json)), which each
example names on its first line. Synth checks more than a schema can say: what depends on several fields at once
(does the model fit the GPUs, is the SMP layout possible) and the AWS API limits ([synth-checks.md](synth-checks.md)).

"Not set" means the key may be left out (or given no value), and the description says what applies then.
"""


def _anchor(name: str) -> str:
    return name.lower()


def _walk(schema: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(model name, paths where it appears), in the order a file nests them, each model once."""
    defs = schema["$defs"]
    order: list[str] = []
    paths: dict[str, list[str]] = {}

    def refs(fragment: Any, suffix: str) -> list[tuple[str, str]]:
        """(model, path suffix) for every model a field's schema fragment refers to."""
        if not isinstance(fragment, dict):
            return []
        if "$ref" in fragment:
            return [(fragment["$ref"].rsplit("/", 1)[1], suffix)]
        found = [r for option in fragment.get("anyOf", []) for r in refs(option, suffix)]
        found += refs(fragment.get("items"), suffix + "[]")
        if isinstance(fragment.get("additionalProperties"), dict):
            found += refs(fragment["additionalProperties"], suffix + ".<name>")
        return found

    def visit(name: str, path: str, properties: dict[str, Any]) -> None:
        if name not in paths:
            order.append(name)
            paths[name] = []
        paths[name].append(path)
        for field, fragment in properties.items():
            for child, suffix in refs(fragment, f"{path}.{field}" if path else field):
                visit(child, suffix, defs[child]["properties"])

    visit(PlatformConfig.__name__, "", schema["properties"])
    return [(name, paths[name]) for name in order]


def _type(fragment: dict[str, Any]) -> str:
    """A field's schema fragment in words: `integer, at least 1`, `one of 'retain', 'destroy'`, `list of text`."""
    if "$ref" in fragment:
        name = fragment["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in fragment:
        options = [o for o in fragment["anyOf"] if o != {"type": "null"}]
        return " or ".join(_type(o) for o in options)
    if "enum" in fragment:
        choices = fragment["enum"]
        if len(choices) > LISTED_CHOICES and "title" in fragment:
            return f"{fragment['title']} ({len(choices)} choices in the schema)"
        return "one of " + ", ".join(f"`{_yaml(c)}`" for c in choices)
    kind = fragment.get("type")
    if kind == "array":
        words = f"list of {_type(fragment.get('items', {}))}"
        if "minItems" in fragment:
            words += f", at least {fragment['minItems']}"
        return words
    if kind == "object":
        keys = fragment.get("propertyNames", {})
        key = f"name matching `{keys['pattern']}`" if "pattern" in keys else "text"
        if "maxLength" in keys:
            key += f" of {keys.get('minLength', 0)}-{keys['maxLength']} characters"
        if "pattern" in keys.get("not", {}):
            key += f" not matching `{keys['not']['pattern']}`"
        return f"mapping of {key} to {_type(fragment.get('additionalProperties', {}))}"
    words = {"string": "text", "integer": "integer", "number": "number", "boolean": "true or false"}.get(kind, "any")
    if "title" in fragment:
        words = fragment["title"]
    limits = [
        ("minimum", "at least"),
        ("exclusiveMinimum", "above"),
        ("maximum", "at most"),
        ("exclusiveMaximum", "below"),
        ("minLength", "at least {} characters"),
        ("maxLength", "at most {} characters"),
    ]
    for key, phrase in limits:
        if key in fragment:
            words += ", " + (phrase.format(fragment[key]) if "{}" in phrase else f"{phrase} {fragment[key]}")
    if "pattern" in fragment and "title" not in fragment:
        words += f" matching `{fragment['pattern']}`"
    return words


def _yaml(value: Any) -> str:
    """A value as it is written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def _default(model: type[BaseModel], field: str) -> str:
    info = model.model_fields[field]
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is PydanticUndefined or value is None:
        return "not set"
    if isinstance(value, BaseModel):
        return "its defaults"
    return f"`{_yaml(value)}`"


def _cell(text: str) -> str:
    """Text inside a table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", text).replace("|", "\\|").strip()


def render() -> str:
    schema = config_schema()
    models = {model.__name__: model for model in config_models()}
    parts = [HEADER]
    for name, paths in _walk(schema):
        model = models[name]
        properties = schema["properties"] if model is PlatformConfig else schema["$defs"][name]["properties"]
        title = f"`{paths[0]}`" if paths[0] else "The file"
        where = f"Also at {', '.join(f'`{p}`' for p in paths[1:])}.\n\n" if len(paths) > 1 else ""
        parts.append(f'<a id="{_anchor(name)}"></a>\n\n## {title} ({name})\n\n{where}'.rstrip() + "\n")
        if model.__doc__:
            parts.append(_paragraphs(model.__doc__) + "\n")
        rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        for field, fragment in properties.items():
            meaning = model.model_fields[field].description or "-"
            rows.append(
                f"| `{field}` | {_cell(_type(fragment))} | {_cell(_default(model, field))} | {_cell(meaning)} |"
            )
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def _paragraphs(docstring: str) -> str:
    """A docstring as Markdown paragraphs: its lines joined, blank lines kept."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(docstring).split("\n\n"))


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
