"""What AWS accepts, as committed tables: the limits of the API members the config reaches, and the CloudFormation
resource types of each region.

    python -m generators.aws_tables        # regenerate both tables from the installed botocore and cfn-lint

Synth reads only the two JSON files next to this module, so it is offline, deterministic and needs no dev tool.
They are generated from the service models of the botocore that the pinned SageMaker SDK installs
(botocore/data/<service>/<version>/service-2.json) and from the per-region CloudFormation provider schemas that
cfn-lint ships (cfnlint/data/schemas/providers/<region>.json, resources/<hash>.json); a test regenerates them and
fails when they differ, so a version bump shows up as a reviewed change to the tables.

An API member is named `<service>:<Operation>:<Member.Path>` (botocore) or `cfn:<Resource::Type>:<Property.Path>`
(the CloudFormation schema); a list or map member's path continues through its items.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
API_TABLE = HERE / "aws_api_limits.json"
RESOURCE_TYPES_TABLE = HERE / "cfn_resource_types.json"

# The services whose CloudFormation resource types the stacks may use. A type outside them is not in the table,
# and synth says so rather than guessing (add its namespace here and regenerate).
RESOURCE_NAMESPACES = (
    "AWS::ApplicationAutoScaling::",
    "AWS::CDK::",
    "AWS::CloudFormation::",
    "AWS::CloudWatch::",
    "AWS::CodeBuild::",
    "AWS::CodePipeline::",
    "AWS::Events::",
    "AWS::IAM::",
    "AWS::KMS::",
    "AWS::Lambda::",
    "AWS::Logs::",
    "AWS::S3::",
    "AWS::StepFunctions::",
    "AWS::SNS::",
    "AWS::SageMaker::",
    "AWS::SecretsManager::",
    "AWS::SSM::",
)


@dataclass(frozen=True)
class Constraint:
    """One API member's limits, as its service model states them. For strings `minimum`/`maximum` bound the length,
    for lists and maps the number of entries; `member` constrains each item (or map value)."""

    source: str
    type: str
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    full_match: bool = True  # botocore patterns match the whole value; JSON Schema patterns search
    enum: tuple[str, ...] | None = None
    member: Constraint | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Constraint:
        member = data.get("member")
        return cls(
            source=data["source"],
            type=data["type"],
            minimum=data.get("min"),
            maximum=data.get("max"),
            pattern=data.get("pattern"),
            full_match=data.get("full_match", True),
            enum=tuple(data["enum"]) if "enum" in data else None,
            member=cls.from_json(member) if member else None,
        )


@cache
def _api_table() -> dict[str, Any]:
    return json.loads(API_TABLE.read_text())


def constraint(member: str) -> Constraint:
    """The limits of one API member; KeyError naming the regeneration command when the table lacks it."""
    try:
        return Constraint.from_json(_api_table()["members"][member])
    except KeyError:
        raise KeyError(f"{member} is not in {API_TABLE.name}; run `python -m generators.aws_tables`") from None


@cache
def _resource_types() -> dict[str, Any]:
    return json.loads(RESOURCE_TYPES_TABLE.read_text())


def resource_types_source() -> str:
    return _resource_types()["source"]


def published_regions() -> frozenset[str]:
    """Regions whose CloudFormation resource list the table has. cfn-lint has none for some regions the CDK knows,
    and for others ships a copy of us-east-1's (it cannot read their registry): neither is a list to check against."""
    table = _resource_types()
    return frozenset(table["missing"]) - frozenset(table["unpublished"])


def missing_resource_types(region: str, types: set[str]) -> list[str]:
    """Those of `types` that CloudFormation does not offer in `region` (sorted). Custom resources (`Custom::*`) are
    Lambda functions, always available. ValueError for a type outside RESOURCE_NAMESPACES or an unknown region."""
    table = _resource_types()
    if region not in published_regions():
        raise ValueError(f"no CloudFormation resource list for region {region!r} in {RESOURCE_TYPES_TABLE.name}")
    unknown = sorted(t for t in types if not t.startswith("Custom::") and t not in table["types"])
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: not in {RESOURCE_TYPES_TABLE.name} (a namespace outside RESOURCE_NAMESPACES, or a "
            "type cfn-lint does not know); add it to core/api_limits/aws_tables.py and run "
            "`python -m generators.aws_tables`"
        )
    return sorted(set(types) & set(table["missing"][region]))
