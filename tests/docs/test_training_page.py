"""docs/training.md documents every hyperparameter with its default: the table there is the one the code generates."""

from __future__ import annotations

from tests.cdk_assembly import REPO
from training.finetune.hyperparameters import HYPERPARAMETER_NAMES, hyperparameter_table_markdown

PAGE = REPO / "docs" / "training.md"


def test_the_training_page_holds_the_generated_hyperparameter_table():
    table = hyperparameter_table_markdown().strip()
    assert table in PAGE.read_text(), "regenerate the table in docs/training.md with hyperparameter_table_markdown()"


def test_the_table_names_every_hyperparameter():
    table = hyperparameter_table_markdown()
    assert all(f"| `{name}` |" in table for name in HYPERPARAMETER_NAMES)
