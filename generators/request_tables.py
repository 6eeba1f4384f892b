"""The request-parameter tables of docs/serving-requests.md and model_artifacts/README.md, rendered from the one
declaration the handler parses by (model_artifacts/deepspeed/request_schema.py, PARAMETERS).

    python -m generators.request_tables            # print the generated section
    python -m generators.request_tables --write    # rewrite it, between the markers, in both pages
    python -m generators.request_tables --check    # exit 1 if a page's section is not what this renders

Only the text between the markers is generated; the prose around it stays hand-written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from generators.generated_files import MarkedSection, command_line
from model_artifacts.deepspeed import request_schema
from model_artifacts.deepspeed.request_schema import Parameter

REPO = Path(__file__).resolve().parent.parent
PAGES = (REPO / "docs" / "serving-requests.md", REPO / "model_artifacts" / "README.md")
BEGIN = "<!-- request-parameters:begin -->"
END = "<!-- request-parameters:end -->"
SECTION = MarkedSection(BEGIN, END)
NOTICE = (
    "<!-- generated from model_artifacts/deepspeed/request_schema.py by `python -m generators.request_tables "
    "--write` (make docs); edit the table there, not here -->"
)
_WIDTH = 116


def section() -> str:
    """The generated text, markers included."""
    return "\n".join([BEGIN, NOTICE, "", *_example(), "", *_table(), END])


def _example() -> list[str]:
    """The example request, every parameter with its row's example value, wrapped to the pages' width."""
    request = request_schema.example_request()
    items = [f"{json.dumps(name)}: {json.dumps(value)}" for name, value in request["parameters"].items()]
    indent = " " * len(' "parameters": {')
    lines = _wrapped(items, _WIDTH - len(indent))
    body = [f' "parameters": {{{lines[0]}', *(indent + line for line in lines[1:])]
    body[-1] += "},"
    head = f"{{{json.dumps('inputs')}: {json.dumps(request['inputs'])} | [{json.dumps('prompt 1')}, ...],"
    return ["```json", head, *body, f' "stream": {json.dumps(request["stream"])}}}', "```"]


def _wrapped(items: list[str], width: int) -> list[str]:
    """Items joined by ", " into lines of at most `width`, never splitting an item."""
    lines = [items[0]]
    for item in items[1:]:
        if len(lines[-1]) + len(", ") + len(item) > width:
            lines[-1] += ","
            lines.append(item)
        else:
            lines[-1] += f", {item}"
    return lines


def _table() -> list[str]:
    header = [
        "| parameter | type | range | limit | default | engines | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    return header + [_row(row) for row in request_schema.PARAMETERS]


def _row(row: Parameter) -> str:
    cells = [f"`{row.name}`", row.json_type, _range(row), _limit(row), _default(row), ", ".join(row.engines)]
    return "| " + " | ".join([*cells, _meaning(row)]) + " |"


def _range(row: Parameter) -> str:
    bounds = row.bounds()
    if not bounds:
        return "-"
    hint = f" ({row.range_hint})" if row.range_hint else ""
    return f"{bounds}{hint}; else {row.out_of_range_status}"


def _limit(row: Parameter) -> str:
    return f"{row.cap}; else {row.over_cap_status}" if row.cap else "-"


def _default(row: Parameter) -> str:
    if row.default_doc:
        return row.default_doc
    return json.dumps(row.default) if row.default is not None else "none"


def _meaning(row: Parameter) -> str:
    parts = [row.doc]
    if row.sampling:
        parts.append("a sampling parameter: only used when sampling, and giving it turns sampling on")
    if row.vllm_note:
        parts.append(f"vLLM: {row.vllm_note}")
    return "; ".join(parts)


def generated_part(page_text: str) -> str:
    return SECTION.current(page_text)


def rewritten(page_text: str) -> str:
    return SECTION.rewritten(page_text, section())


def main(argv: list[str] | None = None) -> int:
    return command_line(
        argv,
        prog="python -m generators.request_tables",
        description=__doc__.split("\n")[0],
        expected=lambda: {page: rewritten(page.read_text()) for page in PAGES},
        preview=section,
        root=REPO,
        stale_message="{path}: request parameters are stale",
    )


if __name__ == "__main__":
    sys.exit(main())
