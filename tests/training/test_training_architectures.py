"""The same code trains OPT, BLOOM, GPT-NeoX and GPT-2 without special cases (GPT-J is the end-to-end test), and
the saved HF folder holds exactly the weights it validated (tied input/output embeddings included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from training_helpers import TRAINING_DIR, load_module, train_arguments

from local.tiny import build_config, save_tiny_model


@pytest.mark.parametrize("arch", ["opt", "bloom", "gpt_neox", "gpt2"])
def test_trains_and_saves_any_causal_lm(
    arch, train_script, tiny_assets, prepared_data, tmp_path: Path, clean_environment
) -> None:
    vocab_size = json.loads(tiny_assets["config"].read_text())["vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(build_config(arch, vocab_size=vocab_size).to_dict()))
    arguments = train_arguments(
        tiny_assets,
        prepared_data,
        tmp_path,
        model_config=tmp_path / "config.json",
        max_steps=4,
        checkpoint_freq=2,
        validation_freq=0,
        activation_checkpointing="true",
    )
    summary = train_script.run(arguments, {})
    assert summary["train_loss"] < 10

    evaluate = load_module("training_evaluate_for_architectures", TRAINING_DIR / "evaluate.py")
    report = evaluate.evaluate(tmp_path / "model", str(prepared_data["validation"]), batch_size=8)
    assert report["metrics"]["loss"]["value"] == pytest.approx(summary["val_loss"], rel=1e-4)
    saved = json.loads((tmp_path / "model" / "config.json").read_text())
    assert saved["model_type"] == arch and saved["use_cache"] is True


def test_fine_tunes_the_pretrained_weights_of_the_model_channel(
    train_script, tiny_assets, prepared_data, tmp_path: Path, clean_environment, capsys
) -> None:
    """The `model` channel (SM_CHANNEL_MODEL) holds an HF folder with safetensors and the tokenizer: training starts
    from those weights, not from a fresh init."""
    pretrained = save_tiny_model(tmp_path / "channel-model", arch="gptj")  # same tokenizer as the prepared data
    evaluate = load_module("training_evaluate_for_pretrained", TRAINING_DIR / "evaluate.py")
    before = evaluate.evaluate(pretrained, str(prepared_data["validation"]), batch_size=8)["metrics"]["loss"]["value"]
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=1, lr=1e-12, min_lr=0)
    for flag in ("--model_config", "--tokenizer_dir"):
        index = arguments.index(flag)
        del arguments[index : index + 2]
    # An update of 1e-12 leaves the weights as loaded, so the validation loss is the pretrained model's.
    summary = train_script.run(arguments, {"SM_CHANNEL_MODEL": str(pretrained), "SM_NUM_GPUS": "8"})
    assert summary["val_loss"] == pytest.approx(before, rel=1e-5)
    assert (
        "note: this instance has 8 GPUs (SM_NUM_GPUS) but runs 1 training process(es) per node"
        in capsys.readouterr().out
    )
    assert (tmp_path / "model" / "tokenizer.json").is_file()
