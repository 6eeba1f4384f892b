"""Which config a cloud assembly was synthesized from: app.py writes it beside the manifest, `llmp plan` checks it.

    cdk.out/llmp-synth.json   {"config": "config/default.yaml", "config_sha256": "..."}

The digest is of the config file's bytes, so an edit after the synth is caught as surely as another file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

RECORD = "llmp-synth.json"


def config_digest(config_path: str | Path) -> str:
    return hashlib.sha256(Path(config_path).read_bytes()).hexdigest()


def write(outdir: str | Path, config_path: str | Path, *, shown: str) -> None:
    """Record in `outdir` that it holds `config_path`'s synthesis (`shown`: the path as messages give it)."""
    record = {"config": shown, "config_sha256": config_digest(config_path)}
    (Path(outdir) / RECORD).write_text(json.dumps(record, indent=2) + "\n")


def read(outdir: str | Path) -> dict[str, str] | None:
    """The record, or None for an assembly without one (synthesized another way, or before records existed)."""
    try:
        record = json.loads((Path(outdir) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "config_sha256" in record else None
