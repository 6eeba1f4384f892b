"""The pieces the loop relies on: the learning-rate schedule, the sharded data order, checkpoint completeness."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from finetune import checkpoints
from finetune.data import DataPosition, ShardedBatches, validation_batches
from finetune.layout import parse_layout, resolve_backend
from finetune.metrics import METRIC_DEFINITIONS, Reporter
from finetune.schedule import LearningRateSchedule


def test_learning_rate_warms_up_linearly_then_decays_to_min_lr() -> None:
    linear = LearningRateSchedule.create(peak_lr=1.0, min_lr=0.1, warmup_fraction=0.1, decay_steps=100, style="linear")
    assert [linear.at(step) for step in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert linear.at(9) == pytest.approx(1.0)
    assert linear.at(55) == pytest.approx(0.1 + 0.9 * 0.5)
    assert linear.at(100) == linear.at(500) == pytest.approx(0.1)
    cosine = LearningRateSchedule.create(peak_lr=1.0, min_lr=0.0, warmup_fraction=0.0, decay_steps=10, style="cosine")
    assert cosine.at(5) == pytest.approx(0.5) and cosine.at(0) == pytest.approx(1.0)
    constant = LearningRateSchedule.create(
        peak_lr=2.0, min_lr=0.0, warmup_fraction=0.5, decay_steps=4, style="constant"
    )
    assert [constant.at(step) for step in range(5)] == pytest.approx([1.0, 2.0, 2.0, 2.0, 2.0])


def test_data_parallel_ranks_split_exactly_the_single_process_batches() -> None:
    single = ShardedBatches(num_blocks=50, per_rank_batch=8, data_rank=0, data_size=1, seed=3)
    ranks = [ShardedBatches(num_blocks=50, per_rank_batch=4, data_rank=rank, data_size=2, seed=3) for rank in (0, 1)]
    position = DataPosition()
    seen = []
    for _ in range(single.batches_per_epoch * 2 + 1):  # across an epoch boundary
        together = torch.cat([shard.indices(position) for shard in ranks])
        assert torch.equal(together, single.indices(position))
        seen.append(position)
        position = single.advance(position)
    assert seen[6] == DataPosition(epoch=1, batch_index=0)
    # A new epoch is a new order; the same epoch is the same order (what resuming relies on).
    first, second = single.indices(DataPosition(0, 0)), single.indices(DataPosition(1, 0))
    assert not torch.equal(first, second)
    assert torch.equal(ShardedBatches(50, 8, 0, 1, seed=3).indices(DataPosition(1, 0)), second)


def test_validation_shares_are_disjoint_and_full_batches_only_drops_the_remainder() -> None:
    blocks = torch.arange(22).unsqueeze(1).repeat(1, 4)
    shares = [list(validation_batches(blocks, 4, rank, 2, None, False)) for rank in (0, 1)]
    rows = torch.cat([batch[:, 0] for share in shares for batch in share]).tolist()
    assert rows == list(range(22))
    assert [len(batch) for batch in shares[0]] == [4, 4, 3]
    assert [len(batch) for batch in validation_batches(blocks, 4, 0, 2, None, True)] == [4, 4]
    assert len(list(validation_batches(blocks, 4, 0, 1, 2, False))) == 2


def test_auto_backend_follows_mp_parameters_and_the_libraries_present() -> None:
    v1 = parse_layout({"ddp": True, "partitions": 1})
    v2 = parse_layout({"hybrid_shard_degree": 2})
    everything, nothing = (lambda module: True), (lambda module: False)
    assert resolve_backend("auto", v1, everything) == ("smp_v1", None)
    assert resolve_backend("auto", v2, everything) == ("smp_v2", None)
    assert resolve_backend("auto", parse_layout({}), everything) == ("torch", None)
    backend, note = resolve_backend("auto", v1, nothing)
    assert backend == "torch" and note is not None and "smdistributed.modelparallel.torch is not importable" in note
    assert resolve_backend("smp_v2", v1, nothing) == ("smp_v2", None)


def _write_checkpoint(root: Path, step: int, nodes: int = 1) -> Path:
    """A checkpoint written the way the loop writes one: files, trainer state, manifests, rename."""
    temporary = checkpoints.temporary_dir(root, step)
    (temporary / "rng").mkdir(parents=True)
    torch.save({"w": torch.ones(64)}, temporary / "model.pt")
    torch.save({"rank": 0}, temporary / "rng" / "rank_00000.pt")
    checkpoints.write_json_atomic(temporary / checkpoints.TRAINER_STATE_FILE, {"step": step, "num_nodes": nodes})
    for node in range(nodes):
        checkpoints.write_manifest(temporary, node)
    final = root / checkpoints.checkpoint_name(step)
    checkpoints.finalize(temporary, final)
    return final


def test_a_checkpoint_counts_only_when_every_listed_file_is_whole(tmp_path: Path) -> None:
    good = _write_checkpoint(tmp_path, 10)
    assert checkpoints.latest_complete(tmp_path) == (good, [])

    truncated = _write_checkpoint(tmp_path, 20)
    data = (truncated / "model.pt").read_bytes()
    (truncated / "model.pt").write_bytes(data[: len(data) // 2])  # an upload cut short
    no_manifest = _write_checkpoint(tmp_path, 30)
    (no_manifest / "manifest-node0.json").unlink()
    missing_node = _write_checkpoint(tmp_path, 40, nodes=2)
    (missing_node / "manifest-node1.json").unlink()  # the second node never finished
    (tmp_path / ".tmp-step_00000050").mkdir()  # a crash before the rename

    latest, skipped = checkpoints.latest_complete(tmp_path)
    assert latest == good
    assert skipped == [
        "skipping incomplete checkpoint step_00000040: manifest-node1.json missing or unreadable",
        "skipping incomplete checkpoint step_00000030: manifest-node0.json missing or unreadable",
        "skipping incomplete checkpoint step_00000020: model.pt missing or truncated",
    ]


def test_keeps_the_newest_complete_checkpoints_and_drops_older_debris(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        _write_checkpoint(tmp_path, step)
    (tmp_path / "step_00000015").mkdir()  # incomplete and older than the newest complete one
    (tmp_path / "step_00000050").mkdir()  # incomplete but newer: may still be arriving, kept
    removed = checkpoints.prune(tmp_path, keep=2)
    assert sorted(path.name for path in removed) == ["step_00000010", "step_00000015", "step_00000020"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step_00000030", "step_00000040", "step_00000050"]


def test_rng_state_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(1)
    checkpoints.save_rng_state(tmp_path, rank=3)
    expected = torch.rand(5)
    torch.manual_seed(99)
    assert checkpoints.load_rng_state(tmp_path, rank=3)
    assert torch.equal(torch.rand(5), expected)
    assert not checkpoints.load_rng_state(tmp_path, rank=4)


def test_metric_regexes_pick_the_right_value_from_each_line() -> None:
    import re

    train = "step=10 epoch=0 loss=2.3412 perplexity=10.3945 lr=2e-05 grad_norm=0.8123 tokens_per_s=1234.5 samples_per_s=38.58"
    validation = "step=10 val_loss=2.5011 val_perplexity=12.1953"
    found = {}
    for definition in METRIC_DEFINITIONS:
        for line in (train, validation):
            match = re.search(definition["Regex"], line)
            if match:
                found.setdefault(definition["Name"], []).append(float(match.group(1)))
    assert found == {
        "train:loss": [2.3412],
        "train:perplexity": [10.3945],
        "train:learning_rate": [2e-05],
        "train:tokens_per_second": [1234.5],
        "train:samples_per_second": [38.58],
        "validation:loss": [2.5011],
        "validation:perplexity": [12.1953],
    }
    assert math.isclose(found["train:perplexity"][0], 10.3945)
    assert json.loads(json.dumps(METRIC_DEFINITIONS)) == METRIC_DEFINITIONS  # plain data the CDK side can copy


def test_progress_bar_only_on_a_terminal_outside_sagemaker(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert Reporter(True, "auto", {}).uses_progress_bar
    assert not Reporter(True, "auto", {"SM_TRAINING_ENV": "{}"}).uses_progress_bar  # plain lines in SageMaker
    assert not Reporter(False, "true", {}).uses_progress_bar  # only the main process prints
    reporter = Reporter(True, "true", {})
    reporter.start(total=3, initial=1)
    reporter.log("step=2 loss=1.0000")
    reporter.advance(2)
    reporter.close()
    captured = capsys.readouterr()
    assert "step=2 loss=1.0000" in captured.out  # metric lines still reach stdout, above the bar
    assert "3/3" in captured.err
