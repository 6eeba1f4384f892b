"""docs/aws-behaviours.md is the ledger of what only AWS runs: every row names a behaviour our code relies on, where
that behaviour is documented, and the test that models it. The tests it names must exist, so the ledger cannot
drift from the suite."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LEDGER = REPO_ROOT / "docs" / "aws-behaviours.md"
COLUMNS = ["component", "behaviour our code relies on", "source", "test that models it"]
# A source is a web page, a repository file at a ref (owner/repo@ref:path), or a document's path in such a repo.
SOURCE = re.compile(r"https?://\S+|[\w.-]+/[\w.-]+@[\w.+-]+:\S+")
TEST_REFERENCE = re.compile(r"`?(tests/[\w/]+\.py)::([\w:]+)`?")


def ledger_rows() -> list[list[str]]:
    """The rows of every table of the ledger (one per component group), headers and rules left out."""
    rows, previous = [], ""
    for line in LEDGER.read_text().splitlines():
        if not line.startswith("|"):
            previous = line
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not previous.startswith("|"):
            header = [cell.lower() for cell in cells]
            assert header == COLUMNS, f"a ledger table has the columns {header}, expected {COLUMNS}"
        elif not set(line.replace("|", "").strip()) <= set("-: "):
            rows.append(cells)
        previous = line
    return rows


def defined_names(path: Path) -> set[str]:
    """`name` and `Class::name` for every function and class of a test module."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{item.name}" for item in node.body if isinstance(item, ast.FunctionDef))
    return names


def test_the_ledger_has_at_least_25_behaviours():
    assert len(ledger_rows()) >= 25


@pytest.mark.parametrize("row", ledger_rows(), ids=lambda row: row[1][:60])
def test_every_behaviour_has_a_source_and_an_existing_test(row):
    assert len(row) == len(COLUMNS), f"row has {len(row)} cells: {row}"
    component, behaviour, source, tests = row
    assert component and behaviour
    assert SOURCE.search(source), f"no URL or repo@ref:path in the source of {behaviour!r}: {source!r}"
    references = TEST_REFERENCE.findall(tests)
    assert references, f"no tests/<path>.py::<test> reference for {behaviour!r}: {tests!r}"
    for path, name in references:
        module = REPO_ROOT / path
        assert module.is_file(), f"{path} (named for {behaviour!r}) does not exist"
        assert name in defined_names(module), f"{path} has no {name} (named for {behaviour!r})"


def test_a_row_naming_a_missing_test_is_caught(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text("def test_here():\n    pass\n\nclass TestGroup:\n    def test_inside(self):\n        pass\n")
    assert defined_names(module) == {"test_here", "TestGroup", "TestGroup::test_inside"}
    assert "test_gone" not in defined_names(module)
