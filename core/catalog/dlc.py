"""AWS Deep Learning Containers: where their registry is in each region, and which LMI tags are published where.

Read from dlc_registries.json, which scripts/generate_dlc_registries.py writes from the pinned SageMaker SDK's own
image tables and botocore's ECR endpoints (a test re-runs it). The SDK states one registry account per region for
every DLC repository, so a tag the SDK does not know yet still has an address in every region and partition: the
SDK's table no longer decides which LMI release the endpoints run (core/catalog/images.py does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parent / "dlc_registries.json"


@dataclass(frozen=True)
class Registry:
    account: str
    hostname: str  # ecr.<region>.amazonaws.com, .amazonaws.com.cn in China, other suffixes in the ISO partitions


@cache
def _table() -> dict[str, Any]:
    return json.loads(TABLE.read_text())


def source() -> str:
    return _table()["source"]


def registry(region: str) -> Registry:
    """The DLC registry of `region`; ValueError naming the regions that have one when it has none."""
    registries = _table()["registries"]
    if region not in registries:
        raise ValueError(
            f"{region} has no AWS Deep Learning Containers registry ({source()} name none there); regions with one: "
            f"{', '.join(sorted(registries))}"
        )
    return Registry(**registries[region])


def published_regions(repository: str, tag: str) -> frozenset[str]:
    """The regions the SDK lists `repository:tag` in; KeyError when it does not know the tag."""
    try:
        return frozenset(_table()["published"][repository][tag])
    except KeyError:
        raise KeyError(
            f"{repository}:{tag} is not in {TABLE.name} ({source()}); name the published tag whose regions it shares, "
            "or regenerate the table with `python scripts/generate_dlc_registries.py` after upgrading the SDK"
        ) from None


def image_uri(region: str, repository: str, tag: str, *, regions_of: str | None = None) -> str:
    """`<account>.dkr.<ecr hostname>/<repository>:<tag>` in `region`.

    `regions_of`: for a tag newer than the SDK's tables, the published tag whose regions it goes to (a DLC release is
    published to the regions of the one before it). ValueError when the region has no registry, or the tag is not
    published there."""
    where = registry(region)
    regions = published_regions(repository, regions_of or tag)
    if region not in regions:
        raise ValueError(
            f"{repository}:{tag} is not published in {region} (the DLC registry there does not carry it, per "
            f"{source()}); regions that have it: {', '.join(sorted(regions))}"
        )
    return f"{where.account}.dkr.{where.hostname}/{repository}:{tag}"
