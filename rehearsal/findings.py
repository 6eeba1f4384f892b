"""What a check found: a Check (passed or failed, with what it verified or what was wrong) or a Gap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Gap:
    """Something the templates ask for that the emulator does not represent, so no check can see it."""

    what: str
    why: str


Finding = Check | Gap


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where `actual` differs from `expected`, as `path: expected X, got Y` lines."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines = []
        for key in sorted(expected.keys() | actual.keys()):
            lines += differences(expected.get(key), actual.get(key), f"{path}.{key}".lstrip("."))
        return lines
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            line
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for line in differences(e, a, f"{path}[{i}]")
        ]
    return [] if expected == actual else [f"{path or 'value'}: expected {expected!r}, got {actual!r}"]


def error_code(err: ClientError) -> str:
    return err.response.get("Error", {}).get("Code", "")


def summarize(name: str, problems: list[str], detail: str) -> Check:
    """A passed check says what was verified (`detail`); a failed one lists its first problems."""
    if not problems:
        return Check(name, True, detail)
    more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
    return Check(name, False, "; ".join(problems[:6]) + more)
