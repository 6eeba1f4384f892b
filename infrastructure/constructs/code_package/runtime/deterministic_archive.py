"""Byte-identical tar.gz archives: same file contents in, same bytes out, on any machine.

Entries are sorted; every header has mtime 0, uid/gid 0, empty owner names and fixed modes (0644 files, 0755
directories); the gzip header carries no timestamp and no file name. Data is streamed from each member's opener into
the output in chunks, so memory stays bounded whatever the archive's size.

Runs inside the code-package Lambda (standard library only) and in the tests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# Never worth shipping: interpreter caches differ per machine and would break byte-identity.
EXCLUDED_PARTS = ("__pycache__",)
EXCLUDED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Member:
    """One file of the archive: its path inside the archive, its size, and how to read it."""

    path: str
    size: int
    open: Callable[[], BinaryIO]


def is_excluded(path: str) -> bool:
    parts = path.split("/")
    return any(p in EXCLUDED_PARTS for p in parts) or path.endswith(EXCLUDED_SUFFIXES)


def check_path(path: str) -> str:
    """A safe relative POSIX path, or ValueError naming the problem."""
    normalized = posixpath.normpath(path)
    if path.startswith("/") or normalized == "." or normalized.startswith("../") or normalized == "..":
        raise ValueError(f"file path {path!r} must be relative and stay inside the archive")
    return normalized


def members_from_directory(root: Path) -> list[Member]:
    files = [p for p in root.rglob("*") if p.is_file()]
    members = []
    for p in files:
        rel = p.relative_to(root).as_posix()
        if not is_excluded(rel):
            members.append(Member(rel, p.stat().st_size, lambda p=p: p.open("rb")))
    return members


def members_from_zip(archive: zipfile.ZipFile) -> list[Member]:
    return [
        Member(check_path(info.filename), info.file_size, lambda info=info: archive.open(info))
        for info in archive.infolist()
        if not info.is_dir() and not is_excluded(info.filename)
    ]


def members_from_text(files: dict[str, str]) -> list[Member]:
    encoded = {check_path(name): text.encode("utf-8") for name, text in files.items()}
    return [Member(name, len(data), lambda data=data: io.BytesIO(data)) for name, data in encoded.items()]


def merge(base: Iterable[Member], overrides: Iterable[Member]) -> list[Member]:
    """`base` with `overrides` replacing members of the same path (rendered files replace source files)."""
    merged = {m.path: m for m in base}
    merged.update({m.path: m for m in overrides})
    return list(merged.values())


def write_archive(members: Iterable[Member], out: BinaryIO, *, top_level_dir: str = "") -> tuple[str, int]:
    """Write a deterministic tar.gz of `members` to `out` (under `top_level_dir/` if given).

    Returns the SHA-256 (hex) and size in bytes of what was written.
    """
    counted = _HashingWriter(out)
    prefix = check_path(top_level_dir) + "/" if top_level_dir else ""
    entries = sorted((prefix + m.path, m) for m in members)
    names = [name for name, _ in entries]
    if len(set(names)) != len(names):
        raise ValueError("duplicate paths in archive")
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=counted, mtime=0, compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for directory in _directories(names):
            tar.addfile(_header(directory, tarfile.DIRTYPE, 0o755, 0))
        for name, member in entries:
            with member.open() as data:
                tar.addfile(_header(name, tarfile.REGTYPE, 0o644, member.size), _ExactReader(data, member.size, name))
    return counted.sha256.hexdigest(), counted.size


def _directories(names: list[str]) -> Iterator[str]:
    seen: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            seen.add("/".join(parts[:i]))
    yield from sorted(seen)


def _header(name: str, type_: bytes, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = type_, mode, size
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


class _HashingWriter:
    """A write-only file that hashes and counts what passes through to the real one."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self.sha256, self.size = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()


class _ExactReader:
    """Reads a member and fails loudly if it is shorter than announced (a truncated source must not pass)."""

    def __init__(self, data: BinaryIO, size: int, name: str) -> None:
        self._data, self._left, self._name = data, size, name

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        chunk = self._data.read(n)
        if len(chunk) < n:
            raise ValueError(f"{self._name}: source ended early (expected {self._left} more bytes)")
        self._left -= len(chunk)
        return chunk
