"""Loading: read the YAML file (and overlays), validate it, and turn every problem into one ConfigError."""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from core.config.fields import DEFAULT_CONFIG, ConfigError, cut, field_path, invalid, shown
from core.config.platform import PlatformConfig
from core.config.strict_yaml import read_yaml


def load_config(
    path: str | Path = DEFAULT_CONFIG, *, only_stage: str | None = None, overlays: tuple[str | Path, ...] = ()
) -> PlatformConfig:
    """Read and validate a config file; with `overlays`, merge these files over it first (mappings merge key by
    key, everything else replaces); with `only_stage`, keep just that stage."""
    path = Path(path)
    raw = read_yaml(path)
    source = str(path)
    for overlay in map(Path, overlays):
        raw = _merge(raw, read_yaml(overlay))
        source += f" + overlay {overlay}"
    try:
        # Strict: each value is taken as the type YAML read it as (core/config/strict_yaml.py), never converted.
        config = PlatformConfig.model_validate(raw, strict=True)
    except ValidationError as err:
        raise invalid(source, [_describe(e) for e in err.errors()]) from None
    if only_stage is None:
        return config
    if only_stage not in config.stages:
        raise ConfigError(f"{source}: no stage named {shown(only_stage)}; stages: {', '.join(config.stages)}")
    return config.keep_only(only_stage)


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        return {**base, **{key: _merge(base.get(key), value) for key, value in overlay.items()}}
    return overlay


def _describe(error: dict[str, Any]) -> str:
    """One validation error as `field.path: what is wrong (got value)`, quoting only an excerpt of the value."""
    loc = [p for p in error["loc"] if p != "[key]"]
    where = field_path(loc)
    if error["type"] == "extra_forbidden":
        accepted = _accepted_keys([str(p) for p in loc[:-1]])
        close = difflib.get_close_matches(cut(str(loc[-1]), 100), accepted, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{where}: unknown key; {hint}accepted keys: {', '.join(accepted)}"
    if error["type"] == "missing":
        return f"{where}: required key is missing"
    # A rule's own message may quote what it was given: cut it too, well above what the rules here write.
    message = cut(error["msg"].removeprefix("Value error, "), 600)
    value = error.get("input")
    if error["type"] in ("value_error", "assertion_error") and isinstance(value, dict | list | tuple):
        # A model's own rule: its message names what is wrong; the input is the whole mapping.
        return message if not loc and re.match(r"[\w.]+: ", message) else f"{where}: {message}"
    return f"{where}: {message} (got {_got(value)}{_hint(error['type'], value)})"


def _got(value: Any) -> str:
    """The value as YAML wrote it: `true`, `2.0`, `the text '8'`, `a list`."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "nothing: the key has no value"
    if isinstance(value, str):
        return f"the text {shown(value)}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return shown(value)


def _hint(kind: str, value: Any) -> str:
    """How to write what was meant, for a value of another YAML type than the field's."""
    if kind in ("int_type", "float_type") and isinstance(value, str) and _is_number(value):
        return ": write the number without quotes"
    if kind == "int_type" and isinstance(value, float) and value.is_integer():
        return f": write {int(value)}"
    if kind == "bool_type" and isinstance(value, str) and value.lower() in ("true", "false"):
        return ": write true or false without quotes"
    if kind == "string_type" and isinstance(value, bool | int | float):
        return f": quote it for the text, '{_got(value)}'"
    return ""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _accepted_keys(loc: list[str]) -> list[str]:
    """The field names of the model found by walking `loc` from the root config."""
    annotation: Any = PlatformConfig
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if part not in annotation.model_fields:
                return []
            annotation = annotation.model_fields[part].annotation
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        elif typing.get_origin(annotation) in (list, tuple):
            annotation = typing.get_args(annotation)[0]
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` -> X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        else:
            return annotation
