"""Who this process is among the tensor-parallel ranks, and the few collective steps the handler needs.

DJL starts `engine=DeepSpeed` workers with mpirun, one process per GPU of a model copy, and its Python engine copies
OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK} into WORLD_SIZE, RANK and LOCAL_RANK. Every request is sent to every rank.
A single process (local runs, TP=1) has none of these and is rank 0 of 1; then every collective here is a no-op.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass

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
