"""The platform's configuration: one YAML file describing every environment, loaded into typed, frozen models.

These classes are the documentation of what can be configured. Loading validates everything before any construct is
built; a bad value fails with the file, the field path, the value and what would be accepted. Unknown keys are errors.
Only `app.py` calls `load_config`; stacks and constructs receive the typed objects.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from stacks.catalog.instances import INSTANCE_TYPES

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"


class ConfigError(ValueError):
    """An invalid configuration file, with one line per problem."""


# ---------------------------------------------------------------------------------------------------------------
# Field types: each validator's message says what is accepted.


def _aws_regions() -> dict[str, str]:
    """Region name -> partition, from the CDK's own region facts (no network, same list the CDK uses)."""
    from aws_cdk.region_info import RegionInfo

    return {r.name: r.partition for r in RegionInfo.regions if r.partition}


def _check_region(value: str) -> str:
    regions = _aws_regions()
    if value not in regions:
        close = difflib.get_close_matches(value, regions, n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else f"known regions: {', '.join(sorted(regions))}"
        raise ValueError(f"not an AWS region; {hint}")
    return value


def _check_account(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(
            "an account id must be a quoted string of 12 digits: YAML reads an unquoted number as an integer "
            "and drops its leading zeros"
        )
    if isinstance(value, str) and not re.fullmatch(r"\d{12}", value):
        raise ValueError("an account id is exactly 12 digits, for example '123456789012'")
    return value


def _check_instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        close = difflib.get_close_matches(value, INSTANCE_TYPES, n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(f"not a supported GPU instance type; {hint}supported: {', '.join(INSTANCE_TYPES)}")
    return value


def _check_name(kind: str, max_len: int):
    def check(value: str) -> str:
        if not re.fullmatch(rf"[a-z][a-z0-9-]{{0,{max_len - 1}}}", value) or value.endswith("-"):
            raise ValueError(
                f"{kind} names are lowercase letters, digits and '-', start with a letter, do not end with '-', "
                f"and have at most {max_len} characters (they become part of stack and resource names)"
            )
        return value

    return check


def _check_tag_key(value: str) -> str:
    if not 1 <= len(value) <= 128 or not re.fullmatch(r"[\w .:/=+\-@]+", value):
        raise ValueError("tag keys have 1-128 characters: letters, digits, spaces and _ . : / = + - @")
    if value.lower().startswith("aws:"):
        raise ValueError("tag keys starting with 'aws:' are reserved by AWS")
    return value


def _check_tag_value(value: str) -> str:
    if len(value) > 256 or not re.fullmatch(r"[\w .:/=+\-@]*", value):
        raise ValueError("tag values have at most 256 characters: letters, digits, spaces and _ . : / = + - @")
    return value


AccountId = Annotated[str, BeforeValidator(_check_account)]
Region = Annotated[str, AfterValidator(_check_region)]
InstanceTypeName = Annotated[str, AfterValidator(_check_instance_type)]
StageName = Annotated[str, AfterValidator(_check_name("stage", 20))]
ProjectName = Annotated[str, AfterValidator(_check_name("project", 24))]
Tags = dict[Annotated[str, AfterValidator(_check_tag_key)], Annotated[str, AfterValidator(_check_tag_value)]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# ---------------------------------------------------------------------------------------------------------------
# The configuration.


class StageConfig(_Strict):
    """One environment (dev, staging, prod): where it lives and how its data is treated."""

    account: AccountId | None = Field(
        default=None,
        description="AWS account id; absent = environment-agnostic (the CLI's credentials decide)",
    )
    region: Region = Field(description="AWS region, for example us-east-1")
    removal_policy: Literal["retain", "destroy"] = Field(
        default="retain",
        description="what happens to the data/model buckets and the KMS key when the stack is deleted: "
        "'retain' keeps them; 'destroy' deletes them and empties the buckets first (dev only)",
    )
    tags: Tags = Field(default_factory=dict, description="tags on every resource of this stage")


class PlatformConfig(_Strict):
    """The whole file: the project's name, tags for everything, and the stages in promotion order."""

    project: ProjectName = Field(default="llm-platform", description="prefix of stack names")
    tags: Tags = Field(default_factory=dict, description="tags on every resource of every stage")
    stages: dict[StageName, StageConfig] = Field(description="environments, in promotion order")

    @model_validator(mode="after")
    def _check_stages(self) -> PlatformConfig:
        if not self.stages:
            raise ValueError("stages: at least one stage is required")
        if self.stages.get("prod") and self.stages["prod"].removal_policy != "retain":
            raise ValueError(
                "stages.prod.removal_policy: 'destroy' would delete production data and keys with the stack; "
                "prod must use 'retain'"
            )
        return self

    def stage_tags(self, stage: str) -> dict[str, str]:
        """Tags for one stage: the project's, then the file's, then the stage's own (later wins)."""
        return {"project": self.project, "stage": stage, **self.tags, **self.stages[stage].tags}


# ---------------------------------------------------------------------------------------------------------------
# Loading.


def load_config(path: str | Path = DEFAULT_CONFIG, *, only_stage: str | None = None) -> PlatformConfig:
    """Read and validate a config file; with `only_stage`, keep just that stage."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'stages' key at the top, got {type(raw).__name__}")
    try:
        config = PlatformConfig.model_validate(raw)
    except ValidationError as err:
        problems = "\n".join(f"  - {_describe(e)}" for e in err.errors())
        raise ConfigError(f"{path}: invalid configuration:\n{problems}") from None
    if only_stage is None:
        return config
    if only_stage not in config.stages:
        raise ConfigError(f"{path}: no stage named {only_stage!r}; stages: {', '.join(config.stages)}")
    return config.model_copy(update={"stages": {only_stage: config.stages[only_stage]}})


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
