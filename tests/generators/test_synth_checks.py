"""docs/synth-checks.md: generated from the rules and checks synth runs, and every test it names exists."""

from __future__ import annotations

import re

from generators import synth_checks_page as synth_checks
from tests.cdk_assembly import REPO

PAGE = REPO / "docs" / "synth-checks.md"


def test_the_table_of_synth_checks_is_current():
    assert PAGE.read_text() == synth_checks.render(), (
        "run `python -m generators.synth_checks_page > docs/synth-checks.md`"
    )


def test_every_test_the_table_names_exists():
    named = set(re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", PAGE.read_text()))
    assert len(named) >= 10
    missing = [
        f"{path}::{name}"
        for path, name in sorted(named)
        if not (REPO / path).is_file() or not re.search(rf"^def {name}\(", (REPO / path).read_text(), re.MULTILINE)
    ]
    assert missing == []


def test_every_rule_appears_with_its_api_and_source():
    text = PAGE.read_text()
    for group, rows in synth_checks.rows().items():
        assert f"## {group}\n" in text
        assert all(source in text for _, source, _ in rows)
