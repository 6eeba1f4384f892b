"""DDP with 2 processes on CPU (gloo), launched by torchrun as train.py's docstring says, against one process with
the same global batch: the loss curves must agree within floating-point tolerance."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from finetune import checkpoints
from training_helpers import TRAINING_DIR, read_log_records, train_arguments

STEPS = 12
OPTIONS = {"max_steps": STEPS, "validation_freq": 0, "checkpoint_freq": 6, "activation_checkpointing": "true"}


def test_two_process_ddp_matches_one_process_with_the_same_global_batch(
    train_script, tiny_assets, prepared_data, tmp_path, clean_environment, capsys
) -> None:
    # An even number of validation blocks, so that the two ranks' halves are exactly the single process's whole
    # (with an odd count the last block is left out under DDP, by design).
    blocks = (prepared_data["validation"] / "validation.jsonl").read_text().splitlines()
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "validation.jsonl").write_text("\n".join(blocks[: len(blocks) // 2 * 2]) + "\n")
    data = {**prepared_data, "validation": tmp_path / "validation"}
    # 2 ranks x 4 sequences = the single process's 8 per step.
    ddp_arguments = train_arguments(tiny_assets, data, tmp_path / "ddp", train_batch_size=4, **OPTIONS)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("SM_")}
    environment.update({"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"})
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    ddp = subprocess.run(
        [*launcher, "train.py", *ddp_arguments],
        cwd=TRAINING_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]

    capsys.readouterr()
    train_script.run(train_arguments(tiny_assets, data, tmp_path / "single", train_batch_size=8, **OPTIONS), {})
    single_log = capsys.readouterr().out

    ddp_records, single_records = read_log_records(ddp.stdout), read_log_records(single_log)
    assert "world_size=2 data_parallel_size=2" in ddp.stdout and "global_batch_size=8" in ddp.stdout
    ddp_losses = [float(record["loss"]) for record in ddp_records if "loss" in record]
    single_losses = [float(record["loss"]) for record in single_records if "loss" in record]
    assert len(ddp_losses) == len(single_losses) == STEPS
    assert ddp_losses == pytest.approx(single_losses, abs=1e-3)
    assert ddp_losses[-1] < ddp_losses[0] - 1.0  # and it is learning, not agreeing on a flat line
    ddp_validation = [float(record["val_loss"]) for record in ddp_records if "val_loss" in record]
    single_validation = [float(record["val_loss"]) for record in single_records if "val_loss" in record]
    assert ddp_validation == pytest.approx(single_validation, abs=1e-3)

    # The DDP checkpoint: one model copy from rank 0, an RNG state per rank, one node manifest.
    checkpoint = tmp_path / "ddp" / "checkpoints" / "step_00000006"
    assert checkpoints.incompleteness(checkpoint) is None
    state = json.loads((checkpoint / checkpoints.TRAINER_STATE_FILE).read_text())
    assert (state["world_size"], state["data_parallel_size"], state["num_nodes"]) == (2, 2, 1)
    assert sorted(path.name for path in (checkpoint / "rng").iterdir()) == ["rank_00000.pt", "rank_00001.pt"]
    assert (tmp_path / "ddp" / "model" / "model.safetensors").is_file()
