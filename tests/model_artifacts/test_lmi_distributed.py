"""Rank discovery and the collectives the handler uses, with a real two-process gloo group."""

from __future__ import annotations

import torch.multiprocessing as mp
from lmi_distributed import Ranks, gather_errors, shared_random_seed


def test_ranks_come_from_torch_names_or_from_open_mpi():
    assert Ranks.from_environ({}) == Ranks(rank=0, local_rank=0, world_size=1)
    assert Ranks.from_environ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == Ranks(3, 1, 4)
    mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert Ranks.from_environ(mpi) == Ranks(1, 1, 2)


def test_a_single_process_needs_no_process_group():
    assert gather_errors(None) == []
    assert gather_errors("boom") == ["rank 0: boom"]
    assert 0 <= shared_random_seed() < 2**63


def _rank_main(rank: int, rendezvous: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        errors = gather_errors("download failed: AccessDenied" if rank == 0 else None)
        results[rank] = (errors, shared_random_seed())
    finally:
        dist.destroy_process_group()


def test_every_rank_learns_rank_zeros_error_and_draws_the_same_seed(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_rank_main, args=(str(tmp_path / "rendezvous"), results), nprocs=2, join=True)
        (errors_0, seed_0), (errors_1, seed_1) = results[0], results[1]
    assert errors_0 == errors_1 == ["rank 0: download failed: AccessDenied"]
    assert seed_0 == seed_1
