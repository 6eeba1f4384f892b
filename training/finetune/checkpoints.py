"""Checkpoint directories that never look complete unless they are, keep-last-K, and RNG state.

A checkpoint for step N is written into `<root>/.tmp-step_0000000N/`, then renamed to `<root>/step_0000000N/`.
The rename makes it atomic on the local disk. SageMaker also syncs the folder to S3 file by file and, after a spot
interruption, downloads it again, possibly without the files an upload had not finished. So each node also writes a
manifest (`manifest-node<k>.json`: every file with its size) after its files are complete, and the main process
writes `trainer_state.json` (step, data position, RNG-independent loop state, the resolved config, how many nodes
wrote manifests). A checkpoint counts only if trainer_state.json and every node's manifest are present and every
listed file exists with its listed size.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch

TRAINER_STATE_FILE = "trainer_state.json"
TEMPORARY_PREFIX = ".tmp-"
_CHECKPOINT_NAME = re.compile(r"^step_(\d{8})$")
_MANIFEST_NAME = re.compile(r"^manifest-node(\d+)\.json$")


def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}"


def checkpoint_step(path: Path) -> int | None:
    match = _CHECKPOINT_NAME.match(path.name)
    return int(match.group(1)) if match else None


def temporary_dir(root: Path, step: int) -> Path:
    return root / f"{TEMPORARY_PREFIX}{checkpoint_name(step)}"


def write_json_atomic(path: Path, data: Any) -> None:
    temporary = path.with_name(path.name + ".partial")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(temporary, path)


def _files_under(directory: Path) -> dict[str, int]:
    return {
        str(path.relative_to(directory)): path.stat().st_size
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not _MANIFEST_NAME.match(path.name) and not path.name.endswith(".partial")
    }


def write_manifest(directory: Path, node_rank: int) -> None:
    """List the files this node can see; called once every process of the node has finished writing."""
    write_json_atomic(directory / f"manifest-node{node_rank}.json", {"files": _files_under(directory)})


def read_trainer_state(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / TRAINER_STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def incompleteness(directory: Path) -> str | None:
    """None if the checkpoint is complete, else the reason it is not."""
    state = read_trainer_state(directory)
    if state is None:
        return f"{TRAINER_STATE_FILE} missing or unreadable"
    for node in range(int(state.get("num_nodes", 1))):
        manifest_path = directory / f"manifest-node{node}.json"
        try:
            files = json.loads(manifest_path.read_text())["files"]
        except (OSError, json.JSONDecodeError, KeyError):
            return f"{manifest_path.name} missing or unreadable"
        for name, size in files.items():
            path = directory / name
            if not path.is_file() or path.stat().st_size != size:
                return f"{name} missing or truncated"
    return None


def checkpoint_dirs(root: Path) -> list[Path]:
    """Final-named checkpoint folders, oldest step first."""
    if not root.is_dir():
        return []
    found = [path for path in root.iterdir() if path.is_dir() and checkpoint_step(path) is not None]
    return sorted(found, key=lambda path: checkpoint_step(path) or 0)


def latest_complete(root: Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint, and a note for each newer one skipped as incomplete."""
    skipped = []
    for path in reversed(checkpoint_dirs(root)):
        reason = incompleteness(path)
        if reason is None:
            return path, skipped
        skipped.append(f"skipping incomplete checkpoint {path.name}: {reason}")
    return None, skipped


def finalize(temporary: Path, final: Path) -> None:
    """Rename temp -> final. On a shared filesystem another node may have renamed it already; that is fine."""
    try:
        os.rename(temporary, final)
    except OSError:
        if not (final.is_dir() and not temporary.exists()):
            raise


def prune(root: Path, keep: int) -> list[Path]:
    """Delete complete checkpoints beyond the newest `keep`, incomplete ones older than the newest complete one,
    and leftover temp folders (a crash mid-write). Returns what was deleted."""
    deleted = []
    folders = checkpoint_dirs(root)
    complete = [path for path in folders if incompleteness(path) is None]
    newest_step = checkpoint_step(complete[-1]) if complete else None
    for path in complete[:-keep]:
        deleted.append(path)
    for path in folders:
        step = checkpoint_step(path)
        if path not in complete and newest_step is not None and step is not None and step < newest_step:
            deleted.append(path)
    for path in deleted:
        shutil.rmtree(path, ignore_errors=True)
    return deleted


def remove_temporary_dirs(root: Path) -> None:
    if root.is_dir():
        for path in root.iterdir():
            if path.name.startswith(TEMPORARY_PREFIX):
                shutil.rmtree(path, ignore_errors=True)


def rng_state_path(directory: Path, rank: int) -> Path:
    return directory / "rng" / f"rank_{rank:05d}.pt"


def capture_rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rng_state(directory: Path, rank: int) -> None:
    path = rng_state_path(directory, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(capture_rng_state(), path)


def load_rng_state(directory: Path, rank: int) -> bool:
    """Restore this rank's RNG; False when the checkpoint has no state for this rank (a different world size)."""
    path = rng_state_path(directory, rank)
    if not path.is_file():
        return False
    restore_rng_state(torch.load(path, map_location="cpu", weights_only=False))
    return True
