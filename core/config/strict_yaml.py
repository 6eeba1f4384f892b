"""The config file to plain values, read the way YAML 1.2 reads them, with every mistake YAML lets through refused
with the file, the field and the line.

PyYAML alone keeps the last of two equal keys; reads `yes`, `on`, `0777`, `1:30` and `2024-01-31` the YAML 1.1 way
(true, 511, 90, a date) where YAML 1.2 reads text or another number; expands aliases without bound (a few lines of
aliases of aliases make millions of values); and recurses once per level of nesting. Here:

- a mapping with the same key twice is refused, with both lines;
- a plain value that YAML 1.1 and YAML 1.2 read differently, or a number with a leading zero, is refused with how
  to write it; keys are names, read as written (`on:` is the key "on", `2024:` the key "2024");
- only YAML's core types are accepted: text, numbers, true/false, null, lists and mappings (no !!binary,
  !!timestamp, !!set or custom tags); numbers are YAML 1.2's (`1e-4` is a number, `0o17` octal);
- the file is at most MAX_BYTES of UTF-8 text, nests at most MAX_DEPTH levels, and expands to at most MAX_VALUES
  keys, values and list items, counting an alias's whole anchor each time it is used;
- lists become tuples: the models are validated strictly, and their list fields are tuples.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from core.config.fields import ConfigError, cut, field_path, invalid, shown

MAX_BYTES = 256 * 1024  # the shipped configs are 1-3 KiB
MAX_DEPTH = 32  # the models nest six levels (stages.dev.serving.alarms.emails.0)
MAX_VALUES = 10_000  # the shipped configs hold under 200

_TAG = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL, SEQ, MAP, MERGE = (
    _TAG + name for name in ("str", "int", "float", "bool", "null", "seq", "map", "merge")
)
CORE_TAGS = {STR, INT, FLOAT, BOOL, NULL, SEQ, MAP}


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of the config file or overlay `path`; a ConfigError naming the file otherwise."""
    loader = _Loader(_read_text(path), path)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(f"{path}: the file is empty (or only comments); a config or an overlay is a mapping")
        _check(node, path)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = " ".join(part for part in (err.context, err.problem) if part)
        raise ConfigError(f"{path}: not valid YAML: {where}{cut(problem, 200)}") from None
    except yaml.YAMLError as err:  # the reader's: a character YAML does not allow
        raise ConfigError(f"{path}: not valid YAML: {cut(str(err).splitlines()[0], 200)}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping at the top (project:, tags:, stages:, pipeline:), got {_kind(data)}"
        )
    return data


def _read_text(path: Path) -> str:
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a config file")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{path}: is not a regular file (a device, pipe or socket); give a YAML file")
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except PermissionError:
        raise ConfigError(f"{path}: cannot be read: permission denied") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read: {cut(err.strerror or str(err))}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: is larger than {MAX_BYTES // 1024} KiB; a config file is a few KiB of YAML")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{path}: is UTF-16 text; save it as UTF-8")
    if b"\0" in data:
        raise ConfigError(f"{path}: is a binary file (it holds NUL bytes), not YAML text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); save it as UTF-8"
        ) from None


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core schema, tuples for lists, and a bound on nesting while composing
    (PyYAML composes recursively: a few thousand `[` would exhaust Python's stack)."""

    yaml_implicit_resolvers: dict[str | None, list[tuple[str, re.Pattern]]] = {}

    def __init__(self, text: str, path: Path):
        super().__init__(text)
        self.path, self.depth = path, 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise ConfigError(
                    f"{self.path}: line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep; a "
                    "config nests a handful"
                )
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if isinstance(event, ScalarEvent) and event.implicit[0] and event.style is None:
            node.plain = True  # untagged and unquoted: its type comes from how it is written
        return node


# YAML 1.2's core schema (yaml.org/spec/1.2.2, 10.3), and the merge key `<<`.
for _tag, _pattern, _first in [
    (BOOL, r"true|True|TRUE|false|False|FALSE", "tTfF"),
    (NULL, r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    (INT, r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    (FLOAT, r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
     "-+.0123456789"),
    (MERGE, r"<<", "<"),
]:  # fmt: skip
    _Loader.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern})$"), list(_first))


def _construct_int(loader: _Loader, node: ScalarNode) -> int:
    text = loader.construct_scalar(node)
    base = {"0o": 8, "0x": 16}.get(text[:2], 10)
    return int(text if base == 10 else text[2:], base)


_Loader.add_constructor(INT, _construct_int)
_Loader.add_constructor(SEQ, lambda loader, node: tuple(loader.construct_sequence(node)))


# ---------------------------------------------------------------------------------------------------------------
# The document's nodes, before anything is constructed from them.


def _check(root: Node, path: Path) -> None:
    """Walk every node once, depth first (without recursion: aliases can chain any depth), with the path where it is
    first used: refuse cycles and documents too large or deep once aliases expand, then list every duplicate key,
    ambiguous value and foreign tag at once. Keys are made text here, so construction reads them as written."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    active: set[int] = set()
    problems: list[str] = []
    stack: list[tuple[Node, list[Any], bool]] = [(root, [], False)]
    while stack:
        node, where, finished = stack.pop()
        children = _children(node)
        if finished:
            active.discard(id(node))
            size[id(node)] = min(1 + sum(size[id(child)] for child, _ in children), MAX_VALUES + 1)
            depth[id(node)] = 1 + max((depth[id(child)] for child, _ in children), default=0)
            continue
        if id(node) in size:
            continue
        active.add(id(node))
        problems += _problems(node, where)
        stack.append((node, where, True))
        for child, part in reversed(_children(node)):
            inside = where if part is None else [*where, part]
            if id(child) in active:
                raise ConfigError(
                    f"{path}: {field_path(inside)} (line {_line(child)}): an alias used inside itself (its anchor is "
                    "the mapping or list it is in), which never ends"
                )
            if id(child) not in size:
                stack.append((child, inside, False))
    if size[id(root)] > MAX_VALUES:
        raise ConfigError(
            f"{path}: aliases expand the file to more than {MAX_VALUES} values (keys, values and list items, each use "
            "of an alias counting its whole anchor); a config holds a few hundred"
        )
    if depth[id(root)] > MAX_DEPTH:
        raise ConfigError(f"{path}: aliases nest the file more than {MAX_DEPTH} levels deep; a config nests a handful")
    if problems:
        raise invalid(str(path), problems)


def _children(node: Node) -> list[tuple[Node, Any]]:
    """(child, the path part it adds) of a node: keys add nothing, a merge key's mappings neither."""
    if isinstance(node, SequenceNode):
        return [(item, index) for index, item in enumerate(node.value)]
    if isinstance(node, MappingNode):
        children: list[tuple[Node, Any]] = []
        for key, value in node.value:
            part = None if key.tag == MERGE or not isinstance(key, ScalarNode) else key.value
            children += [(key, None), (value, part)]
        return children
    return []


def _problems(node: Node, where: list[Any]) -> list[str]:
    if node.tag not in CORE_TAGS and not (isinstance(node, ScalarNode) and node.tag == MERGE):
        tag = node.tag.replace(_TAG, "!!")
        return [
            f"{field_path(where)} (line {_line(node)}): the YAML tag {cut(tag, 40)} is not accepted: a config holds "
            "text, numbers, true or false, lists and mappings"
        ]
    if isinstance(node, MappingNode):
        return _key_problems(node, where)
    if not isinstance(node, ScalarNode) or node.tag == MERGE:
        return []
    written = _LOADER.resolve(ScalarNode, node.value, (True, False))  # what YAML 1.2 reads it as, unquoted
    if getattr(node, "plain", False):
        problem = _plain_problem(node.value, written)
    elif node.tag in (INT, FLOAT, BOOL, NULL) and written != node.tag:  # `!!int abc`
        problem = f"{shown(node.value)} is not a YAML 1.2 {node.tag.replace(_TAG, '')}"
    else:
        problem = None
    return [f"{field_path(where)} (line {_line(node)}): {problem}"] if problem else []


def _key_problems(node: MappingNode, where: list[Any]) -> list[str]:
    problems, seen = [], {}
    for index, (key, value) in enumerate(node.value):
        if key.tag == MERGE:
            continue
        if not isinstance(key, ScalarNode):
            problems.append(f"{field_path(where)} (line {_line(key)}): a key is a name, not a {_kind_of_node(key)}")
            continue
        # `on:`, `2024:`, `true:` are names here, as written; a fresh node, so it is not checked as a value either.
        node.value[index] = (ScalarNode(STR, key.value, key.start_mark, key.end_mark), value)
        if key.value in seen:
            first, again = seen[key.value], _line(key)
            lines = f"on lines {first} and {again}" if first != again else f"twice on line {again}"
            problems.append(
                f"{field_path([*where, key.value])}: duplicate key, {lines}; YAML would silently keep only the last: "
                "remove one, or merge them"
            )
        else:
            seen[key.value] = _line(key)
    return problems


_LOADER = _Loader("", Path())  # for its resolver: what YAML 1.2 reads a plain value as
_YAML11 = Resolver()  # PyYAML's own resolver and constructor: what YAML 1.1, and most YAML tools, read it as
_YAML11_VALUES = SafeConstructor()


def _plain_problem(text: str, tag: str) -> str | None:
    """What is wrong with a plain (unquoted, untagged) value written `text`, which YAML 1.2 reads as `tag`."""
    value = _LOADER.yaml_constructors[tag](_LOADER, ScalarNode(tag, text)) if tag != STR else text
    old = _yaml11(text)
    if tag == INT and re.fullmatch(r"[-+]?0[0-9]+", text):
        if isinstance(old, int):
            return (
                f"{shown(text)} has a leading zero: YAML 1.1 reads it as the octal number {old}, YAML 1.2 as "
                f"{value}; write {value} for the number, or quote it for the text"
            )
        return (
            f"{shown(text)} has a leading zero, which YAML drops when it reads the number {value}; quote it for the "
            f"text: {shown(text)}"
        )
    if isinstance(old, str) or _same(old, value):
        return None
    if isinstance(old, bool):
        advice = "write true or false, or quote it for the text"
    elif isinstance(old, int | float):
        advice = f"write {old} for the number, or quote it for the text"
    else:
        advice = "quote it for the text"
    return f"{shown(text)} is {_reading(old)} in YAML 1.1 but {_reading(value)} in YAML 1.2; {advice}"


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


def _yaml11(text: str) -> Any:
    tag = _YAML11.resolve(ScalarNode, text, (True, False))
    construct = SafeConstructor.yaml_constructors.get(tag)
    if tag == STR or construct is None:
        return text
    try:
        return construct(_YAML11_VALUES, ScalarNode(tag, text))
    except ValueError:  # a timestamp pattern that is no date, 2024-02-30
        return _Unreadable()


class _Unreadable:
    """A value YAML 1.1 recognizes by its pattern and then cannot read."""


def _reading(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {shown(value)}"
    if isinstance(value, _Unreadable):
        return "a date it cannot read"
    return "a date" if type(value).__name__ in ("date", "datetime") else _kind(value)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, tuple | list):
        return "a list"
    return f"the text {shown(value)}" if isinstance(value, str) else shown(value)


def _kind_of_node(node: Node) -> str:
    return "mapping" if isinstance(node, MappingNode) else "list"


def _line(node: Node) -> int:
    return node.start_mark.line + 1
