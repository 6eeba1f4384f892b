"""The README documents every hyperparameter with its default: the table there is the one the code generates."""

from __future__ import annotations

from pathlib import Path

from training.finetune.hyperparameters import HYPERPARAMETER_NAMES, hyperparameter_table_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_holds_the_generated_hyperparameter_table():
    table = hyperparameter_table_markdown().strip()
    assert table in README.read_text(), "regenerate the README table with hyperparameter_table_markdown()"


def test_the_table_names_every_hyperparameter():
    table = hyperparameter_table_markdown()
    assert all(f"| `{name}` |" in table for name in HYPERPARAMETER_NAMES)
