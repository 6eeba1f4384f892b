"""The synthesized cloud assembly of one stage, and template values resolved against what was deployed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StackTemplate:
    stack_name: str  # the CloudFormation stack name, e.g. llm-platform-staging-storage
    display_name: str  # the CDK path, e.g. staging/Storage
    template: dict[str, Any]
    assets_file: Path | None

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template.get("Resources", {})

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    def path_of(self, logical_id: str) -> str:
        """The construct path (`staging/Serving/Endpoint/Model`), which says more than a logical id."""
        return self.resources[logical_id].get("Metadata", {}).get("aws:cdk:path", f"{self.display_name}/{logical_id}")


def read_stage(assembly_dir: Path, stage: str) -> list[StackTemplate]:
    """The stacks of `stage` in the assembly `cdk synth -o assembly_dir` wrote (in the manifest's order)."""
    stage_dir = assembly_dir / f"assembly-{stage}"
    manifest_path = stage_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} is missing: did `cdk synth -c stage={stage}` write {assembly_dir}?")
    manifest = json.loads(manifest_path.read_text())
    stacks = []
    for artifact_id, artifact in manifest["artifacts"].items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        properties = artifact["properties"]
        assets = stage_dir / f"{artifact_id}.assets.json"
        stacks.append(
            StackTemplate(
                stack_name=properties.get("stackName", artifact_id),
                display_name=artifact.get("displayName", artifact_id),
                template=json.loads((stage_dir / properties["templateFile"]).read_text()),
                assets_file=assets if assets.is_file() else None,
            )
        )
    return stacks


def file_assets(stack: StackTemplate, *, account: str, region: str) -> list[tuple[str, str]]:
    """(bucket, key) of every file asset (code zips, the template itself) the stack's deploy publishes."""
    if stack.assets_file is None:
        return []
    manifest = json.loads(stack.assets_file.read_text())
    placeholders = {"${AWS::AccountId}": account, "${AWS::Region}": region, "${AWS::Partition}": "aws"}
    found = []
    for asset in manifest.get("files", {}).values():
        for destination in asset["destinations"].values():
            bucket = destination["bucketName"]
            for placeholder, value in placeholders.items():
                bucket = bucket.replace(placeholder, value)
            found.append((bucket, destination["objectKey"]))
    return found


# --- custom resources ----------------------------------------------------------------------------------------

CUSTOM_RESOURCE = re.compile(r"^(Custom::.+|AWS::CloudFormation::CustomResource)$")


@dataclass(frozen=True)
class CustomAttributeUse:
    """A value that only a custom resource's handler can produce, and where the template uses it."""

    where: str  # `staging/Serving/Endpoint/Model: PrimaryContainer.ModelDataUrl` or `output InferenceCodeUri`
    source: str  # `staging/Serving/InferenceCode/Archive.Uri (Custom::CodePackage)`
    user_type: str  # the type of the resource using it, or "output"


def custom_attribute_uses(stack: StackTemplate) -> list[CustomAttributeUse]:
    """Every Fn::GetAtt (or ${X.Attr} in Fn::Sub) of a custom resource, in resource properties and outputs."""
    custom = {lid: r["Type"] for lid, r in stack.resources.items() if CUSTOM_RESOURCE.match(r["Type"])}
    uses = []
    for logical_id, resource in stack.resources.items():
        for path, target, attribute in _getatts(resource.get("Properties", {}), ""):
            if target in custom:
                uses.append(
                    CustomAttributeUse(
                        where=f"{stack.path_of(logical_id)}: {path}",
                        source=f"{stack.path_of(target)}.{attribute} ({custom[target]})",
                        user_type=resource["Type"],
                    )
                )
    for output_id, output in stack.template.get("Outputs", {}).items():
        for _, target, attribute in _getatts(output.get("Value"), ""):
            if target in custom:
                uses.append(
                    CustomAttributeUse(
                        where=f"{stack.display_name} output {output_id}",
                        source=f"{stack.path_of(target)}.{attribute} ({custom[target]})",
                        user_type="output",
                    )
                )
    return uses


def _getatts(value: Any, path: str) -> Iterator[tuple[str, str, str]]:
    """(property path, logical id, attribute) of every Fn::GetAtt and Fn::Sub `${Id.Attr}` inside `value`."""
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            logical_id, attribute = target.split(".", 1) if isinstance(target, str) else target
            yield path, logical_id, attribute
            return
        if "Fn::Sub" in value:
            text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
            for match in re.finditer(r"\$\{([A-Za-z0-9]+)\.([A-Za-z0-9.]+)\}", text):
                yield path, match.group(1), match.group(2)
        for key, item in value.items():
            is_intrinsic = key.startswith("Fn::") or key == "Ref"
            yield from _getatts(item, path if is_intrinsic else f"{path}.{key}".lstrip("."))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _getatts(item, f"{path}[{index}]")


# --- resolving template values ------------------------------------------------------------------------------


class Unresolvable(Exception):
    """A template value that depends on something the resolver cannot know (e.g. a custom resource's data)."""


@dataclass
class Resolver:
    """Evaluates the intrinsic functions the CDK writes (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split,
    Fn::ImportValue) against one deployed stack, so a template value can be compared with what the emulator holds.

    Args:
        physical_ids: logical id -> physical id of the stack's resources.
        types: logical id -> resource type.
        exports: export name -> value in the region.
        pseudo: AWS::AccountId, AWS::Region, AWS::Partition, AWS::URLSuffix, AWS::StackName.
        attribute: (type, physical id, attribute) -> value, for Fn::GetAtt; raises Unresolvable when unknown.
    """

    physical_ids: dict[str, str]
    types: dict[str, str]
    exports: dict[str, str]
    pseudo: dict[str, str]
    attribute: Callable[[str, str, str], str]
    _cache: dict[tuple[str, str], str] = field(default_factory=dict)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            [(name, argument)] = value.items()
            if name == "Ref":
                return self._ref(argument)
            if name == "Fn::GetAtt":
                logical_id, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
                return self._getatt(logical_id, attribute)
            if name == "Fn::Join":
                separator, parts = argument
                return separator.join(str(self.resolve(p)) for p in parts)
            if name == "Fn::ImportValue":
                export = self.resolve(argument)
                if export not in self.exports:
                    raise Unresolvable(f"no export named {export}")
                return self.exports[export]
            if name == "Fn::Select":
                index, items = argument
                return self.resolve(items)[int(self.resolve(index))]
            if name == "Fn::Split":
                separator, text = argument
                return str(self.resolve(text)).split(separator)
            if name == "Fn::Sub":
                return self._sub(argument)
            if name.startswith("Fn::"):
                raise Unresolvable(f"{name} is not evaluated by the rehearsal")
        return {k: self.resolve(v) for k, v in value.items()}

    def _ref(self, name: str) -> str:
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.physical_ids:
            return self.physical_ids[name]
        raise Unresolvable(f"Ref {name}: not a resource of the stack or a known pseudo parameter")

    def _getatt(self, logical_id: str, attribute: str) -> str:
        if logical_id not in self.physical_ids:
            raise Unresolvable(f"Fn::GetAtt {logical_id}.{attribute}: no such resource in the stack")
        resource_type = self.types[logical_id]
        if CUSTOM_RESOURCE.match(resource_type):
            raise Unresolvable(f"{logical_id}.{attribute} comes from a custom resource ({resource_type})")
        key = (logical_id, attribute)
        if key not in self._cache:
            self._cache[key] = self.attribute(resource_type, self.physical_ids[logical_id], attribute)
        return self._cache[key]

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        values = {k: str(self.resolve(v)) for k, v in variables.items()}

        def replace(match: re.Match) -> str:
            name = match.group(1)
            if name in values:
                return values[name]
            if "." in name:
                return str(self._getatt(*name.split(".", 1)))
            return str(self._ref(name))

        return re.sub(r"\$\{([^!}][^}]*)\}", replace, text)
