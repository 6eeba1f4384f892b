"""The file-hash manifest a staged model folder carries, and the check its readers make before loading weights.

stage_model.py checks every file it downloads against the hub's own metadata (an LFS file's sha256, a small file's git
blob id), then writes, inside the staged folder and before the commit's record, MANIFEST:

    {"model_id": ..., "commit": ..., "files": {<path>: <bytes>}, "sha256": {<path>: <hex>}}

so each reader finds it next to the weights it receives (a training channel, a processing input, an endpoint's
ModelDataSource all receive the commit's folder, not the record beside it). verify_folder refuses, naming the file:
a pickle-format file (.bin, .pt, .pth, .pkl, .ckpt: unpickling runs code, and torch.load's weights_only=True is no
boundary before torch 2.6, CVE-2025-32434) whose sha256 differs or that the manifest does not list, and any listed
file whose size differs. safetensors and the small JSON/tokenizer files are size-checked only: they cannot run code,
and hashing tens of GB would add minutes to every start-up (sha256 runs at about 1 GiB/s per core). A folder without
a manifest (staged before manifests, a fine-tuned model, a user's own S3 folder) is not checked.
Stdlib only; Python 3.9.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = ".staged-sha256.json"
# torch.save's formats and other pickles: loading one runs whatever code it names.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
_CHUNK = 16 * 2**20


def is_pickle(name: str) -> bool:
    return name.lower().endswith(PICKLE_SUFFIXES)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file's bytes (`git hash-object`): what the hub reports as a non-LFS file's blob id."""
    digest = hashlib.sha1()  # git's object id, not a hash of our choosing
    digest.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest(model_id: str, commit: str, sizes: dict[str, int], sha256: dict[str, str]) -> dict:
    return {"model_id": model_id, "commit": commit, "files": dict(sizes), "sha256": dict(sha256)}


def read_manifest(folder: Path) -> dict | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path} is not JSON ({error}): the staged folder is damaged; stage the model again") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("sha256"), dict)
        or not isinstance(data.get("files"), dict)
    ):
        raise ValueError(f"{path} is not a staging manifest (files, sha256): stage the model again")
    return data


def folder_problems(folder: Path, rank: int = 0, world_size: int = 1) -> list[str]:
    """Why the weights in `folder` are not the ones staged, one line per file; [] when they are, or when the folder
    has no manifest. With `world_size` > 1 each rank hashes only its share of the pickles (every rank checks sizes)."""
    data = read_manifest(folder)
    if data is None:
        return []
    where = f"{folder}/{MANIFEST}"
    problems = []
    present = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    for name in present:
        if name == MANIFEST:
            continue
        size = data["files"].get(name)
        if size is None:
            if is_pickle(name):
                problems.append(f"{name} is a pickle that {where} does not list: it was not staged")
            continue
        actual = (folder / name).stat().st_size
        if actual != size:
            problems.append(f"{name} has {actual} bytes, {size} when staged")
    pickles = [name for name in present if is_pickle(name) and name in data["files"]]
    for name in pickles[rank::world_size]:
        expected = data["sha256"].get(name)
        if expected is None:
            problems.append(f"{name}: {where} records no sha256 for it")
        elif sha256_file(folder / name) != expected:
            problems.append(f"{name}: its sha256 is not the {expected} recorded when staged")
    return problems


def describe(folder: Path, problems: list[str]) -> str:
    return (
        f"the staged model folder {folder} is not what was staged ({MANIFEST} of {folder}): "
        + "; ".join(problems)
        + ". Refusing to load it: pickled weights run code when they are loaded. Stage the model again (delete "
        "the commit's prefix and record in the models bucket) and find out who changed the bucket"
    )
