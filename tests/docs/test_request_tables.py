"""The request parameters are declared once (model_artifacts/deepspeed/request_schema.py): the docs' tables are
generated from that declaration, and no other text restates it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from generators import request_tables
from model_artifacts.deepspeed.request_schema import PARAMETER_NAMES

REPO = Path(__file__).resolve().parents[2]
HANDLER = REPO / "model_artifacts" / "deepspeed" / "lmi_requests.py"


@pytest.mark.parametrize("page", request_tables.PAGES, ids=lambda page: page.name)
def test_the_page_s_parameter_table_is_the_generated_one(page):
    current = request_tables.generated_part(page.read_text())
    assert current, f"{page.name} has lost its {request_tables.BEGIN} ... {request_tables.END} markers"
    assert current == request_tables.section(), "run `python -m generators.request_tables --write` (make docs)"


@pytest.mark.parametrize("page", request_tables.PAGES, ids=lambda page: page.name)
def test_no_hand_written_table_row_restates_a_parameter(page):
    text = page.read_text()
    hand_written = text.replace(request_tables.generated_part(text), "")
    restated = [name for name in PARAMETER_NAMES if re.search(rf"^\| `{name}`", hand_written, re.MULTILINE)]
    assert restated == [], f"{page.name} describes these parameters outside the generated table: {restated}"


def test_the_handler_s_docstring_leaves_the_parameters_to_the_table():
    docstring = ast.get_docstring(ast.parse(HANDLER.read_text()))
    listed = [name for name in PARAMETER_NAMES if re.search(rf"\b{name}\b", docstring)]
    assert listed == [], f"lmi_requests.py's docstring re-lists {listed}: point to request_schema.PARAMETERS instead"


def test_rewriting_a_stale_page_restores_the_generated_table():
    stale = f"intro\n{request_tables.BEGIN}\nold table\n{request_tables.END}\noutro\n"
    assert request_tables.rewritten(stale) == f"intro\n{request_tables.section()}\noutro\n"


def test_the_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"{request_tables.BEGIN}\nold\n{request_tables.END}\n")
    monkeypatch.setattr(request_tables, "PAGES", (page,))
    monkeypatch.setattr(request_tables, "REPO", tmp_path)

    assert request_tables.main(["--check"]) == 1
    assert "page.md: request parameters are stale" in capsys.readouterr().err
    assert request_tables.main(["--write"]) == 0
    assert request_tables.main(["--check"]) == 0
