"""What upstream has released since the locks: the tables the project generates from botocore, cfn-lint and the
SageMaker SDK, regenerated from their newest releases and compared with the committed ones.

    make check-upstream          # a scratch venv (.venv-upstream) with the newest releases, then this script

Not part of make test: the suite checks the committed tables against the *locked* versions, so it stays green
whatever is released this week; this is the separate, deliberate look at what a bump would bring. Exit 0 when
nothing would change, 1 with every change and the commands that take it. Run it with the scratch venv's Python
and the repository on sys.path (the Makefile does).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core import api_limits  # noqa: E402
from core.api_limits import aws_tables  # noqa: E402
from core.catalog import dlc, images  # noqa: E402
from generators import aws_tables as table_generator  # noqa: E402
from scripts import generate_dlc_registries, venv_sync  # noqa: E402

# The releases the generated tables come from, and the lock that pins each.
WATCHED = {"botocore": "synth", "boto3": "synth", "sagemaker": "synth", "cfn-lint": "dev"}
# How much of one changed list a report shows before it counts the rest.
SHOWN = 8
TAKE_IT = """to take them:
  1. bump the pins in requirements/synth.in (boto3, botocore, sagemaker) or requirements/dev.in (cfn-lint)
  2. make lock
  3. .venv/bin/python -m generators.aws_tables && .venv/bin/python scripts/generate_dlc_registries.py
  4. make test, then review `git diff core/api_limits/ core/catalog/` (a new limit may make synth refuse a config it
     accepted)"""


def locked_version(name: str, lock: str) -> str | None:
    return venv_sync.locked([(REPO / "requirements" / f"{lock}.txt").read_text()]).get(name)


def version_changes() -> list[str]:
    changes = []
    for name, lock in WATCHED.items():
        newest, pinned = metadata.version(name), locked_version(name, lock)
        if newest != pinned:
            changes.append(f"{name} {pinned} -> {newest} (requirements/{lock}.txt)")
    return changes


def _shown(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def json_changes(old: Any, new: Any, path: str = "") -> Iterator[str]:
    """One line per changed leaf; lists of names as what was added and removed. `source` keys name the release a
    value came from, which changes with every bump: left out."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key == "source":
                continue
            where = f"{path}.{key}" if path else key
            if key not in new:
                yield f"{where}: removed"
            elif key not in old:
                yield f"{where}: new: {json.dumps(new[key])[:160]}"
            else:
                yield from json_changes(old[key], new[key], where)
    elif isinstance(old, list) and isinstance(new, list) and all(isinstance(x, str) for x in old + new):
        added, removed = sorted(set(new) - set(old)), sorted(set(old) - set(new))
        if added:
            yield f"{path}: + {_shown(added)}"
        if removed:
            yield f"{path}: - {_shown(removed)}"
    elif old != new:
        yield f"{path}: {json.dumps(old)} -> {json.dumps(new)}"


def table_changes() -> dict[str, list[str]]:
    """Each committed table against what the newest releases generate."""
    fresh = {
        aws_tables.API_TABLE: table_generator.generate_api_table(api_limits.api_members()),
        aws_tables.RESOURCE_TYPES_TABLE: table_generator.generate_resource_types_table(),
        dlc.TABLE: generate_dlc_registries.build(),
    }
    changes = {}
    for path, table in fresh.items():
        committed = json.loads(path.read_text())
        lines = list(json_changes(committed, table))
        if not lines and committed != table:  # a make test against the new release fails on these alone
            lines = ["no limit, type or registry changes: only the releases it records as its source"]
        changes[str(path.relative_to(REPO))] = lines
    return changes


def newer_lmi_images() -> list[str]:
    """LMI releases the newest SDK lists that are newer than the one the vLLM engine runs (catalog/images.py)."""
    from sagemaker import image_uris

    config = json.loads((Path(image_uris.__file__).parent / "image_uri_config" / "djl-lmi.json").read_text())
    current = images.SERVING_IMAGES["vllm"].tag.split("-", 1)[0]

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".") if part.isdigit())

    newer = sorted((v for v in config["versions"] if key(v) > key(current)), key=key)
    return [f"djl-lmi {version} (the vllm engine runs {current}: core/catalog/images.py)" for version in newer]


def main() -> int:
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    report = {"newer releases than the locks pin": version_changes()}
    report |= {f"{table} would change": lines for table, lines in table_changes().items()}
    report["newer LMI images"] = newer_lmi_images()
    changed = False
    for title, lines in report.items():
        if lines:
            changed = True
            print(f"{title}:")
            print("".join(f"  {line}\n" for line in lines), end="")
    if not changed:
        print("upstream matches the locks and the committed tables: nothing to take")
        return 0
    print(TAKE_IT)
    return 1


if __name__ == "__main__":
    sys.exit(main())
