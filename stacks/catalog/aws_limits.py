"""What AWS accepts, as committed tables: the limits of the API members the config reaches, and the CloudFormation
resource types of each region.

    python -m stacks.catalog.aws_limits        # regenerate both tables from the installed botocore and cfn-lint

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
        raise KeyError(f"{member} is not in {API_TABLE.name}; run `python -m stacks.catalog.aws_limits`") from None


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
            "type cfn-lint does not know); add it to stacks/catalog/aws_limits.py and run "
            "`python -m stacks.catalog.aws_limits`"
        )
    return sorted(set(types) & set(table["missing"][region]))


# --- generation (development only: botocore and cfn-lint are read here, never at synth) -------------------------


@cache
def _botocore_model(service: str) -> dict[str, Any]:
    import botocore.loaders

    return botocore.loaders.Loader().load_service_model(service, "service-2")


def _botocore_member(service: str, operation: str, path: str) -> dict[str, Any]:
    import botocore

    model = _botocore_model(service)
    shapes = model["shapes"]

    def describe(name: str) -> dict[str, Any]:
        shape = shapes[name]
        entry: dict[str, Any] = {
            "source": f"botocore {botocore.__version__}, {service} shape {name}",
            "type": shape["type"],
        }
        for key in ("min", "max", "pattern", "enum"):
            if key in shape:
                entry[key] = shape[key]
        if shape["type"] == "list":
            entry["member"] = describe(shape["member"]["shape"])
        elif shape["type"] == "map":
            entry["member"] = describe(shape["value"]["shape"])
        return entry

    name = model["operations"][operation]["input"]["shape"]
    for part in path.split("."):
        while shapes[name]["type"] in ("list", "map"):
            name = shapes[name]["member" if shapes[name]["type"] == "list" else "value"]["shape"]
        name = shapes[name]["members"][part]["shape"]
    return describe(name)


def _cfn_schema(resource_type: str, region: str = "us-east-1") -> dict[str, Any]:
    schemas = _cfn_lint_schemas()
    providers = json.loads((schemas / "providers" / f"{region}.json").read_text())
    return json.loads((schemas / "resources" / f"{providers[resource_type]}.json").read_text())


def _cfn_lint_schemas() -> Path:
    import cfnlint

    return Path(cfnlint.__file__).parent / "data" / "schemas"


def _cfn_member(resource_type: str, path: str) -> dict[str, Any]:
    import cfnlint.version

    schema = _cfn_schema(resource_type)
    source = f"cfn-lint {cfnlint.version.__version__}, CloudFormation schema of {resource_type}"

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].removeprefix("#/definitions/")]
        return node

    def describe(node: dict[str, Any]) -> dict[str, Any]:
        node = resolve(node)
        kind = node.get("type", "object")
        entry: dict[str, Any] = {"source": source, "type": kind, "full_match": False}
        for ours, theirs in (("min", "minLength"), ("max", "maxLength"), ("min", "minimum"), ("max", "maximum")):
            if theirs in node:
                entry[ours] = node[theirs]
        for ours, theirs in (("min", "minItems"), ("max", "maxItems")):
            if theirs in node:
                entry[ours] = node[theirs]
        if "pattern" in node:
            entry["pattern"] = node["pattern"]
        if "enum" in node:
            entry["enum"] = node["enum"]
        if kind == "array":
            entry["member"] = describe(node["items"])
        return entry

    node: dict[str, Any] = {"properties": schema["properties"]}
    for part in path.split("."):
        node = resolve(node)
        while node.get("type") == "array":
            node = resolve(node["items"])
        node = node["properties"][part]
    return describe(node)


def generate_api_table(members: list[str]) -> dict[str, Any]:
    entries = {}
    for member in sorted(set(members)):
        service, rest = member.split(":", 1)
        if service == "cfn":
            resource_type, path = rest.rsplit(":", 1)
            entries[member] = _cfn_member(resource_type, path)
        else:
            operation, path = rest.split(":", 1)
            entries[member] = _botocore_member(service, operation, path)
    return {"members": entries}


def generate_resource_types_table() -> dict[str, Any]:
    import cfnlint.version

    schemas = _cfn_lint_schemas()
    files = {p.stem: p for p in (schemas / "providers").glob("*.json") if p.stem != "sam"}
    reference = files["us-east-1"].read_bytes()
    by_region = {region: set(json.loads(path.read_text())) for region, path in files.items()}
    types = sorted({t for found in by_region.values() for t in found if t.startswith(RESOURCE_NAMESPACES)})
    # cfn-lint writes a copy of us-east-1's list for the regions whose CloudFormation registry it cannot read.
    unpublished = sorted(r for r, p in files.items() if r != "us-east-1" and p.read_bytes() == reference)
    schema_date = json.loads((schemas / "version.json").read_text())["schema_date"]
    return {
        "source": f"cfn-lint {cfnlint.version.__version__} provider schemas of {schema_date}",
        "types": types,
        "unpublished": unpublished,
        "missing": {region: sorted(set(types) - found) for region, found in sorted(by_region.items())},
    }


def write_tables() -> None:
    from stacks import api_limits

    API_TABLE.write_text(json.dumps(generate_api_table(api_limits.api_members()), indent=1, sort_keys=True) + "\n")
    RESOURCE_TYPES_TABLE.write_text(json.dumps(generate_resource_types_table(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_tables()
