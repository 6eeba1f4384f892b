"""Regenerate core/catalog/dlc_registries.json, the committed table the serving images resolve from, out of the
pinned SageMaker SDK's own image tables (sagemaker/image_uri_config/*.json) and botocore's ECR endpoints.

    .venv/bin/python scripts/generate_dlc_registries.py [--check]

What it records, per region:
- the AWS Deep Learning Containers registry: the account that holds every DLC repository there (763104351884 in
  most regions, another account in opt-in regions and other partitions) and the ECR hostname images are pulled
  from (`ecr.<region>.amazonaws.com`, `.amazonaws.com.cn` in China, other suffixes in the ISO partitions). The SDK
  states the account once per framework version; every table of the DLC repositories must agree on it, or this
  script stops rather than guess.
- for the djl-inference repository (the LMI images), the regions the SDK lists for each tag it knows: a tag is not
  published in every region the registry exists in (an image is not copied to regions that launch after it).

So a tag newer than the pinned SDK knows resolves anyway (core/catalog/images.py names the tag whose regions it
shares), in every partition, without waiting for an SDK release. Synth only reads the JSON; a test re-runs this
script and fails when the committed table differs from what the installed SDK says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parents[1] / "core" / "catalog" / "dlc_registries.json"
# The account that holds the DLC repositories in us-east-1: a table entry with it there is a DLC repository (the
# older sagemaker-* framework images live in other accounts).
DLC_ACCOUNT_US_EAST_1 = "763104351884"
# The repositories whose per-tag regions the table keeps: the LMI images the endpoints run.
PUBLISHED_REPOSITORIES = ("djl-inference",)


def _entries(node: Any, repository: str | None = None):
    """(repository, tag prefix, {region: account}) for every version entry of one SDK table, at any depth."""
    if isinstance(node, dict):
        repository = node.get("repository", repository)
        if isinstance(node.get("registries"), dict):
            yield repository, node.get("tag_prefix"), node["registries"]
        for key, value in node.items():
            if key != "registries":
                yield from _entries(value, repository)


def build() -> dict[str, Any]:
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    import botocore
    import sagemaker
    from sagemaker import image_uris, utils

    tables = Path(image_uris.__file__).parent / "image_uri_config"
    accounts: dict[str, dict[str, str]] = {}  # region -> account -> the first table that said so
    published: dict[str, dict[str, list[str]]] = {name: {} for name in PUBLISHED_REPOSITORIES}
    for path in sorted(tables.glob("*.json")):
        for repository, tag, registries in _entries(json.loads(path.read_text())):
            if registries.get("us-east-1") != DLC_ACCOUNT_US_EAST_1:
                continue
            for region, account in registries.items():
                accounts.setdefault(region, {}).setdefault(account, f"{path.name} ({repository})")
            if repository in published and tag:
                regions = published[repository].setdefault(tag, [])
                regions[:] = sorted(set(regions) | set(registries))
    resolver = utils._botocore_resolver()
    registries = {}
    for region, found in sorted(accounts.items()):
        if len(found) != 1:
            raise SystemExit(f"{region}: the SDK's DLC tables disagree on the registry account: {found}")
        (account,) = found
        endpoint = resolver.construct_endpoint("ecr", region)
        if not endpoint:
            raise SystemExit(f"{region}: botocore {botocore.__version__} has no ECR endpoint for it")
        registries[region] = {"account": account, "hostname": endpoint["hostname"]}
    return {
        "source": f"sagemaker {sagemaker.__version__} image_uri_config, botocore {botocore.__version__} ECR endpoints",
        "command": "python scripts/generate_dlc_registries.py",
        "registries": registries,
        "published": {name: dict(sorted(tags.items())) for name, tags in published.items()},
    }


def render(table: dict[str, Any]) -> str:
    """One region or tag a line: reviewable diffs when the SDK moves."""
    lines = ["{", f'  "source": {json.dumps(table["source"])},', f'  "command": {json.dumps(table["command"])},']
    lines.append('  "registries": {')
    regions = list(table["registries"].items())
    for i, (region, registry) in enumerate(regions):
        comma = "," if i < len(regions) - 1 else ""
        lines.append(f"    {json.dumps(region)}: {json.dumps(registry)}{comma}")
    lines += ["  },", '  "published": {']
    repositories = list(table["published"].items())
    for i, (repository, tags) in enumerate(repositories):
        lines.append(f"    {json.dumps(repository)}: {{")
        items = list(tags.items())
        for j, (tag, regions) in enumerate(items):
            comma = "," if j < len(items) - 1 else ""
            lines.append(f"      {json.dumps(tag)}: {json.dumps(regions)}{comma}")
        lines.append("    }" + ("," if i < len(repositories) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed table differs")
    args = parser.parse_args()
    text = render(build())
    if args.check:
        if TABLE.read_text() != text:
            sys.exit(f"{TABLE} is stale; run python scripts/generate_dlc_registries.py")
        return
    TABLE.write_text(text)
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
