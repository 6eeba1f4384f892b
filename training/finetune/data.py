"""Packed token blocks as JSON lines, and the deterministic, resumable order in which training reads them.

The format between prepare_data.py and train.py: files `*.jsonl` (or `*.json`) in a folder, one block per line,
`{"input_ids": [...]}` with the same length (the block size) on every line; labels are the inputs (causal LM).
Every rank holds all blocks in memory as one tensor (a few hundred MB for millions of blocks), which keeps the
order a pure function of (seed, epoch) and resuming a matter of restoring a counter.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch

from .errors import ConfigurationError

BLOCK_FILE_SUFFIXES = (".jsonl", ".json")


def list_block_files(directory: str, what: str) -> list[Path]:
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigurationError(f"{what} data folder {directory} does not exist (check the channel or the flag)")
    files = sorted(path for path in folder.iterdir() if path.is_file() and path.suffix in BLOCK_FILE_SUFFIXES)
    if not files:
        present = ", ".join(sorted(path.name for path in folder.iterdir())[:5]) or "nothing"
        raise ConfigurationError(
            f"{what} data folder {directory} has no {' or '.join(BLOCK_FILE_SUFFIXES)} files (found: {present}); "
            "run prepare_data.py to produce them"
        )
    return files


def read_blocks(directory: str, what: str) -> torch.Tensor:
    """All blocks of a folder as a LongTensor [blocks, block_size]; errors name the file and line."""
    rows: list[list[int]] = []
    for path in list_block_files(directory, what):
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    ids = json.loads(line)["input_ids"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ConfigurationError(
                        f"{path}:{number} is not a JSON object with an input_ids list (expected prepare_data.py output)"
                    ) from None
                if rows and len(ids) != len(rows[0]):
                    raise ConfigurationError(
                        f"{path}:{number} has {len(ids)} tokens but earlier blocks have {len(rows[0])}: blocks must "
                        "all have the same length (prepare_data.py --block_size)"
                    )
                rows.append(ids)
    if not rows:
        raise ConfigurationError(f"{what} data in {directory} is empty: its files hold no blocks")
    if len(rows[0]) < 2:
        raise ConfigurationError(f"{what} blocks have {len(rows[0])} token(s); a causal LM needs at least 2")
    return torch.tensor(rows, dtype=torch.long)


def write_blocks(path: Path, blocks: Iterable[Sequence[int]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for block in blocks:
            handle.write(json.dumps({"input_ids": list(block)}) + "\n")
            count += 1
    return count


@dataclasses.dataclass(frozen=True)
class DataPosition:
    """Where the next micro-batch starts: epoch, and global micro-batches already read in that epoch."""

    epoch: int = 0
    batch_index: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> DataPosition:
        return cls(epoch=int(data["epoch"]), batch_index=int(data["batch_index"]))


class ShardedBatches:
    """A new seeded permutation each epoch, cut into global batches; each data-parallel rank takes its slice.

    A global batch is `per_rank_batch x data_parallel_size` consecutive entries of the permutation, so one process
    and N processes see the same samples in the same optimizer step (what the DDP equivalence relies on).
    """

    def __init__(self, num_blocks: int, per_rank_batch: int, data_rank: int, data_size: int, seed: int) -> None:
        self.per_rank_batch = per_rank_batch
        self.global_batch = per_rank_batch * data_size
        self.data_rank = data_rank
        self.num_blocks = num_blocks
        self.seed = seed
        self.batches_per_epoch = num_blocks // self.global_batch
        if self.batches_per_epoch == 0:
            raise ConfigurationError(
                f"the training data has {num_blocks} blocks, fewer than one global batch of {self.global_batch} "
                f"(train_batch_size {per_rank_batch} x data-parallel size {data_size}); add data or lower "
                "--train_batch_size"
            )
        self._epoch: int | None = None
        self._permutation = torch.empty(0, dtype=torch.long)

    def _order(self, epoch: int) -> torch.Tensor:
        if self._epoch != epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._permutation = torch.randperm(self.num_blocks, generator=generator)
            self._epoch = epoch
        return self._permutation

    def indices(self, position: DataPosition) -> torch.Tensor:
        start = position.batch_index * self.global_batch + self.data_rank * self.per_rank_batch
        return self._order(position.epoch)[start : start + self.per_rank_batch]

    def advance(self, position: DataPosition) -> DataPosition:
        if position.batch_index + 1 >= self.batches_per_epoch:
            return DataPosition(epoch=position.epoch + 1, batch_index=0)
        return DataPosition(epoch=position.epoch, batch_index=position.batch_index + 1)


def validation_batches(
    blocks: torch.Tensor,
    batch_size: int,
    data_rank: int,
    data_size: int,
    max_batches: int | None,
    full_batches_only: bool,
) -> Iterator[torch.Tensor]:
    """This rank's contiguous share of the validation blocks, in batches (ranks share evenly; a remainder of fewer
    than data_size blocks is left out so every rank runs the same number of forwards)."""
    per_rank = blocks.shape[0] // data_size
    share = blocks[data_rank * per_rank : (data_rank + 1) * per_rank]
    starts = range(0, share.shape[0], batch_size)
    for produced, start in enumerate(starts):
        batch = share[start : start + batch_size]
        if (full_batches_only and batch.shape[0] < batch_size) or (max_batches is not None and produced >= max_batches):
            return
        yield batch
