"""What the generators write into the repository: whole files, or the marked part of a hand-written page, and the one
command line that prints them, checks them (exit 1 when one is stale) or rewrites them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MarkedSection:
    """A generated part of a hand-written page: the text between two marker comments."""

    begin: str  # e.g. "<!-- models:begin -->"
    end: str

    def current(self, page_text: str) -> str:
        """What the page holds between the markers, markers included ("" if it has none)."""
        start, end = page_text.find(self.begin), page_text.find(self.end)
        if start < 0 or end < start:
            return ""
        return page_text[start : end + len(self.end)]

    def rewritten(self, page_text: str, section: str) -> str:
        """The page with its marked part replaced by `section` (which carries the markers itself)."""
        current = self.current(page_text)
        if not current:
            raise ValueError(f"the page has no {self.begin} ... {self.end} markers")
        return page_text.replace(current, section, 1)


def command_line(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    expected: Callable[[], dict[Path, str]],
    preview: Callable[[], str],
    root: Path,
    stale_message: str = "{path} is stale",
) -> int:
    """`prog` prints `preview()`; with --check, names each file whose text differs from `expected()` and exits 1;
    with --write, rewrites those files."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the generated files that are stale")
    action.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    arguments = parser.parse_args(argv)
    if not (arguments.write or arguments.check):
        print(preview())
        return 0
    stale = {path: text for path, text in expected().items() if not path.is_file() or path.read_text() != text}
    if arguments.check:
        for path in stale:
            print(f"{stale_message.format(path=path.relative_to(root))}; run {prog} --write", file=sys.stderr)
        return 1 if stale else 0
    for path, text in stale.items():
        path.write_text(text)
    return 0
