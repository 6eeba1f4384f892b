"""The committed tables of what AWS accepts, regenerated from the installed botocore, cfn-lint and CDK
(development only: synth reads only the tables): the API limits and per-region resource types of
core/api_limits/aws_tables.py, and the regions the config accepts (core/catalog/regions.json).

    python -m generators.aws_tables
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import botocore
import botocore.loaders
import cfnlint
import cfnlint.version
from aws_cdk.region_info import RegionInfo

from core import api_limits
from core.api_limits.aws_tables import API_TABLE, RESOURCE_NAMESPACES, RESOURCE_TYPES_TABLE
from core.config.fields import REGIONS_TABLE


@cache
def _botocore_model(service: str) -> dict[str, Any]:

    return botocore.loaders.Loader().load_service_model(service, "service-2")


def _botocore_member(service: str, operation: str, path: str) -> dict[str, Any]:

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

    return Path(cfnlint.__file__).parent / "data" / "schemas"


def _cfn_member(resource_type: str, path: str) -> dict[str, Any]:

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


def generate_regions_table() -> dict[str, str]:
    """Region name -> partition, from the CDK's region facts (aws_cdk.region_info): what the config accepts."""

    return {r.name: r.partition for r in RegionInfo.regions if r.partition}


def write_tables() -> None:
    API_TABLE.write_text(json.dumps(generate_api_table(api_limits.api_members()), indent=1, sort_keys=True) + "\n")
    RESOURCE_TYPES_TABLE.write_text(json.dumps(generate_resource_types_table(), indent=1, sort_keys=True) + "\n")
    REGIONS_TABLE.write_text(json.dumps(generate_regions_table(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_tables()
