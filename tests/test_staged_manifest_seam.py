"""The staged-folder manifest has one writer (training/stage_model.py, through training/finetune/staged.py) and two
readers that cannot share code: training/finetune/staged.py in the training images and the handler's stdlib copy in
model_artifacts/deepspeed/lmi_folder_check.py in the LMI image. The two readers agree on the file name, on which files
are pickles, and on what a manifest written by the writer accepts and refuses."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def readers(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "model_artifacts" / "deepspeed"))
    monkeypatch.syspath_prepend(str(REPO / "training"))
    for name in ("lmi_folder_check", "lmi_config", "finetune.staged"):
        sys.modules.pop(name, None)
    return importlib.import_module("finetune.staged"), importlib.import_module("lmi_folder_check")


def staged_folder(tmp_path: Path, staged) -> Path:
    folder = tmp_path / "commit"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(b"pickled weights")
    (folder / "config.json").write_text("{}")
    files = {p.name: p.stat().st_size for p in folder.iterdir()}
    hashes = {p.name: staged.sha256_file(p) for p in folder.iterdir()}
    (folder / staged.MANIFEST).write_text(json.dumps(staged.manifest("org/model", "0" * 40, files, hashes)))
    return folder


def test_both_readers_name_the_same_manifest_and_the_same_pickles(readers):
    staged, handler = readers
    assert handler.STAGED_MANIFEST == staged.MANIFEST
    assert handler.PICKLE_SUFFIXES == staged.PICKLE_SUFFIXES


def test_both_readers_accept_what_the_writer_wrote_and_refuse_a_changed_pickle(readers, tmp_path):
    staged, handler = readers
    folder = staged_folder(tmp_path, staged)
    assert staged.folder_problems(folder) == []
    handler.check_staged_files(str(folder))
    (folder / "pytorch_model.bin").write_bytes(b"other weights!!")  # same size, other bytes
    assert staged.folder_problems(folder)
    with pytest.raises(handler.ConfigError, match=r"pytorch_model\.bin"):
        handler.check_staged_files(str(folder))
