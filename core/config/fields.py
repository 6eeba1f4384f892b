"""Field types shared by the config models: each validator's message says what is accepted."""

from __future__ import annotations

import difflib
import functools
import json
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from core.catalog.instances import INSTANCE_TYPES
from core.catalog.models import MODELS
from core.failures import Refused

REPO_ROOT = Path(__file__).resolve().parents[2]
REGIONS_TABLE = REPO_ROOT / "core" / "catalog" / "regions.json"
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"


class ConfigError(ValueError, Refused):
    """An invalid configuration file, with one line per problem (printed as it is, see core/failures.py)."""


EXCERPT_CHARACTERS = 60


def shown(value: Any, limit: int = EXCERPT_CHARACTERS) -> str:
    """`value` as a message quotes it: its repr, cut to about `limit` characters. Every message about the config
    quotes through this, so none echoes a whole input (a 5 MB alias expansion, a pasted file)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters written out"
    return f"{text[: limit - 20]}... ({size})"


def cut(text: str, limit: int = EXCERPT_CHARACTERS) -> str:
    """Prose from elsewhere (a YAML parser's complaint, an exception's message), cut to `limit` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_path(parts: list[Any]) -> str:
    """`stages.dev.serving.model`, each part cut short (a key may be any length), or `(top level)`."""
    return ".".join(cut(str(part), 40) for part in parts) or "(top level)"


MAX_PROBLEMS = 20


def invalid(source: str, problems: list[str]) -> ConfigError:
    """One error for everything wrong with `source`, the first MAX_PROBLEMS listed."""
    listed = [f"  - {problem}" for problem in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        listed.append(f"  ... and {len(problems) - MAX_PROBLEMS} more problems")
    return ConfigError(f"{source}: invalid configuration:\n" + "\n".join(listed))


# ---------------------------------------------------------------------------------------------------------------
# Field types: each validator's message says what is accepted.


@functools.cache
def aws_regions() -> dict[str, str]:
    """Region name -> partition: the CDK's own region facts (aws_cdk.region_info), committed as a table so that
    loading a config never starts the CDK (generators/aws_tables.py writes it; a test compares it with the CDK's)."""
    return json.loads(REGIONS_TABLE.read_text())


def _check_region(value: str) -> str:
    regions = aws_regions()
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


def _check_in_catalog(value: str, catalog: dict, *, what: str, listed: str, suggestions: int) -> str:
    """`value` if the catalog has it; else a ValueError with the closest names and the whole list."""
    if value not in catalog:
        close = difflib.get_close_matches(value, catalog, n=suggestions)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(f"not {what}; {hint}{listed}: {', '.join(catalog)}")
    return value


def _check_instance_type(value: str) -> str:
    return _check_in_catalog(
        value, INSTANCE_TYPES, what="a supported GPU instance type", listed="supported", suggestions=3
    )


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


# SageMaker's own patterns for a model package version's ARN and a model package group's name (botocore's
# ModelPackageArn, EntityName): one home for every config field that names a registered package.
MODEL_PACKAGE_ARN_PATTERN = r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package/[A-Za-z0-9-]{1,63}/\d+$"
MODEL_PACKAGE_GROUP_PATTERN = r"^[A-Za-z0-9](-*[A-Za-z0-9]){0,62}$"

AccountId = Annotated[str, BeforeValidator(_check_account)]
Region = Annotated[str, AfterValidator(_check_region)]
InstanceTypeName = Annotated[str, AfterValidator(_check_instance_type)]
StageName = Annotated[str, AfterValidator(_check_name("stage", 20))]
ProjectName = Annotated[str, AfterValidator(_check_name("project", 24))]
Tags = dict[Annotated[str, AfterValidator(_check_tag_key)], Annotated[str, AfterValidator(_check_tag_value)]]


# The fields of a weights source 'promoted' (serving weights and adapters alike): a version approved in another stage,
# copied into this one when it deploys (infrastructure/constructs/promoted_weights.py).
PROMOTED_FROM_STAGE = Field(
    default=None,
    description="for source 'promoted': the stage whose approved version this stage serves; it must come earlier in "
    "stages (it deploys first) and may be in another account",
)
PROMOTED_VERSION = Field(
    default=None,
    ge=1,
    description="for source 'promoted': the version of from_stage's model package group to serve (it must be "
    "Approved); default the newest Approved one, looked up again on every release",
)
# Which source each optional location field belongs to.
LOCATION_OWNERS = {
    "s3_uri": "s3",
    "model_package_arn": "model_package",
    "model_package_group": "latest_approved",
    "from_stage": "promoted",
    "version": "promoted",
}


def check_location_fields(weights: Any) -> None:
    """A weights source's own fields are given, and no other source's: the rules WeightsConfig and
    AdapterWeightsConfig share."""
    if weights.source == "model_package" and weights.model_package_arn is None:
        raise ValueError("source 'model_package' needs model_package_arn")
    if weights.source == "promoted" and weights.from_stage is None:
        raise ValueError("source 'promoted' needs from_stage, the stage whose approved version is served")
    for name, owner in LOCATION_OWNERS.items():
        if getattr(weights, name, None) is not None and weights.source != owner:
            raise ValueError(f"{name} is only used with source {owner!r}")


class StrictModel(BaseModel):
    """The base of every config model: unknown keys are errors, values are frozen, numbers are finite.

    The file's values are validated in pydantic's strict mode (load_config): a YAML true is no number, 8 is no
    text, "8" no number and 2.0 no whole number. Strict mode still lets a Literal of numbers take true for 1 and
    1.0 for 1; `_exact_literal` closes that for every model here."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _exact_literal(cls, value: Any, info: ValidationInfo) -> Any:
        equal = [c for c in _literal_choices(cls, info.field_name) if c == value]
        if equal and not any(type(c) is type(value) for c in equal):
            choices = _literal_choices(cls, info.field_name)
            raise ValueError(f"expected exactly one of {', '.join(map(repr, choices))}")
        return value


@functools.cache
def _literal_choices(model: type[BaseModel], name: str) -> tuple[Any, ...]:
    """The choices of a field typed `Literal[...]` (or `Literal[...] | None`), else ()."""
    annotation = model.model_fields[name].annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next((a for a in typing.get_args(annotation) if typing.get_origin(a) is Literal), None)
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else ()


def _check_model(value: str) -> str:
    return _check_in_catalog(value, MODELS, what="a known model", listed="known", suggestions=1)


ModelName = Annotated[str, AfterValidator(_check_model)]


class VpcConfig(StrictModel):
    """Subnets and security groups of one VPC: where training jobs run (training.vpc) or where the endpoint's
    instances put their network interfaces (serving.vpc)."""

    subnet_ids: tuple[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(min_length=1)
    security_group_ids: tuple[Annotated[str, StringConstraints(pattern=r"^sg-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=1
    )
