"""moto's server, with the fixes a multi-stack CDK app needs to deploy through CloudFormation change sets.

    .venv/bin/python -m rehearsal.emulator --port 5000     # binds 127.0.0.1 only; `server.py` starts it

moto 5.2.5 emulates CloudFormation's CreateStack well, but `cdk deploy` uses change sets, and there moto falls
short in ways that stop our stacks before anything can be checked. Each fix below corrects moto to what
CloudFormation does; nothing in the stacks or the templates is changed. `FIXES` describes them for the report.
The fixes reach into moto's internals, so they are tied to the pinned moto version (checked in `apply`), and
tests/rehearsal/test_emulator.py shows each one is still needed.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MOTO_VERSION = "5.2.5"

FIXES = {
    "kms-key-from-template": (
        "AWS::KMS::Key: moto hands CloudFormation's Tags ({Key, Value}) to its KMS tagger, which expects "
        "{TagKey, TagValue}, so a tagged key fails its whole stack (KeyError 'TagKey'); and it stores KeyPolicy as "
        "an object, so DescribeKey answers HTTP 500. Fixed: tags translated, the policy kept as JSON text."
    ),
    "change-set-outputs": (
        "Change sets: a stack created or updated by ExecuteChangeSet gets no outputs and registers no exports "
        "(moto builds them only in CreateStack/UpdateStack), so every cross-stack reference fails. Fixed: after a "
        "change set runs, its stack's outputs are rebuilt from the new template and its exports replace the old."
    ),
    "imports-in-change-sets": (
        "Imports: a stack created by CreateChangeSet resolves Fn::ImportValue against an empty table ('No export "
        "named ... found'). Fixed: every stack resolves imports against the region's exports."
    ),
}


def apply() -> Callable[[], None]:
    """Patch moto in this process; returns a function that undoes every patch."""
    import moto
    from moto.cloudformation import models as cloudformation
    from moto.kms.models import Key

    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(
            f"rehearsal/emulator.py patches moto {MOTO_VERSION} internals, but moto {moto.__version__} is installed: "
            "run tests/rehearsal/test_emulator.py, drop the fixes moto no longer needs, adapt the rest, then update "
            "MOTO_VERSION and the pin in requirements/dev.in"
        )
    originals = [
        (Key, "create_from_cloudformation_json", Key.__dict__["create_from_cloudformation_json"]),
        (cloudformation.ChangeSet, "apply", cloudformation.ChangeSet.apply),
        (cloudformation.Stack, "_create_resource_map", cloudformation.Stack._create_resource_map),
    ]
    create_key = Key.create_from_cloudformation_json.__func__
    apply_change_set = cloudformation.ChangeSet.apply
    create_resource_map = cloudformation.Stack._create_resource_map

    def key_from_template(cls, resource_name: str, cloudformation_json: dict[str, Any], *args: Any, **kwargs: Any):
        fixed = copy.deepcopy(cloudformation_json)
        properties = fixed.setdefault("Properties", {})
        if isinstance(properties.get("KeyPolicy"), dict):
            properties["KeyPolicy"] = json.dumps(properties["KeyPolicy"])
        properties["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in properties.get("Tags", [])]
        return create_key(cls, resource_name, fixed, *args, **kwargs)

    def apply_with_outputs(change_set: Any) -> None:
        apply_change_set(change_set)
        stack = change_set.stack
        backend = cloudformation.cloudformation_backends[stack.account_id][stack.region_name]
        for name in [n for n, e in backend.exports.items() if e.exporting_stack_id == stack.stack_id]:
            del backend.exports[name]
        stack.template = change_set.template
        stack._parse_template()
        stack.output_map = stack._create_output_map()
        backend._validate_export_uniqueness(stack)
        for export in stack.exports:
            backend.exports[export.name] = export

    def resource_map_seeing_exports(stack: Any) -> Any:
        # The region's live export table, not a copy: stacks deployed later see exports added since.
        stack.cross_stack_resources = cloudformation.cloudformation_backends[stack.account_id][
            stack.region_name
        ].exports
        return create_resource_map(stack)

    Key.create_from_cloudformation_json = classmethod(key_from_template)
    cloudformation.ChangeSet.apply = apply_with_outputs
    cloudformation.Stack._create_resource_map = resource_map_seeing_exports

    def undo() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)

    return undo


@contextmanager
def patched() -> Iterator[None]:
    """moto with the fixes, for the duration of a `with` block (tests use moto in-process)."""
    undo = apply()
    try:
        yield
    finally:
        undo()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto's server on 127.0.0.1, with the rehearsal's fixes")
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    args = parser.parse_args(argv)
    apply()
    from moto.server import main as moto_server

    moto_server(["--host", "127.0.0.1", "--port", str(args.port)])


if __name__ == "__main__":
    main()
