"""What one API limit is and how a value is checked against it: the Rule that maps a config field to the API
member it reaches, the Limit stated only in prose, and the evaluation of a member's constraint (range, length,
pattern, enum) from the committed tables (core/api_limits/aws_tables.py)."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from core.api_limits import aws_tables
from core.api_limits.aws_tables import Constraint

NUMBER_TYPES = ("integer", "long", "double", "float", "number")


@dataclass(frozen=True)
class Limit:
    """A limit the service model does not carry: stated in the API's documentation, or by the job's own code.
    `check(subject, value)` says what is wrong, or None; `text` is the limit as the docs table shows it."""

    text: str
    source: str
    check: Callable[[Any, Any], str | None]


@dataclass(frozen=True)
class Rule:
    """One value that reaches an API.

    scope: what `value` is given: "training" (a TrainingConfig), "serving" (a ServingConfig), "stage" (a Stage:
        the whole config and one stage's name) or "platform" (the PlatformConfig).
    field: the config field as a message names it, relative to the scope ("spot.max_wait_hours"); for derived
        values, what is derived from which fields.
    fields: the config fields (full paths, `*` for any stage) whose values this rule checks.
    api, members: where the value goes (members: keys of core/api_limits/aws_api_limits.json).
    value: the value sent, from the scope's object; None when it is not sent.
    limits: what else bounds it (documented, or the job's code).
    shown: how a message shows the value (default: repr).
    """

    scope: str
    field: str
    fields: tuple[str, ...]
    api: str
    members: tuple[str, ...]
    value: Callable[[Any], Any]
    limits: tuple[Limit, ...] = ()
    shown: Callable[[Any, Any], str] | None = None
    note: str = ""

    @property
    def id(self) -> str:
        """`field -> API member` (or the limit, for the job's own rules): unique within the table."""
        target = _member_path(self.members[0]) if self.members else self.limits[0].text
        return f"{self.field} -> {self.api} {target}"

    def problems(self, subject: Any) -> list[str]:
        value = self.value(subject)
        if value is None:
            return []
        shown = self.shown(subject, value) if self.shown else repr(value)
        found = []
        for member in self.members:
            constraint = aws_tables.constraint(member)
            problem = violation(constraint, value)
            if problem:
                found.append(f"{shown} {problem}, the limit of {self.api} {_member_path(member)} ({constraint.source})")
        for limit in self.limits:
            problem = limit.check(subject, value)
            if problem:
                found.append(f"{shown} {problem} ({limit.source})")
        return [f"{self.field}: {problem}{'; ' + self.note if self.note else ''}" for problem in found]

    def limit_texts(self) -> Iterator[tuple[str, str, str]]:
        """(member, limit, source) for the docs table."""
        for member in self.members:
            constraint = aws_tables.constraint(member)
            yield _member_path(member), describe(constraint), constraint.source
        for limit in self.limits:
            yield "", limit.text, limit.source


def _member_path(member: str) -> str:
    if member.startswith("cfn:"):
        resource_type, path = member.removeprefix("cfn:").rsplit(":", 1)
        return f"{resource_type} {path}"
    return member.split(":", 2)[2]


# --- evaluating one constraint ---------------------------------------------------------------------------------


def violation(constraint: Constraint, value: Any) -> str | None:
    """What is wrong with `value` for `constraint`, or None."""
    kind = constraint.type
    if kind in NUMBER_TYPES:
        if constraint.minimum is not None and value < constraint.minimum:
            return f"is below the minimum {constraint.minimum:g}"
        if constraint.maximum is not None and value > constraint.maximum:
            return f"is above the maximum {constraint.maximum:g}"
        return None
    if kind == "string":
        if constraint.enum is not None and value not in constraint.enum:
            close = difflib.get_close_matches(value, constraint.enum, n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            return f"is not one of the {len(constraint.enum)} values it accepts{hint}"
        if constraint.minimum is not None and len(value) < constraint.minimum:
            return f"is shorter than {constraint.minimum:g} characters"
        if constraint.maximum is not None and len(value) > constraint.maximum:
            return f"has {len(value)} characters, more than {constraint.maximum:g}"
        if constraint.pattern is not None and not matches(constraint.pattern, value, full=constraint.full_match):
            return f"does not match the pattern {constraint.pattern}"
        return None
    if kind in ("list", "array", "map"):
        if constraint.minimum is not None and len(value) < constraint.minimum:
            return f"has {len(value)} entries, fewer than {constraint.minimum:g}"
        if constraint.maximum is not None and len(value) > constraint.maximum:
            return f"has {len(value)} entries, more than {constraint.maximum:g}"
        items = value.items() if kind == "map" else enumerate(value)
        for key, item in items:
            problem = violation(constraint.member, item) if constraint.member else None
            if problem:
                return f"entry {key!r} ({item!r}) {problem}"
        return None
    return None


def describe(constraint: Constraint) -> str:
    """What a constraint refuses, in a few words, for the docs table."""
    if constraint.enum is not None:
        return f"not one of its {len(constraint.enum)} values"
    low, high = constraint.minimum, constraint.maximum
    if constraint.type in NUMBER_TYPES:
        refused = [f"below {low:g}"] if low is not None else []
        refused += [f"above {high:g}"] if high is not None else []
    else:
        unit = "characters" if constraint.type == "string" else "entries"
        refused = ["empty"] if low == 1 else [f"fewer than {low:g} {unit}"] if low else []
        refused += [f"more than {high:g} {unit}"] if high is not None else []
    if constraint.pattern and constraint.pattern not in (".*", "[\\S\\s]*"):
        refused.append(f"not matching `{constraint.pattern}`")
    if constraint.member is not None:
        refused.append(f"an entry {describe(constraint.member)}")
    return " or ".join(refused) or "nothing (no limit)"


# Service models are written for Java's regular expressions. Python's `re` has no \p{...} classes: these become
# character tests by Unicode category (Java's \p{Print} is ASCII-only, as POSIX's).
def _category(major: str) -> Callable[[str], bool]:
    return lambda c: unicodedata.category(c).startswith(major)


_JAVA_CLASSES: dict[str, Callable[[str], bool]] = {
    "Print": lambda c: " " <= c <= "~",
    **{major: _category(major) for major in "LMNPSZ"},
}


def _python_pattern(pattern: str) -> str:
    """Java writes characters beyond U+FFFF as UTF-16 surrogate pairs (\\uD800\\uDC00); Python's `re` wants the code
    point (\\U00010000)."""

    def code_point(pair: re.Match) -> str:
        high, low = int(pair[1], 16), int(pair[2], 16)
        return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08X}"

    return re.sub(r"\\u(D[89AB][0-9A-F]{2})\\u(D[C-F][0-9A-F]{2})", code_point, pattern, flags=re.IGNORECASE)


def matches(pattern: str, value: str, *, full: bool = True) -> bool:
    if "\\p{" not in pattern:
        return bool((re.fullmatch if full else re.search)(_python_pattern(pattern), value))
    # Only the forms the service models use: one character class (with \p{...} members), repeated.
    form = re.fullmatch(r"\(?(\[(?P<cls>(?:\\p\{\w+\}|\\.|[^\]\\])+)\]|\\p\{(?P<one>\w+)\})(?P<rep>[*+])\)?", pattern)
    if not form or not full:
        raise ValueError(f"cannot evaluate the Java pattern {pattern!r}; extend core/api_limits/__init__.py")
    tests: list[Callable[[str], bool]] = []
    literals = ""
    if form["one"]:
        tests.append(_JAVA_CLASSES[form["one"]])
    else:
        for name, escaped, plain in re.findall(r"\\p\{(\w+)\}|\\(.)|(.)", form["cls"]):
            if plain == "-":  # a range (a-z): not a form the service models use with \p{...}
                raise ValueError(f"cannot evaluate the Java pattern {pattern!r}; extend core/api_limits/__init__.py")
            if name:
                tests.append(_JAVA_CLASSES[name])
            else:
                literals += escaped or plain
    if form["rep"] == "+" and not value:
        return False
    return all(c in literals or any(test(c) for test in tests) for c in value)
