"""Loading: read the YAML file (and overlays), validate it, and turn every problem into one ConfigError."""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

from stacks.config.fields import DEFAULT_CONFIG, ConfigError
from stacks.config.platform import PlatformConfig


def load_config(
    path: str | Path = DEFAULT_CONFIG, *, only_stage: str | None = None, overlays: tuple[str | Path, ...] = ()
) -> PlatformConfig:
    """Read and validate a config file; with `overlays`, merge these files over it first (mappings merge key by
    key, everything else replaces); with `only_stage`, keep just that stage."""
    path = Path(path)
    raw = _read_yaml(path)
    source = str(path)
    for overlay in map(Path, overlays):
        raw = _merge(raw, _read_yaml(overlay))
        source += f" + overlay {overlay}"
    try:
        config = PlatformConfig.model_validate(raw)
    except ValidationError as err:
        problems = "\n".join(f"  - {_describe(e)}" for e in err.errors())
        raise ConfigError(f"{source}: invalid configuration:\n{problems}") from None
    if only_stage is None:
        return config
    if only_stage not in config.stages:
        raise ConfigError(f"{source}: no stage named {only_stage!r}; stages: {', '.join(config.stages)}")
    return config.model_copy(update={"stages": {only_stage: config.stages[only_stage]}})


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top, got {type(raw).__name__}")
    return raw


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        return {**base, **{key: _merge(base.get(key), value) for key, value in overlay.items()}}
    return overlay


def _describe(error: dict[str, Any]) -> str:
    """One validation error as `field.path: what is wrong (got value)`."""
    loc = [str(p) for p in error["loc"] if p != "[key]"]
    where = ".".join(loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        accepted = _accepted_keys(loc[:-1])
        close = difflib.get_close_matches(loc[-1], accepted, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{where}: unknown key; {hint}accepted keys: {', '.join(accepted)}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"{where}: required key is missing"
    return f"{where}: {message} (got {error.get('input')!r})"


def _accepted_keys(loc: list[str]) -> list[str]:
    """The field names of the model found by walking `loc` from the root config."""
    annotation: Any = PlatformConfig
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            annotation = annotation.model_fields[part].annotation
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        elif typing.get_origin(annotation) is list:
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
