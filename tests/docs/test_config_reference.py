"""docs/config-reference.md: generated from the config models, every field of every model in it, links that resolve."""

from __future__ import annotations

import re

import pytest

from generators import config_reference, config_schema
from tests.cdk_assembly import REPO

PAGE = REPO / "docs" / "config-reference.md"


@pytest.fixture(scope="module")
def page() -> str:
    return config_reference.render()


def test_the_committed_reference_is_the_generated_one(page):
    assert PAGE.read_text() == page, "run `make docs`"


def test_every_field_of_every_model_has_its_row_with_its_default(page):
    sections = dict(re.findall(r'<a id="(\w+)"></a>\n\n## [^\n]*\n(.*?)(?=\n<a id=|\Z)', page, re.DOTALL))
    models = config_schema.config_models()
    assert set(sections) == {m.__name__.lower() for m in models}
    for model in models:
        rows = {row.split(" | ")[0].strip("| `"): row for row in sections[model.__name__.lower()].splitlines()}
        for name, info in model.model_fields.items():
            assert name in rows, f"{model.__name__}.{name}"
            cells = rows[name].split(" | ")
            if info.is_required():
                assert cells[2] == "required"
            elif isinstance(info.default, bool):
                assert cells[2] == f"`{str(info.default).lower()}`", f"{model.__name__}.{name}"
            elif isinstance(info.default, int | float | str):
                assert cells[2] == f"`{info.default}`", f"{model.__name__}.{name}"
            if info.description:
                assert cells[3].rstrip(" |") == " ".join(info.description.split()).replace("|", "\\|")


def test_reused_models_name_every_place_they_appear(page):
    assert "## `stages.<name>.training.vpc` (VpcConfig)\n\nAlso at `stages.<name>.serving.vpc`." in page
    assert "## `stages.<name>.serving.components[]` (ComponentConfig)" in page


def test_every_link_resolves(page):
    anchors = set(re.findall(r'<a id="(\w+)"></a>', page))
    assert {target for target in re.findall(r"\]\(#(\w+)\)", page)} <= anchors
    for target in re.findall(r"\]\(([\w.-]+\.(?:md|json))\)", page):
        assert (PAGE.parent / target).is_file(), target
