"""Who this process is among the tensor-parallel ranks, and the few collective steps the handler needs.

DJL starts `engine=DeepSpeed` workers with mpirun, one process per GPU of a model copy, and its Python engine copies
OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK} into WORLD_SIZE, RANK and LOCAL_RANK. Every request is sent to every rank.
A single process (local runs, TP=1) has none of these and is rank 0 of 1; then every collective here is a no-op.

Timeouts: every collective on the default process group fails after the group's timeout, which deepspeed
0.12.6's init_distributed sets to 30 minutes (deepspeed/constants.py default_pg_timeout, DEEPSPEED_TIMEOUT env in
minutes). Waiting for local rank 0's download can take longer than that (BLOOM-176B's start-up is sized at 47
minutes), so that one wait runs in a gloo group of its own whose timeout is DJL's model-loading timeout
(long_wait_group); the default group keeps its default for everything else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Ranks:
        env = os.environ if environ is None else environ

        def read(name: str, mpi_name: str, default: int) -> int:
            value = env.get(name, env.get(mpi_name))
            return default if value in (None, "") else int(value)

        return cls(
            rank=read("RANK", "OMPI_COMM_WORLD_RANK", 0),
            local_rank=read("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", 0),
            world_size=read("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", 1),
        )


def init_process_group(ranks: Ranks, *, use_cuda: bool) -> None:
    """Join the tensor-parallel group (NCCL on GPUs, gloo on CPU); nothing to do for a single process."""
    if ranks.world_size <= 1:
        return
    import deepspeed
    import torch
    import torch.distributed as dist

    if use_cuda:
        # Collectives of objects (below) and DeepSpeed's placement use the current device.
        torch.cuda.set_device(ranks.local_rank)
    if not dist.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if use_cuda else "gloo")
    log.info("rank %d/%d (local rank %d) joined the process group", ranks.rank, ranks.world_size, ranks.local_rank)


@contextlib.contextmanager
def long_wait_group(timeout_seconds: float) -> Iterator[object | None]:
    """A process group of every rank for one long wait, failing only after `timeout_seconds` (None: no group needed).

    gloo, whatever the default backend: it times out by itself, on CPU, without NCCL's watchdog (the LMI image sets
    NCCL_ASYNC_ERROR_HANDLING=1, so a timed-out NCCL collective would take the process down). Every rank must enter
    it, in the same order, like any new_group.
    """
    if not _group_active():
        yield None
        return
    import torch.distributed as dist

    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_seconds))
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


def gather_errors(error: str | None, group: object | None = None) -> list[str]:
    """Barrier that also tells every rank which ranks failed: returns ["rank N: error", ...], empty if none did.

    It waits as long as `group` allows (the default group's timeout when None)."""
    if not _group_active():
        return [f"rank 0: {error}"] if error else []
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size(group=group)
    dist.all_gather_object(gathered, error, group=group)
    return [f"rank {rank}: {message}" for rank, message in enumerate(gathered) if message]


def shared_random_seed() -> int:
    """A fresh seed, the same on every rank: tensor-parallel ranks sample together, so they must draw alike."""
    seed = random.SystemRandom().randrange(2**63)
    if not _group_active():
        return seed
    import torch.distributed as dist

    box = [seed]
    dist.broadcast_object_list(box, src=0)
    return int(box[0])


def _group_active() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
