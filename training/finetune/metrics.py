"""Metrics as `name=value` log lines (what SageMaker metric definitions parse), and as metrics.json.

A training line:
    step=10 epoch=0 loss=2.3412 perplexity=10.3945 lr=0.0002 grad_norm=0.8123 tokens_per_s=1234.5 samples_per_s=38.58
A validation line:
    step=10 val_loss=2.5011 val_perplexity=12.1953

The regexes below are the single source for the estimator's metric definitions: the CDK side copies
METRIC_DEFINITIONS, and a test checks them against what train.py prints. Each value pattern is preceded by a space
so that ` loss=` does not match inside ` val_loss=`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

_NUMBER = r"([0-9.eE+-]+)"

METRIC_DEFINITIONS: list[dict[str, str]] = [
    {"Name": "train:loss", "Regex": rf" loss={_NUMBER}"},
    {"Name": "train:perplexity", "Regex": rf" perplexity={_NUMBER}"},
    {"Name": "train:learning_rate", "Regex": rf" lr={_NUMBER}"},
    {"Name": "train:tokens_per_second", "Regex": rf" tokens_per_s={_NUMBER}"},
    {"Name": "train:samples_per_second", "Regex": rf" samples_per_s={_NUMBER}"},
    {"Name": "validation:loss", "Regex": rf" val_loss={_NUMBER}"},
    {"Name": "validation:perplexity", "Regex": rf" val_perplexity={_NUMBER}"},
]

METRICS_FILE = "metrics.json"


def _number(value: float | None, digits: int) -> str:
    if value is None:
        return "nan"
    return f"{value:.{digits}f}"


def train_line(record: dict[str, Any]) -> str:
    return (
        f"step={record['step']} epoch={record['epoch']} loss={_number(record['loss'], 4)} "
        f"perplexity={_number(record['perplexity'], 4)} lr={record['lr']:.6g} "
        f"grad_norm={_number(record['grad_norm'], 4)} tokens_per_s={record['tokens_per_s']:.1f} "
        f"samples_per_s={record['samples_per_s']:.2f}"
    )


def validation_line(record: dict[str, Any]) -> str:
    return (
        f"step={record['step']} val_loss={_number(record['val_loss'], 4)} "
        f"val_perplexity={_number(record['val_perplexity'], 4)}"
    )


class MetricsHistory:
    """Every logged record of the run; it travels inside checkpoints so a resumed run reports the whole run."""

    def __init__(self, train: list[dict[str, Any]] | None = None, validation: list[dict[str, Any]] | None = None):
        self.train: list[dict[str, Any]] = list(train or [])
        self.validation: list[dict[str, Any]] = list(validation or [])

    def to_dict(self) -> dict[str, Any]:
        return {"train": self.train, "validation": self.validation}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricsHistory:
        return cls(data.get("train"), data.get("validation"))

    def summary(self) -> dict[str, Any]:
        final: dict[str, Any] = {}
        if self.train:
            final.update({"step": self.train[-1]["step"], "train_loss": self.train[-1]["loss"]})
        if self.validation:
            final.update(
                {"val_loss": self.validation[-1]["val_loss"], "val_perplexity": self.validation[-1]["val_perplexity"]}
            )
        return final

    def write(self, output_dir: str, extra: dict[str, Any]) -> Path:
        """metrics.json: the history plus a `final` summary, written atomically (temp file + rename)."""
        path = Path(output_dir) / METRICS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps({**self.to_dict(), "final": self.summary(), **extra}, indent=2))
        os.replace(temporary, path)
        return path


def running_in_sagemaker(environ: dict[str, str]) -> bool:
    return "SM_TRAINING_ENV" in environ or "TRAINING_JOB_NAME" in environ


class Reporter:
    """Prints on the main process only: plain lines in SageMaker, a tqdm bar plus the same lines on a terminal."""

    def __init__(self, enabled: bool, progress_bar: str, environ: dict[str, str]) -> None:
        self.enabled = enabled
        wants_bar = progress_bar == "true" or (
            progress_bar == "auto" and sys.stderr.isatty() and not running_in_sagemaker(environ)
        )
        self._bar: Any = None
        self.uses_progress_bar = enabled and wants_bar

    def start(self, total: int, initial: int) -> None:
        if self.uses_progress_bar:
            from tqdm import tqdm  # tqdm ships with transformers in every target container

            self._bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def advance(self, steps: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(steps)

    def log(self, line: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
