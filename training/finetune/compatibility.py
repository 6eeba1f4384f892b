"""Whether the jobs' libraries can read a model or tokenizer folder, decided from its files before anything loads it.

A folder written by a newer library than the job's is not always refused by the older one: transformers 4.46.3 (the
SMP v2 image) reads a Llama config.json written by 5.x without an error but with its default rope_theta (10000, not
the file's 500000) and no rope scaling, because 5.x moved both under `rope_parameters`, and 4.x ignores the key; the
model then trains with the wrong positions. Others fail late and obscurely (tokenizers 0.12.1, the SMP v1 image's,
on the merges of a tokenizer.json written by 0.20 or later). So each format a writer introduced is listed here once
(FORMATS), with the oldest reader version that reads it, and one check compares a folder's files against the
reader's versions: at a job's start the installed ones (finetune/modeling.py, prepare_data.py), at staging the
oldest of those that read the repository in the stage, as synth computes them (stage_model.py --readers), so a
folder a job or endpoint of the stage cannot read is never staged.

Pure Python and the standard library: stage_model.py imports it before any model library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .errors import ConfigurationError

Version = tuple[int, ...]  # (major, minor, patch)


class Format(NamedTuple):
    """A format some writer puts in `file`; `needs` returns (the oldest `library` version that reads this file's
    content, what in it needs that), or None when the file does not use the format."""

    file: str
    library: str
    needs: Callable[[Mapping[str, Any]], tuple[Version, str] | None]


def parse_version(text: object) -> Version | None:
    """(major, minor, patch) of a version string such as "4.46.3" or "5.0.0.dev0"; None if it is not one."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return tuple(int(part or 0) for part in match.groups()) if match else None


def _written_by_a_newer_major(values: Mapping[str, Any]) -> tuple[Version, str] | None:
    # transformers records the version that wrote a config. Within a major version an older reader ignores fields
    # it does not know and defaults them; across one, fields were renamed (5.x: `rope_parameters` holds rope_theta
    # and rope_scaling, `dtype` replaces torch_dtype), so an older reader silently drops what the model needs.
    written = parse_version(values.get("transformers_version"))
    if written is None:
        return None
    return (written[0], 0, 0), f'"transformers_version": "{values["transformers_version"]}"'


def _tokenizer_class(values: Mapping[str, Any]) -> tuple[Version, str] | None:
    # transformers 5.x names its one tokenizers-backed class TokenizersBackend; 4.x has no class of that name. 5.x
    # writes no transformers_version into tokenizer_config.json, so the class is what tells.
    name = values.get("tokenizer_class")
    return ((5, 0, 0), f'"tokenizer_class": "{name}"') if name == "TokenizersBackend" else None


def _merges_as_pairs(values: Mapping[str, Any]) -> tuple[Version, str] | None:
    # tokenizers 0.20 writes a BPE model's merges as [left, right] pairs instead of "left right" strings; older
    # versions cannot parse the file at all ("data did not match any variant of untagged enum ModelWrapper").
    model = values.get("model")
    merges = model.get("merges") if isinstance(model, dict) else None
    if isinstance(merges, list) and merges and isinstance(merges[0], list):
        return (0, 20, 0), "BPE merges stored as pairs"
    return None


FORMATS = (
    Format("config.json", "transformers", _written_by_a_newer_major),
    Format("generation_config.json", "transformers", _written_by_a_newer_major),
    Format("tokenizer_config.json", "transformers", _tokenizer_class),
    Format("tokenizer.json", "tokenizers", _merges_as_pairs),
)


def parse_readers(text: str) -> dict[str, Version]:
    """`transformers=4.46.3,tokenizers=0.20.3` (stage_model.py --readers) as {library: version}; ValueError names
    what is wrong."""
    readers = {}
    for item in filter(None, text.split(",")):
        library, _, written = item.partition("=")
        version = parse_version(written)
        if library not in {format.library for format in FORMATS} or version is None:
            raise ValueError(
                f"{item!r} is not <library>=<version> of {', '.join(sorted({f.library for f in FORMATS}))}"
            )
        readers[library] = version
    return readers


def installed_readers() -> dict[str, Version]:
    """The versions of the reading libraries installed here (what this job reads folders with)."""
    from importlib.metadata import PackageNotFoundError, version

    readers = {}
    for library in {format.library for format in FORMATS}:
        try:
            parsed = parse_version(version(library))
        except PackageNotFoundError:
            continue
        if parsed is not None:
            readers[library] = parsed
    return readers


def _format_problem(format: Format, path: Path, readers: Mapping[str, Version], holder: str) -> str | None:
    reader = readers.get(format.library)
    try:
        values = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None  # unreadable JSON is reported by the loaders, with the file named
    if reader is None or not isinstance(values, dict):
        return None
    needed = format.needs(values)
    if needed is None or reader >= needed[0]:
        return None
    version, what = needed
    return (
        f"{path} has {what}, which needs {format.library} {'.'.join(map(str, version))} or newer "
        f"({holder} {format.library} {'.'.join(map(str, reader))})"
    )


def file_problems(path: Path, name: str, readers: Mapping[str, Version], holder: str = "this job has") -> list[str]:
    """What in the file at `path`, read as a file called `name` (config.json, tokenizer.json, ...), `readers`
    cannot read; `holder` says whose versions they are, in the message."""
    return [
        problem
        for format in FORMATS
        if format.file == name
        for problem in [_format_problem(format, path, readers, holder)]
        if problem
    ]


def folder_problems(folder: Path, readers: Mapping[str, Version], holder: str = "this job has") -> list[str]:
    """What in `folder`'s top-level files the libraries at `readers`' versions cannot read (empty: nothing known);
    `holder` says whose versions they are, in the message."""
    return [
        problem
        for format in FORMATS
        if (folder / format.file).is_file()
        for problem in [_format_problem(format, folder / format.file, readers, holder)]
        if problem
    ]


REMEDY = (
    "stage a revision of the model written by the libraries the jobs run (training.pretrained.revision: an earlier "
    "commit), or re-save the folder with transformers 4.x (tokenizer files with tokenizers 0.12-0.19 for SMP v1)"
)


def check_readable(folder: Path, what: str) -> None:
    """Refuse, before any library loads it, a folder whose files this job's transformers or tokenizers would misread
    or fail on: a config written by a newer major version loads without an error but loses renamed fields, so the
    loaders' own errors do not cover it. `what` names the folder's flag or channel in the message."""
    problems = folder_problems(folder, installed_readers())
    if problems:
        raise ConfigurationError(f"{what} {folder} cannot be read here: {'; '.join(problems)}; {REMEDY}")
