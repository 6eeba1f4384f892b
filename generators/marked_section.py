"""A generated part of a hand-written page: the text between two marker comments, which a generator rewrites and a
test compares with what the generator writes now."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MarkedSection:
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
