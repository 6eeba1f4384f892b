"""The architecture records (LoRA targets, tensor-parallel support, ...) as core/catalog/architectures.py declares
them. This folder runs inside the training container and cannot import core/, so it reads the copy that
`python -m generators.architectures --write` (make docs) writes next to this file; a test fails when it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORDS_FILE = Path(__file__).parent / "architectures.json"


def load_records() -> dict[str, dict[str, Any]]:
    """model_type -> its record's fields, in the records' order."""
    return json.loads(RECORDS_FILE.read_text())["architectures"]


def model_types_where(field: str) -> frozenset[str]:
    """The model types whose record has `field` set."""
    return frozenset(name for name, record in load_records().items() if record[field])
