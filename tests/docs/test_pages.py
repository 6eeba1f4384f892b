"""The README and docs/: a short front door, links that resolve, and only commands and models that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from cli.app import app as llmp
from core.catalog.models import MODELS
from tests.cdk_assembly import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
MAX_README_LINES = 250


def without_code_blocks(path: Path) -> str:
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.DOTALL | re.MULTILINE)


def prose(path: Path) -> str:
    """A page without its code (fenced blocks and `spans`), where `[x](y)` is not a link."""
    return re.sub(r"`[^`\n]*`", "", without_code_blocks(path))


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (lowercased, punctuation dropped, spaces to dashes, repeats
    numbered), and its explicit <a id="...">."""
    found: set[str] = set(re.findall(r'<a id="([^"]+)"></a>', path.read_text()))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", without_code_blocks(path), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_the_readme_is_a_front_door_not_a_manual():
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_between_pages_resolves(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_make_targets_and_llmp_commands_named_exist(page):
    text = page.read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))
    named = set(re.findall(r"(?:^|[`$] ?|\n)make ([a-z][\w-]*)", text))
    assert named - targets == set()
    commands = set(typer.main.get_command(llmp).commands)
    assert set(re.findall(r"\bllmp ([a-z][\w-]*)", text)) - commands - {"command"} == set()


def test_the_readme_table_has_every_model_of_the_catalog():
    table = README.read_text().split("## Models and methods", 1)[1].split("\n## ", 1)[0]
    assert [name for name in MODELS if f"`{name}`" not in table] == []


def test_the_configuration_page_lists_every_example_config():
    page = (REPO / "docs" / "configuration.md").read_text()
    table = page.split("Examples to start from", 1)[1].split("\nEvery key", 1)[0]
    listed = set(re.findall(r"`(?:config/examples/)?([\w.-]+\.yaml)`", table))
    assert {path.name for path in (REPO / "config" / "examples").glob("*.yaml")} <= listed
