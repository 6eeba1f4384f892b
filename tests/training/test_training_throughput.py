"""tokens/s and samples/s in the train log lines measure training steps only: time spent validating or writing
checkpoints between two log lines does not lower them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from finetune import loop
from finetune.backends.torch_backend import TorchBackend
from training_helpers import BLOCK_SIZE, read_log_records, train_arguments

STEP_SECONDS = 0.5  # per micro-step, on the fake clock
PAUSE_SECONDS = 100.0  # per validation and per checkpoint


def test_throughput_excludes_validation_and_checkpoint_time(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, capsys, clean_environment
) -> None:
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: clock.now))

    def taking(seconds, method):
        def timed(*args, **kwargs):
            clock.now += seconds
            return method(*args, **kwargs)

        return timed

    monkeypatch.setattr(TorchBackend, "train_micro_step", taking(STEP_SECONDS, TorchBackend.train_micro_step))
    monkeypatch.setattr(loop.TrainingRun, "_validate", taking(PAUSE_SECONDS, loop.TrainingRun._validate))
    monkeypatch.setattr(loop.TrainingRun, "_save_checkpoint", taking(PAUSE_SECONDS, loop.TrainingRun._save_checkpoint))

    batch, accumulation = 4, 2
    arguments = train_arguments(
        tiny_assets, prepared_data, tmp_path, max_steps=6, train_batch_size=batch, val_batch_size=4,
        gradient_accumulation=accumulation, logging_freq=2, validation_freq=1, checkpoint_freq=1, validation_batches=1,
    )  # fmt: skip
    train_script.run(arguments, {})

    step_seconds = accumulation * STEP_SECONDS
    tokens_per_s = batch * accumulation * BLOCK_SIZE / step_seconds
    records = read_log_records(capsys.readouterr().out)
    train_records = [record for record in records if "tokens_per_s" in record]
    assert [int(record["step"]) for record in train_records] == [2, 4, 6]
    for record in train_records:
        assert float(record["tokens_per_s"]) == pytest.approx(tokens_per_s, rel=1e-3)
        assert float(record["samples_per_s"]) == pytest.approx(batch * accumulation / step_seconds, rel=1e-3)
    history = json.loads((tmp_path / "output" / "metrics.json").read_text())["train"]
    assert [entry["tokens_per_s"] for entry in history] == pytest.approx([tokens_per_s] * 3)
