"""The architecture, drawn from a synthesized cloud assembly as Mermaid diagrams in one Markdown page.

    python -m generators.diagram ASSEMBLY > docs/architecture.md      (make diagram)

Drawn from the templates, not by hand, so it shows what `cdk deploy` creates: every stage and its stacks with the
order they deploy in, then one stage's resources and what refers to what. An IAM policy is drawn as its role's
access (role -> the buckets, keys and resources its statements name); the Lambda functions, roles and log groups
that run custom resources, and bucket policies, are left out to keep the picture readable. A test regenerates the page.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Resource types worth a box, and how to call them. Everything else is plumbing.
SHOWN = {
    "AWS::S3::Bucket": "S3 bucket",
    "AWS::KMS::Key": "KMS key",
    "AWS::IAM::Role": "IAM role",
    "AWS::SageMaker::Pipeline": "SageMaker pipeline",
    "AWS::SageMaker::ModelPackageGroup": "model package group",
    "AWS::SageMaker::Model": "SageMaker model",
    "AWS::SageMaker::EndpointConfig": "endpoint config",
    "AWS::SageMaker::Endpoint": "SageMaker endpoint",
    "Custom::CodePackage": "code archive",
    "AWS::SNS::Topic": "SNS topic",
    "AWS::CloudWatch::Dashboard": "dashboard",
    "AWS::CloudWatch::Alarm": "alarms",
    "AWS::Events::Rule": "EventBridge rule",
    "AWS::Events::EventBus": "event bus",
    "Custom::AWS": "lookup",
}
GROUPED = {"AWS::CloudWatch::Alarm"}  # several of these in a stack are one box
HEADER = """# Architecture

Generated from the synthesized default config by `make diagram` (generators/diagram.py); a test fails when it is out of
date. Boxes are CloudFormation resources, arrows are references in the templates (an IAM role points at what its
policies let it use; a dotted arrow crosses stacks). Custom-resource plumbing (Lambda functions and their roles and
log groups) and bucket policies are left out.
"""


class Stack:
    """One synthesized stack: its template, where it deploys and which stacks it waits for."""

    def __init__(
        self,
        stage: str,
        name: str,
        template: dict[str, Any],
        environment: str,
        depends_on: list[str],
        paths: dict[str, str],
    ):
        self.stage, self.name, self.template = stage, name, template
        self.environment = environment.removeprefix("aws://")
        self.depends_on = depends_on
        self.paths = paths  # logical id -> construct path
        self.resources: dict[str, dict[str, Any]] = template.get("Resources", {})

    @property
    def node(self) -> str:
        return _node_id(self.stage, self.name)


def read_stacks(outdir: Path) -> list[Stack]:
    """Every stack of the assembly in manifest order; stacks of nested stage assemblies are filed under the stage."""
    stacks: list[Stack] = []
    manifest = json.loads((outdir / "manifest.json").read_text())
    for artifact_id, artifact in manifest["artifacts"].items():
        if artifact["type"] == "cdk:cloud-assembly":
            stacks += read_stacks(outdir / artifact["properties"]["directoryName"])
        elif artifact["type"] == "aws:cloudformation:stack":
            stage, _, name = artifact.get("displayName", artifact_id).rpartition("/")
            template = json.loads((outdir / artifact["properties"]["templateFile"]).read_text())
            names = {a_id: a.get("displayName", a_id) for a_id, a in manifest["artifacts"].items()}
            depends = [names[d].rpartition("/")[2] for d in artifact.get("dependencies", []) if d in names]
            depends = [d for d in depends if not d.endswith(".assets")]
            environment = artifact.get("environment", "")
            stacks.append(Stack(stage or "(app)", name, template, environment, depends, _paths(outdir, artifact)))
    return stacks


def _paths(outdir: Path, artifact: dict[str, Any]) -> dict[str, str]:
    """Construct paths by logical id, from the stack's metadata (in the manifest, or beside it since CDK 2.1xx)."""
    metadata = dict(artifact.get("metadata", {}))
    if "additionalMetadataFile" in artifact:
        metadata.update(json.loads((outdir / artifact["additionalMetadataFile"]).read_text()))
    return {
        entry["data"]: path.lstrip("/")
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == "aws:cdk:logicalId"
    }


def render(outdir: Path) -> str:
    stacks = read_stacks(outdir)
    stages = list(dict.fromkeys(s.stage for s in stacks))
    detailed = next(s for s in stages if s != "(app)")
    parts = [
        HEADER,
        "## Stages and stacks\n",
        "Each stage deploys to its own account and region; within a stage, an arrow points at the stack that must "
        "deploy first.\n",
        _mermaid(_overview(stacks)),
        f"## Inside a stage ({detailed})\n",
        "Every stage has the same resources; instance types, retention and alarms differ by config.\n",
        _mermaid(_detail([s for s in stacks if s.stage == detailed])),
    ]
    return "\n".join(parts)


def _overview(stacks: list[Stack]) -> Iterator[str]:
    yield "flowchart LR"
    for stage, members in _group(stacks, lambda s: s.stage).items():
        environment = members[0].environment
        yield f'  subgraph {_node_id(stage)}["{stage} · {environment}"]'
        for stack in members:
            yield f'    {stack.node}["{stack.name}<br/>{_summary(stack)}"]'
        yield "  end"
    for stack in stacks:
        for dependency in stack.depends_on:
            yield f"  {stack.node} --> {_node_id(stack.stage, dependency)}"


def _detail(stacks: list[Stack]) -> Iterator[str]:
    yield "flowchart TB"
    exports = {
        output["Export"]["Name"]: (stack, _referenced(output["Value"]))
        for stack in stacks
        for output in stack.template.get("Outputs", {}).values()
        if "Export" in output
    }
    boxes = {stack.name: _boxes(stack) for stack in stacks}
    edges: set[tuple[str, str, bool]] = set()
    for stack in stacks:
        yield f'  subgraph {stack.node}["{stack.name} stack"]'
        for node, label in sorted(set(boxes[stack.name].values())):
            yield f'    {node}["{label}"]'
        yield "  end"
        for logical_id, resource in stack.resources.items():
            source = boxes[stack.name].get(_owner(stack, logical_id))
            if source is None:
                continue
            for target_id in _referenced(resource.get("Properties", {})):
                target = boxes[stack.name].get(_owner(stack, target_id))
                if target and target != source:
                    edges.add((source[0], target[0], False))
            for name in _imports(resource.get("Properties", {})):
                other, targets = exports.get(name, (None, []))
                for target_id in targets if other else []:
                    target = boxes[other.name].get(_owner(other, target_id))
                    if target:
                        edges.add((source[0], target[0], True))
    for source, target, across in sorted(edges):
        yield f"  {source} {'-.->' if across else '-->'} {target}"


def _boxes(stack: Stack) -> dict[str, tuple[str, str]]:
    """logical id -> (node id, label) for every resource drawn; grouped types share one box."""
    boxes: dict[str, tuple[str, str]] = {}
    counts = collections.Counter(r["Type"] for r in stack.resources.values())
    for logical_id, resource in stack.resources.items():
        kind = resource["Type"]
        if kind not in SHOWN or _serves_a_custom_resource(resource):
            continue
        if kind in GROUPED:
            boxes[logical_id] = (_node_id(stack.stage, stack.name, kind), f"{counts[kind]} {SHOWN[kind]}")
        else:
            boxes[logical_id] = (
                _node_id(stack.stage, stack.name, logical_id),
                f"{_path(stack, logical_id)}<br/><i>{SHOWN[kind]}</i>",
            )
    return boxes


def _serves_a_custom_resource(resource: dict[str, Any]) -> bool:
    """A role only Lambda assumes runs a custom resource provider here: plumbing, not architecture."""
    if resource["Type"] != "AWS::IAM::Role":
        return False
    statements = resource["Properties"].get("AssumeRolePolicyDocument", {}).get("Statement", [])
    services = {s.get("Principal", {}).get("Service") for s in statements}
    return services == {"lambda.amazonaws.com"}


def _owner(stack: Stack, logical_id: str) -> str:
    """Policies are drawn as their role's access: a reference from a policy counts as one from the role."""
    resource = stack.resources.get(logical_id, {})
    if resource.get("Type") == "AWS::IAM::Policy":
        roles = _referenced(resource["Properties"].get("Roles", []))
        if len(roles) == 1:
            return roles[0]
    return logical_id


def _path(stack: Stack, logical_id: str) -> str:
    """The construct path inside the stack (`Endpoint/Model`), which is how the code names it."""
    path = stack.paths.get(logical_id, logical_id)
    parts = path.split("/")
    parts = parts[parts.index(stack.name) + 1 :] if stack.name in parts else parts
    return "/".join(p for p in parts if p not in ("Resource", "Default")) or logical_id


def _summary(stack: Stack) -> str:
    counts = collections.Counter(r["Type"] for r in stack.resources.values() if r["Type"] in SHOWN)
    return ", ".join(
        f"{n} {SHOWN[kind]}" + ("s" if n > 1 and kind not in GROUPED else "") for kind, n in sorted(counts.items())
    )


def _referenced(value: Any) -> list[str]:
    """Logical ids a template value refers to through Ref, Fn::GetAtt or Fn::Sub, in order of appearance."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str) and not inner.startswith("AWS::"):
                found.append(inner)
            elif key == "Fn::GetAtt":
                found.append(inner[0] if isinstance(inner, list) else inner.split(".")[0])
            elif key == "Fn::Sub":
                text = inner[0] if isinstance(inner, list) else inner
                found += [m.split(".")[0] for m in re.findall(r"\$\{([^!}][^}]*)\}", text) if "::" not in m]
                found += _referenced(inner[1] if isinstance(inner, list) else None)
            else:
                found += _referenced(inner)
    elif isinstance(value, list):
        for inner in value:
            found += _referenced(inner)
    return list(dict.fromkeys(found))


def _imports(value: Any) -> list[str]:
    if isinstance(value, dict):
        if isinstance(value.get("Fn::ImportValue"), str):
            return [value["Fn::ImportValue"]]
        return [name for inner in value.values() for name in _imports(inner)]
    if isinstance(value, list):
        return [name for inner in value for name in _imports(inner)]
    return []


def _group(items: list[Stack], key) -> dict[str, list[Stack]]:
    groups: dict[str, list[Stack]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _node_id(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9]", "", p) for p in parts)


def _mermaid(lines: Iterator[str]) -> str:
    return "```mermaid\n" + "\n".join(lines) + "\n```\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assembly", type=Path, help="a synthesized cloud assembly directory")
    print(render(parser.parse_args().assembly), end="")


if __name__ == "__main__":
    main()
