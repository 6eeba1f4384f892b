"""The text the integration run fine-tunes on: generated, the same bytes every time, small enough to upload in a
second and large enough for the prepare step's split (each document alone fills more than one 256-token block, so
the 5% validation split, at least one document, is never empty).

What the model learns from it does not matter; that every step of the pipeline runs on it does.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DOCUMENTS = 40
SENTENCES_PER_DOCUMENT = 24
SEED = 25  # issue 25
SUBJECTS = (
    "The staging pipeline",
    "The fine-tuning run",
    "The endpoint",
    "The model registry",
    "The teardown",
    "The training job",
    "The evaluation step",
    "The inference component",
    "The stage key",
    "The data bucket",
)
VERBS = (
    "records",
    "checks",
    "copies",
    "waits for",
    "reports",
    "encrypts",
    "serves",
    "registers",
    "measures",
    "deletes",
)
OBJECTS = (
    "the exact commit of the weights",
    "every file it wrote",
    "a perplexity on held-out text",
    "the approved model version",
    "one copy per instance",
    "the cost of each hour",
    "a report in JSON",
    "the streamed tokens",
    "what remains after the destroy",
    "the request that was refused",
)
ENDINGS = (
    "before the next step starts.",
    "and nothing else.",
    "once per run.",
    "with the stage's own key.",
    "so that a person can read it later.",
    "within its time limit.",
)


def documents(count: int = DOCUMENTS, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(
            f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)}"
            for _ in range(SENTENCES_PER_DOCUMENT)
        )
        for _ in range(count)
    ]


def write(path: Path) -> Path:
    """The documents as JSON lines with a "text" field (what PrepareData reads), at `path`."""
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents()))
    return path
