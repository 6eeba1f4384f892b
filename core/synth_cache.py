"""A content-addressed cache, on disk, of what the SageMaker SDK computes at synth: the training pipelines'
definitions and the container image URIs.

Importing the SDK and generating the definitions costs every `cdk synth` seconds, for results that are a pure
function of their inputs. A result is stored under the sha256 of every input that can shape it, so an entry can
never be stale, only unused:
- the function (module and name) and its arguments in canonical JSON (a config model as its class and the values
  of all its fields, subclasses' fields included);
- the code: the path and bytes of every file under core/, infrastructure/ and training/ (the generators, the config
  models and the catalogs they read), so any edit there gives new keys;
- the environment: the Python version, the name and version of every installed distribution (the *.dist-info
  folders on sys.path: the SDK, botocore's endpoint tables, pydantic, ...) and the SDK's own RECORD (the sha256 of
  each of its files).
Nothing is invalidated or expires; `make clean` deletes the folder.

Where: .cache/synth/ in the repository (git-ignored); SYNTH_CACHE_DIR moves it, SYNTH_CACHE=off turns it off. An
entry that cannot be read, or whose checksum or key does not match (truncated, edited, another format), is
ignored and written again. A write goes to a temporary file renamed into place, so synths running side by side
(pytest-xdist workers, two `make` runs) never read half an entry; when the folder cannot be written the value is
still returned, uncached.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRECTORY = REPO_ROOT / ".cache" / "synth"
# The code that shapes the cached values, hashed whole.
CODE_FOLDERS = ("core", "infrastructure", "training")
# The distribution whose every file is hashed (the others by name and version).
SDK_DISTRIBUTION = "sagemaker"
# Bumped when an entry's layout changes: older entries then simply go unused.
FORMAT = 1

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class Counts:
    """This process's lookups by function name: hits served from disk, misses computed (and stored), entries found
    unreadable."""

    hits: Counter[str] = dataclasses.field(default_factory=Counter)
    misses: Counter[str] = dataclasses.field(default_factory=Counter)
    unreadable: Counter[str] = dataclasses.field(default_factory=Counter)


counts = Counts()


def directory() -> Path | None:
    """Where entries live, or None when the cache is off (read at each call, so a test can switch it)."""
    if os.environ.get("SYNTH_CACHE", "").lower() in ("off", "0", "false", "no"):
        return None
    return Path(os.environ.get("SYNTH_CACHE_DIR") or DEFAULT_DIRECTORY)


@functools.cache
def code_fingerprint(root: Path = REPO_ROOT) -> str:
    digest = hashlib.sha256()
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                relative = path.relative_to(root).as_posix().encode()
                content = path.read_bytes()
                digest.update(b"%d:%s%d:" % (len(relative), relative, len(content)) + content)
    return digest.hexdigest()


@functools.cache
def environment_fingerprint() -> str:
    """Python, every installed distribution by name and version, and the SDK file by file. Listing the *.dist-info
    folders takes milliseconds; reading every distribution's metadata would take most of a second."""
    installed = sorted(
        {
            name
            for entry in sys.path
            if os.path.isdir(entry)
            for name in os.listdir(entry)
            if name.endswith(".dist-info")
        }
    )
    try:
        sdk_files = metadata.distribution(SDK_DISTRIBUTION).read_text("RECORD") or ""
    except metadata.PackageNotFoundError:
        sdk_files = ""
    payload = json.dumps([sys.version, sys.implementation.cache_tag, installed, sdk_files])
    return hashlib.sha256(payload.encode()).hexdigest()


def canonical(value: Any) -> Any:
    """`value` as plain JSON data that tells apart every value the cached functions could tell apart."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "model_dump") and hasattr(type(value), "model_fields"):  # a pydantic model (a config section)
        kind = type(value)
        fields = value.model_dump(mode="json", serialize_as_any=True, round_trip=True)
        return {"model": f"{kind.__module__}.{kind.__qualname__}", "fields": fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = type(value)
        fields = {field.name: canonical(getattr(value, field.name)) for field in dataclasses.fields(value)}
        return {"dataclass": f"{kind.__module__}.{kind.__qualname__}", "fields": fields}
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, dict) and all(isinstance(name, str) for name in value):
        return {name: canonical(item) for name, item in value.items()}
    raise TypeError(
        f"core/synth_cache.py cannot key an argument of type {type(value).__qualname__}: give the cached function "
        "config models, dataclasses or plain values, or teach canonical() this type"
    )


def _name(function: Callable[..., Any] | str) -> str:
    return function if isinstance(function, str) else f"{function.__module__}.{function.__qualname__}"


def key(function: Callable[..., Any] | str, args: tuple, kwargs: dict[str, Any]) -> str:
    """The entry's key: `function` (or a name standing for a computation) with its arguments, the code, the
    environment."""
    call = {
        "format": FORMAT,
        "function": _name(function),
        "args": canonical(list(args)),
        "kwargs": canonical(kwargs),
        "code": code_fingerprint(),
        "environment": environment_fingerprint(),
    }
    return hashlib.sha256(json.dumps(call, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _checksum(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


_MISSING = object()


def _read(path: Path, expected_key: str, name: str) -> Any:
    try:
        entry = json.loads(path.read_bytes())
        if entry["key"] == expected_key and entry["sha256"] == _checksum(entry["value"]):
            return entry["value"]
    except FileNotFoundError:
        return _MISSING
    except (OSError, ValueError, KeyError, TypeError):
        pass
    counts.unreadable[name] += 1
    return _MISSING


def _write(path: Path, entry_key: str, function: Callable[..., Any] | str, value: Any) -> None:
    entry = {
        "key": entry_key,
        "function": _name(function),
        "sha256": _checksum(value),
        "value": value,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(handle, "w") as file:
                json.dump(entry, file)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:  # a read-only or full disk: the value is still right, only not kept
        pass


def on_disk(function: F) -> F:
    """Serve `function`'s JSON-serializable results from the cache; compute and store them on a miss. Only results
    are kept: an exception is raised again by computing anew each time."""

    @functools.wraps(function)
    def cached(*args: Any, **kwargs: Any) -> Any:
        return _cached(function, function.__name__, args, kwargs, lambda: function(*args, **kwargs))

    return cached  # type: ignore[return-value]


def compute_once(name: str, inputs: Any, compute: Callable[[], Any]) -> Any:
    """`compute()`'s JSON-serializable result for `inputs`, which must determine it wholly (with the code and the
    environment the key adds): read from the cache, or computed and stored. `name` tells computations apart."""
    return _cached(name, name.rsplit(".", 1)[-1], (inputs,), {}, compute)


def _cached(function: Callable[..., Any] | str, label: str, args: tuple, kwargs: dict[str, Any], compute: Any) -> Any:
    folder = directory()
    if folder is None:
        return compute()
    entry_key = key(function, args, kwargs)
    path = folder / entry_key[:2] / f"{entry_key}.json"
    value = _read(path, entry_key, label)
    if value is not _MISSING:
        counts.hits[label] += 1
        return value
    value = compute()
    counts.misses[label] += 1
    if json.loads(json.dumps(value)) != value:  # a tuple would come back from disk as a list
        raise TypeError(f"{_name(function)} returned a {type(value).__name__}, which JSON does not keep as is")
    _write(path, entry_key, function, value)
    return value
