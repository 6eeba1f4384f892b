"""What a partial `make bench` (BENCH_ONLY=...) keeps from the BENCHMARKS.md it rewrites: the sections it did not
measure this time, and their rows of the summary table, as they were.

Sections are told apart by their headings and summary rows by their first cell, both written by the section's own
markdown (bench/<section>.py) and by bench/__main__.py; a heading or row this does not know is not kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Section name (bench/__main__.py's, plus the fresh clone) -> how its heading starts.
HEADINGS = {
    "synth": "## Synth:",
    "handler": "## Inference handler",
    "training": "## Training step",
    "artifacts": "## Artifacts:",
    "cold-start": "## Cold start",
    "suite": "## Test suite",
    "fresh clone": "## Fresh clone",
    "containers": "## Container test environments",
}
# Section name -> how its row of the summary table starts.
SUMMARY_ROWS = {
    "synth": "| Synth,",
    "handler": "| Inference:",
    "training": "| Training:",
    "artifacts": "| Artifacts:",
    "suite": "| Test suite",
    "fresh clone": "| Fresh clone",
    "containers": "| Container tests",
}


@dataclass
class Earlier:
    sections: dict[str, str] = field(default_factory=dict)  # name -> markdown, heading included
    summary: dict[str, list[str]] = field(default_factory=dict)  # name -> its table rows


def read(path: Path, stop_marker: str) -> Earlier:
    """The sections of an existing BENCHMARKS.md (up to `stop_marker`, the GPU section's start) and their summary
    rows; empty when there is no file."""
    found = Earlier()
    if not path.is_file():
        return found
    text = path.read_text()
    text = text[: text.index(stop_marker)] if stop_marker in text else text
    blocks = [f"## {block}" for block in text.split("\n## ")[1:]]
    for block in blocks:
        name = next((name for name, heading in HEADINGS.items() if block.startswith(heading)), None)
        if name is not None:
            found.sections[name] = block.rstrip("\n") + "\n"
        elif block.startswith("## Summary"):
            for row in block.splitlines():
                owner = next((name for name, start in SUMMARY_ROWS.items() if row.startswith(start)), None)
                if owner is not None:
                    found.summary.setdefault(owner, []).append(row)
    return found
