"""prepare_data.py -> train.py -> evaluate.py end to end on a tiny GPT-J, each a subprocess run as SageMaker runs
it; then a real SIGKILL mid-run and a restart that must end with the same weights as the uninterrupted run."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import tarfile

import pytest
import torch
from finetune import checkpoints
from finetune.metrics import METRIC_DEFINITIONS
from safetensors.torch import load_file
from training_helpers import (
    BLOCK_SIZE,
    TRAINING_DIR,
    load_module,
    load_saved_model,
    read_log_records,
    run_script,
    run_train_py_until_killed,
    train_arguments,
)

from local.tiny import sentences

# Dropout on (so RNG state matters for the resume), checkpoints every 10 steps, the newest 2 kept.
RUN_OPTIONS = {
    "dropout": True,
    "max_steps": 50,
    "checkpoint_freq": 10,
    "num_kept_checkpoints": 2,
}


@pytest.fixture(scope="module")
def reference_run(tiny_assets, prepared_data, tmp_path_factory) -> dict:
    """One uninterrupted 50-step run; several tests read its log and outputs."""
    run_dir = tmp_path_factory.mktemp("reference-run")
    result = run_script("train.py", train_arguments(tiny_assets, prepared_data, run_dir, **RUN_OPTIONS))
    assert result.returncode == 0, result.stderr[-3000:]
    return {"dir": run_dir, "stdout": result.stdout}


def test_loss_falls_clearly_and_perplexity_is_reported(reference_run) -> None:
    train = [record for record in read_log_records(reference_run["stdout"]) if "loss" in record]
    losses = [float(record["loss"]) for record in train]
    assert [int(record["step"]) for record in train] == list(range(1, 51))
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses

    validation = [record for record in read_log_records(reference_run["stdout"]) if "val_loss" in record]
    assert [int(record["step"]) for record in validation] == [25, 50]
    for record in validation:
        assert float(record["val_perplexity"]) == pytest.approx(math.exp(float(record["val_loss"])), rel=1e-3)
    assert float(validation[-1]["val_loss"]) < float(validation[0]["val_loss"])

    metrics = json.loads((reference_run["dir"] / "output" / "metrics.json").read_text())
    assert metrics["final"]["step"] == 50
    assert metrics["final"]["val_perplexity"] == pytest.approx(float(validation[-1]["val_perplexity"]), rel=1e-4)
    assert len(metrics["train"]) == 50 and metrics["backend"] == "torch"


def test_metric_definitions_match_what_train_prints(reference_run) -> None:
    stdout = reference_run["stdout"]
    values = {item["Name"]: [float(v) for v in re.findall(item["Regex"], stdout)] for item in METRIC_DEFINITIONS}
    records = read_log_records(stdout)
    assert values["train:loss"] == [float(record["loss"]) for record in records if "loss" in record]
    assert values["validation:loss"] == [float(record["val_loss"]) for record in records if "val_loss" in record]
    assert len(values["validation:perplexity"]) == 2
    for name in ("train:perplexity", "train:learning_rate", "train:tokens_per_second", "train:samples_per_second"):
        assert len(values[name]) == 50 and all(value > 0 for value in values[name]), name


def test_saved_model_loads_with_from_pretrained_and_generates(reference_run) -> None:
    from transformers import AutoTokenizer

    model_dir = reference_run["dir"] / "model"
    assert (model_dir / "model.safetensors").is_file()
    assert not list(model_dir.glob("*.bin"))
    assert not (model_dir / ".full_state").exists()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_saved_model(model_dir).eval()
    assert type(model).__name__ == "GPTJForCausalLM" and model.config.use_cache
    encoded = tokenizer("the model", return_tensors="pt")
    # Only ids and mask: transformers 4.2x tokenizers also return token_type_ids, which GPT-J would embed.
    inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    continuation = tokenizer.decode(output[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    # It learned the training sentences' vocabulary and their full stop (then EOS ends the generation).
    vocabulary = {word for sentence in sentences(400, seed=1) for word in sentence.rstrip(".").split()}
    words = continuation.strip().rstrip(".").split()
    assert words and set(words) <= vocabulary, continuation
    assert continuation.strip().endswith(".")


def test_evaluation_step_reports_the_final_validation_perplexity(reference_run, prepared_data, tmp_path) -> None:
    packed = tmp_path / "model"
    packed.mkdir()
    with tarfile.open(packed / "model.tar.gz", "w:gz") as archive:  # what SageMaker makes of SM_MODEL_DIR
        for path in (reference_run["dir"] / "model").iterdir():
            archive.add(path, arcname=path.name)
    evaluate = load_module("training_evaluate_entry", TRAINING_DIR / "evaluate.py")
    arguments = ["--model_dir", str(packed), "--validation_dir", str(prepared_data["validation"])]
    assert evaluate.main([*arguments, "--output_dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "evaluation.json").read_text())
    final = json.loads((reference_run["dir"] / "output" / "metrics.json").read_text())["final"]
    assert report["metrics"]["perplexity"]["value"] == pytest.approx(final["val_perplexity"], rel=1e-4)
    assert report["metrics"]["loss"]["value"] == pytest.approx(final["val_loss"], rel=1e-4)
    blocks = len((prepared_data["validation"] / "validation.jsonl").read_text().splitlines())
    assert report["tokens"] == blocks * (BLOCK_SIZE - 1)


def test_keeps_only_the_newest_complete_checkpoints(reference_run) -> None:
    kept = sorted(path.name for path in (reference_run["dir"] / "checkpoints").iterdir())
    assert kept == ["step_00000030", "step_00000040"]


@pytest.mark.bad_input("kill")
def test_resumes_to_identical_weights_after_sigkill(
    reference_run, train_script, tiny_assets, prepared_data, tmp_path, clean_environment, capsys
) -> None:
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path, **RUN_OPTIONS)
    run_train_py_until_killed(arguments, when="checkpoint saved: step=20")
    assert not (tmp_path / "model").exists()

    # What a crash mid-write and a partial S3 restore leave behind: neither may be taken for a checkpoint, and the
    # resumed run writes its own step 30 over the partial one.
    checkpoint_root = tmp_path / "checkpoints"
    (checkpoint_root / ".tmp-step_00000035").mkdir()
    partial = checkpoint_root / "step_00000030"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(checkpoint_root / "step_00000020", partial)
    (partial / "manifest-node0.json").unlink()

    # The restart, in-process (it is train.py's run(), as main() calls it) to keep the suite fast.
    capsys.readouterr()
    train_script.run(arguments, {})
    stdout = capsys.readouterr().out
    assert "skipping incomplete checkpoint step_00000030: manifest-node0.json missing or unreadable" in stdout
    assert re.search(r"resumed from checkpoint \S+step_00000020 at step 20\n", stdout)
    assert checkpoints.incompleteness(checkpoint_root / "step_00000030") is None
    assert not (checkpoint_root / ".tmp-step_00000035").exists()

    expected = load_file(reference_run["dir"] / "model" / "model.safetensors")
    actual = load_file(tmp_path / "model" / "model.safetensors")
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[name], actual[name]) for name in expected)
    # The whole run's history survives the restart, identical to the uninterrupted run's.
    reference_metrics = json.loads((reference_run["dir"] / "output" / "metrics.json").read_text())
    resumed_metrics = json.loads((tmp_path / "output" / "metrics.json").read_text())
    assert [r["loss"] for r in resumed_metrics["train"]] == [r["loss"] for r in reference_metrics["train"]]
    assert resumed_metrics["validation"] == reference_metrics["validation"]


# Kill points drawn once from a seeded generator: anywhere in the run, between checkpoints or right after one.
RANDOM_KILL_STEPS = sorted(random.Random(2026).sample(range(3, RUN_OPTIONS["max_steps"]), 2))


@pytest.mark.bad_input("kill")
@pytest.mark.parametrize("kill_step", RANDOM_KILL_STEPS)
def test_killed_at_a_random_step_resumes_to_identical_weights(
    kill_step, reference_run, train_script, tiny_assets, prepared_data, tmp_path, clean_environment, capsys
) -> None:
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path, **RUN_OPTIONS)
    run_train_py_until_killed(arguments, when=f"step={kill_step} ")

    capsys.readouterr()
    train_script.run(arguments, {})
    stdout = capsys.readouterr().out
    # Past the first checkpoint interval there is a complete checkpoint to resume from (at step 10, the kill may
    # land while the first one is being written: then the run starts over, which must also end identically).
    if kill_step > RUN_OPTIONS["checkpoint_freq"]:
        assert "resumed from checkpoint" in stdout
    expected = load_file(reference_run["dir"] / "model" / "model.safetensors")
    actual = load_file(tmp_path / "model" / "model.safetensors")
    assert all(torch.equal(expected[name], actual[name]) for name in expected)
