"""Synthesize the CDK app the way app.py does and read back the cloud assembly, for tests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class ReadOnlyDict(dict):
    """A template's mapping that refuses changes: session fixtures share one assembly among many tests, so a test
    that edited what it read would change what the tests after it see (and only when they share its worker)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("assembly templates are shared by every test: copy before changing (copy.deepcopy)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return json.loads(json.dumps(self))


class ReadOnlyList(list):
    """A template's list that refuses changes (see ReadOnlyDict)."""

    _refuse = ReadOnlyDict._refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = _refuse
    sort = reverse = _refuse

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return json.loads(json.dumps(self))


def read_only(value: Any) -> Any:
    """Parsed JSON as ReadOnlyDict/ReadOnlyList values: equal to plain dicts and lists, and serialized alike."""
    if isinstance(value, dict):
        return ReadOnlyDict((k, read_only(v)) for k, v in value.items())
    if isinstance(value, list):
        return ReadOnlyList(read_only(v) for v in value)
    return value


@dataclass
class Assembly:
    """A synthesized cloud assembly: templates and construct metadata by stage and stack id."""

    outdir: Path
    templates: dict[str, dict[str, dict[str, Any]]]  # stage -> stack id ("Storage") -> template
    metadata: dict[str, dict[str, dict[str, list]]]  # stage -> stack id -> construct path -> entries
    error: str | None  # set when synthesis raised (e.g. unsuppressed cdk-nag findings)

    def template(self, stage: str, stack: str) -> dict[str, Any]:
        return self.templates[stage][stack]

    def resources(self, stage: str, stack: str, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template(stage, stack)["Resources"].items() if v["Type"] == type_}

    def findings(self, kind: str = "aws:cdk:error") -> list[str]:
        """Annotations of `kind` (cdk-nag reports unsuppressed findings as errors) as `path: message` lines."""
        return [
            f"{path}: {entry['data']}"
            for stacks in self.metadata.values()
            for paths in stacks.values()
            for path, entries in paths.items()
            for entry in entries
            if entry["type"] == kind
        ]


def cdk_context() -> dict[str, Any]:
    """The feature flags from cdk.json, so tests synthesize exactly what the CLI does."""
    return json.loads((REPO / "cdk.json").read_text())["context"]


def synthesize(config_path: Path, outdir: Path, *, release: str = "", only_stage: str | None = None) -> Assembly:
    """Build the app the way app.py does (cdk-nag included) and read back what it wrote."""
    import app as cdk_app
    from core.config import load_config
    from infrastructure import template_validation

    app = template_validation.new_app(context=cdk_context(), outdir=str(outdir))
    config = load_config(config_path, only_stage=only_stage)
    cdk_app.build_app(app, config, config_path=cdk_app.relative_to_repo(config_path), release=release)
    template_validation.install(app)
    error = None
    try:
        app.synth()
    except RuntimeError as err:  # cdk-nag errors fail synthesis through the validation report
        error = str(err)
    return read_assembly(outdir, error)


APP = "(app)"  # the stage name under which stacks at the top of the app (the pipeline) are filed


def read_assembly(outdir: Path, error: str | None = None) -> Assembly:
    templates: dict[str, dict[str, dict]] = {}
    metadata: dict[str, dict[str, dict]] = {}
    for stage_dir in [outdir, *sorted(outdir.glob("assembly-*"))]:
        stage = APP if stage_dir == outdir else stage_dir.name.removeprefix("assembly-")
        manifest = json.loads((stage_dir / "manifest.json").read_text())
        for artifact in manifest["artifacts"].values():
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            stack_id = artifact["displayName"].split("/")[-1]
            templates.setdefault(stage, {})[stack_id] = read_only(
                json.loads((stage_dir / artifact["properties"]["templateFile"]).read_text())
            )
            metadata.setdefault(stage, {})[stack_id] = read_only(artifact.get("metadata", {}))
    return Assembly(outdir, templates, metadata, error)


# --- reading templates --------------------------------------------------------------------------------------

_LOGICAL_ID_HASH = re.compile(r"^(.*?)[0-9A-F]{8}$")


def short_id(logical_id: str) -> str:
    """`Data666C94C7` -> `Data`: logical ids without the CDK's hash suffix."""
    match = _LOGICAL_ID_HASH.match(logical_id)
    return match.group(1) if match else logical_id


def render(value: Any) -> Any:
    """CloudFormation intrinsics as readable strings: {"Fn::GetAtt": ["Data666C94C7", "Arn"]} -> "<Data.Arn>"."""
    if isinstance(value, list):
        return [render(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "Fn::GetAtt" in value:
        logical_id, attribute = value["Fn::GetAtt"]
        return f"<{short_id(logical_id)}.{attribute}>"
    if "Ref" in value:
        return f"<{short_id(value['Ref'])}>"
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(render(p)) for p in parts)
    return {k: render(v) for k, v in value.items()}


def normalize_hashes(text: str) -> str:
    """Asset hashes change with unrelated code and CDK versions; snapshots compare everything else. That includes the
    8-digit tail of an asset's publishing destination (`<account>-<region>-<hash>` in cdk-assets commands)."""
    text = re.sub(r"[0-9a-f]{64}", "<ASSET_HASH>", text)
    return re.sub(r"\b(\d{12}-[a-z]{2}(?:-[a-z]+)+-\d)-[0-9a-f]{8}\b", r"\1-<HASH8>", text)
