"""prepare_data.py: raw text in the formats the pipeline accepts -> the model's tokens -> fixed-length blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from finetune.errors import ConfigurationError
from training_helpers import BLOCK_SIZE, TRAINING_DIR, load_module

from local.tiny import sentences


@pytest.fixture(scope="module")
def prepare_data():
    return load_module("training_prepare_data_entry", TRAINING_DIR / "prepare_data.py")


def _blocks(path: Path) -> list[list[int]]:
    return [json.loads(line)["input_ids"] for line in path.read_text().splitlines()]


def test_packs_every_document_with_an_eos_into_equal_blocks(prepared_data, tiny_assets) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_assets["tokenizer"])
    train = _blocks(prepared_data["train"] / "train.jsonl")
    assert train and {len(block) for block in train} == {BLOCK_SIZE}
    stream = [token for block in train for token in block]
    # Documents are joined by EOS, in order: the first documents come back out of the stream.
    first_documents = tokenizer.decode(stream).split(tokenizer.eos_token)[:3]
    expected = [json.loads(line)["sentence"] for line in (tiny_assets["raw"] / "train.jsonl").read_text().splitlines()]
    assert first_documents == expected[:3]
    # The validation input (sst2-style TSV with a label column) was used as given, not split off the training data.
    validation_text = tokenizer.decode(
        [t for block in _blocks(prepared_data["validation"] / "validation.jsonl") for t in block]
    )
    assert validation_text.startswith(sentences(1, seed=2)[0])


def test_splits_off_a_seeded_validation_fraction_without_a_validation_input(
    prepare_data, tiny_assets, tmp_path
) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    texts = sentences(300, seed=5)
    (raw / "a.txt").write_text("\n".join(texts[:100]) + "\n\n")
    (raw / "b.csv").write_text("text,label\n" + "".join(f"{text},1\n" for text in texts[100:200]))
    (raw / "c.json").write_text(json.dumps([{"sentence": text} for text in texts[200:]]))

    def run(name: str) -> dict:
        return prepare_data.prepare(
            prepare_data.build_parser().parse_args(
                [
                    "--input_dir", str(raw),
                    "--validation_input_dir", str(tmp_path / "absent"),
                    "--tokenizer_dir", str(tiny_assets["tokenizer"]),
                    "--train_output_dir", str(tmp_path / name / "train"),
                    "--validation_output_dir", str(tmp_path / name / "validation"),
                    "--validation_fraction", "0.1",
                    "--seed", "3",
                ]
            )
        )  # fmt: skip

    summary = run("first")
    assert (summary["train_documents"], summary["validation_documents"]) == (270, 30)
    assert summary["block_size"] == 128  # the tiny tokenizer's model_max_length (below the 1024 cap)
    run("second")
    for split in ("train", "validation"):
        assert (tmp_path / "first" / split / f"{split}.jsonl").read_text() == (
            tmp_path / "second" / split / f"{split}.jsonl"
        ).read_text()


def test_rejects_rows_without_text(prepare_data, tmp_path) -> None:
    (tmp_path / "bad.jsonl").write_text(json.dumps({"review": "no text column"}) + "\n")
    with pytest.raises(ConfigurationError, match=r"bad\.jsonl:1: expected an object with a text or sentence string"):
        prepare_data.load_documents(tmp_path, "--input_dir")


def test_rejects_a_validation_split_smaller_than_one_block(prepare_data, tiny_assets, tmp_path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.txt").write_text("\n".join(sentences(40)))
    arguments = prepare_data.build_parser().parse_args(
        [
            *("--input_dir", str(raw), "--validation_input_dir", str(tmp_path / "absent")),
            *("--tokenizer_dir", str(tiny_assets["tokenizer"]), "--block_size", "64", "--validation_fraction", "0.02"),
            *("--train_output_dir", str(tmp_path / "t"), "--validation_output_dir", str(tmp_path / "v")),
        ]
    )
    with pytest.raises(
        ConfigurationError, match=r"the validation split \(\d+ documents\) has fewer tokens than one block of 64"
    ):
        prepare_data.prepare(arguments)
