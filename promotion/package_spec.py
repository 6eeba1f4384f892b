"""The promoted package's InferenceSpecification, description and metadata, made from the source package's.

Limits are CreateModelPackage's (botocore's SageMaker service model, 2017-07-24): CustomerMetadataProperties holds at
most 50 entries, each key 1-128 and each value 1-256 characters of letters, numbers, separators and _.:/=+-@; a
ModelPackageDescription is at most 1024 characters with no control characters.
"""

from __future__ import annotations

import copy
import json
import unicodedata

METADATA_ENTRIES = 50
METADATA_KEY_CHARS = 128
METADATA_VALUE_CHARS = 256
METADATA_PUNCTUATION = set("_.:/=+-@")
DESCRIPTION_CHARS = 1024
PROVENANCE_PREFIX = "source_"  # an environment entry that named the source bucket, kept as metadata
DROPPED_CONTAINER_KEYS = ("ImageDigest", "ModelDataETag")  # describe the source's image and objects, not the copies


class SpecError(Exception):
    """The source's specification names the source bucket somewhere this module does not rewrite."""


def rewrite(spec: dict, *, source_uri: str, destination_uri: str, source_bucket: str, image_uri: str):
    """(the target's InferenceSpecification, {environment key: value} moved out of it): every container runs
    `image_uri`, every string under `source_uri` names `destination_uri` instead, and environment values still naming
    the source bucket are moved out; a SpecError if the source bucket is still named anywhere."""
    spec = copy.deepcopy(spec)
    provenance: dict[str, str] = {}
    containers = []
    for container in spec.get("Containers", []):
        container = _rewritten(container, source_uri, destination_uri)
        container["Image"] = image_uri
        for key in DROPPED_CONTAINER_KEYS:
            container.pop(key, None)
        environment = container.get("Environment", {})
        for key in sorted(environment):
            if _names_bucket(environment[key], source_bucket):
                provenance[key] = environment.pop(key)
        containers.append(container)
    spec["Containers"] = containers
    if _names_bucket(json.dumps(spec), source_bucket):
        raise SpecError(
            f"the source package's InferenceSpecification names bucket {source_bucket} outside its weights prefix, "
            "its ModelDataUrl and its environment; promote a package the fine-tuning pipeline registered"
        )
    return spec, provenance


def _rewritten(value, source_uri: str, destination_uri: str):
    """`value` with every string that starts with `source_uri` starting with `destination_uri` instead."""
    if isinstance(value, str):
        return destination_uri + value[len(source_uri) :] if value.startswith(source_uri) else value
    if isinstance(value, dict):
        return {key: _rewritten(item, source_uri, destination_uri) for key, item in value.items()}
    if isinstance(value, list):
        return [_rewritten(item, source_uri, destination_uri) for item in value]
    return value


def _names_bucket(text: str, bucket: str) -> bool:
    """Whether `text` names the bucket: an s3:// URI, or an https:// address (virtual-hosted or path-style)."""
    return any(form in text for form in (f"s3://{bucket}/", f"//{bucket}.s3.", f"amazonaws.com/{bucket}/"))


def description(version: int, group: str, release: str) -> str:
    """ModelPackageDescription: which version of which group, promoted by which release (if one is named)."""
    text = f"version {version} of {group} promoted" + (f" by {release}" if release else "")
    printable = "".join(c for c in text if unicodedata.category(c)[0] != "C")
    return printable[:DESCRIPTION_CHARS]


def fitted(text: str, limit: int) -> str:
    """`text` within a metadata key's or value's characters and length (others become '_')."""
    allowed = (c if unicodedata.category(c)[0] in "LNZ" or c in METADATA_PUNCTUATION else "_" for c in text)
    return "".join(allowed)[:limit]


def metadata(ours: dict[str, str], provenance: dict[str, str], carried: dict[str, str]) -> dict[str, str]:
    """CustomerMetadataProperties: ours first, then the moved environment entries (source_<key lowercased>), then
    the source package's own where they fit (50 entries), none overriding an earlier one; empty values left out."""
    entries = [
        *ours.items(),
        *((PROVENANCE_PREFIX + key.lower(), value) for key, value in provenance.items()),
        *sorted(carried.items()),
    ]
    result: dict[str, str] = {}
    for key, value in entries:
        key, value = fitted(key, METADATA_KEY_CHARS), fitted(value, METADATA_VALUE_CHARS)
        if key and value and key not in result and len(result) < METADATA_ENTRIES:
            result[key] = value
    return result
