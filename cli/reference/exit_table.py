"""The part of docs/operations.md generated from the CLI's code: the table of exit statuses, from cli/errors.py's one
table (Exit and MEANINGS, which `llmp --help` prints too).

    python -m cli.reference.exit_table            # print the section
    python -m cli.reference.exit_table --write    # rewrite it in docs/operations.md
    python -m cli.reference.exit_table --check    # exit 1 if the page's section is not what this renders
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli.errors import exit_table_markdown
from generators.generated_files import MarkedSection, command_line

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations.md"
BEGIN = "<!-- exit-statuses:begin -->"
END = "<!-- exit-statuses:end -->"
SECTION = MarkedSection(BEGIN, END)
NOTICE = (
    "<!-- generated from cli/errors.py (Exit, MEANINGS) by `python -m cli.reference.exit_table --write` (make docs); "
    "edit the table there, not here -->"
)


def exit_statuses() -> str:
    """The marked section: the notice and the table."""
    return "\n".join([BEGIN, NOTICE, exit_table_markdown(), END])


def expected_files() -> dict[Path, str]:
    return {OPERATIONS: SECTION.rewritten(OPERATIONS.read_text(), exit_statuses())}


def main(argv: list[str] | None = None) -> int:
    return command_line(
        argv,
        prog="python -m cli.reference.exit_table",
        description=__doc__.split("\n")[0],
        expected=expected_files,
        preview=exit_statuses,
        root=REPO,
    )


if __name__ == "__main__":
    sys.exit(main())
