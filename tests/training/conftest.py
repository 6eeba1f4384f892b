"""Shared set-up for the training tests: a tiny GPT-J (random init) with a tiny tokenizer trained here, raw
sst2-style data, prepare_data.py output, and helpers that run train.py as SageMaker would (a subprocess in the
training folder) or in-process (for the SMP stand-ins, which live in this process's sys.modules)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from training_helpers import BLOCK_SIZE, TRAINING_DIR, load_module, run_script

from local.tiny import build_config, build_tokenizer, sentences


@pytest.fixture(scope="session")
def train_script() -> ModuleType:
    return load_module("training_train_entry", TRAINING_DIR / "train.py")


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tokenizer folder, GPT-J config JSON files (with and without dropout), and raw sst2-style data."""
    root = tmp_path_factory.mktemp("tiny-assets")
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(root / "tokenizer")
    config = build_config("gptj", vocab_size=len(tokenizer)).to_dict()
    (root / "gptj.json").write_text(json.dumps(config))
    # Dropout makes the RNG part of the training state, so resuming must restore it to match bit for bit.
    dropout = {**config, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
    (root / "gptj-dropout.json").write_text(json.dumps(dropout))
    raw = root / "raw"
    raw.mkdir()
    with (raw / "train.jsonl").open("w") as handle:
        for index, sentence in enumerate(sentences(2400, seed=1)):
            handle.write(json.dumps({"sentence": sentence, "label": index % 2}) + "\n")
    validation = root / "raw-validation"
    validation.mkdir()
    with (validation / "validation.tsv").open("w") as handle:
        handle.write("sentence\tlabel\n")
        for index, sentence in enumerate(sentences(200, seed=2)):
            handle.write(f"{sentence}\t{index % 2}\n")
    return {
        "root": root,
        "tokenizer": root / "tokenizer",
        "config": root / "gptj.json",
        "config_dropout": root / "gptj-dropout.json",
        "raw": raw,
        "raw_validation": validation,
    }


@pytest.fixture(scope="session")
def prepared_data(tiny_assets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """prepare_data.py output (train/ and validation/ JSON lines of 32-token blocks), produced once."""
    out = tmp_path_factory.mktemp("prepared")
    result = run_script(
        "prepare_data.py",
        [
            "--input_dir", str(tiny_assets["raw"]),
            "--validation_input_dir", str(tiny_assets["raw_validation"]),
            "--tokenizer_dir", str(tiny_assets["tokenizer"]),
            "--train_output_dir", str(out / "train"),
            "--validation_output_dir", str(out / "validation"),
            "--block_size", str(BLOCK_SIZE),
        ],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return {"train": out / "train", "validation": out / "validation", "stdout": out}


@pytest.fixture
def fresh_process_group() -> Iterator[None]:
    """Each in-process SMP run initializes torch.distributed in this process; leave none behind."""
    yield
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No SageMaker or torchrun variables leak in from the machine running the tests."""
    for key in list(os.environ):
        if key.startswith("SM_") or key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"):
            monkeypatch.delenv(key)
    yield
