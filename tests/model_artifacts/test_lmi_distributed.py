"""Rank discovery and the collectives the handler uses, with real two-process gloo groups."""

from __future__ import annotations

import importlib.util
import socket
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import lmi_generation
import lmi_loading
import torch.multiprocessing as mp
from lmi_distributed import Ranks, shared_random_seed

HANDLER_DIR = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"


def _results_manager():
    """The ranks' shared results, served by a process started fresh (spawn): a manager forked from the pytest worker,
    which runs tokenizers' and torch's threads, can inherit one of their locks held and hang forever."""
    return mp.get_context("spawn").Manager()


def test_ranks_come_from_torch_names_or_from_open_mpi():
    assert Ranks.from_environ({}) == Ranks(rank=0, local_rank=0, world_size=1)
    assert Ranks.from_environ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == Ranks(3, 1, 4)
    # What mpirun gives each process before DJL's djl_python_engine.py copies it into WORLD_SIZE/RANK/LOCAL_RANK.
    mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert Ranks.from_environ(mpi) == Ranks(1, 1, 2)


def test_a_single_process_needs_no_process_group():
    assert 0 <= shared_random_seed() < 2**63


def _rank_main(rank: int, rendezvous: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        results[rank] = shared_random_seed()
    finally:
        dist.destroy_process_group()


def test_every_rank_draws_the_same_seed(tmp_path):
    with _results_manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _rank_main, args=(str(tmp_path / "rendezvous"), results), nprocs=2, join=True, start_method="fork"
        )
        assert results[0] == results[1]


_connect = socket.socket.connect


def _no_network(self, address):
    # EnableNetworkIsolation: the container reaches no network. Local sockets stay (the test's result manager; DJL's
    # own unix sockets), and gloo's loopback connections are C++, not these.
    if self.family == socket.AF_UNIX:
        return _connect(self, address)
    raise OSError(f"network isolation: connect to {address} refused")


def _handler_rank(rank: int, tmp: str, delivered: str, results) -> None:
    """One DJL worker process of a TP=2 group, as djl_python_engine.py starts it, calling the handler's start-up
    with model_dir where SageMaker delivered the weights, and no network."""
    import torch.distributed as dist

    tmp_path = Path(tmp)
    socket.socket.connect = _no_network
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    loaded = []
    plan = SimpleNamespace(context_length=64, max_input_length=63, kernel_injection=False)
    lmi_loading.load_model = lambda weights_dir, config, **_: loaded.append(weights_dir) or (object(), object(), plan)
    lmi_generation.TextGenerator = lambda *args, **kwargs: SimpleNamespace(args=args, kwargs=kwargs)
    spec = importlib.util.spec_from_file_location(f"handler_rank_{rank}", HANDLER_DIR / "model.py")
    handler = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = handler
    spec.loader.exec_module(handler)
    try:
        import os

        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
        handler.TextGenerationService().initialize(
            {"tensor_parallel_degree": 2, "dtype": "fp32", "model_dir": delivered}  # as djl_python_engine.py sets
        )
        results[rank] = ("ready", loaded)
    except Exception as error:
        results[rank] = ("failed", f"{type(error).__name__}: {error}")
    finally:
        dist.destroy_process_group()


def test_every_rank_loads_the_delivered_folder_without_the_network(tmp_path):
    """SageMaker copied the prefix to model_dir before the container started: no rank downloads, waits for another,
    or opens a connection; each loads model_dir itself."""
    delivered = tmp_path / "opt-ml-model"
    delivered.mkdir()
    (delivered / "config.json").write_text('{"model_type": "bloom"}')
    with _results_manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _handler_rank, args=(str(tmp_path), str(delivered), results), nprocs=2, join=True, start_method="fork"
        )
        results = dict(results)
    assert results == {0: ("ready", [str(delivered)]), 1: ("ready", [str(delivered)])}
