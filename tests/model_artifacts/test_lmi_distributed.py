"""Rank discovery and the collectives the handler uses, with real two-process gloo groups."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import boto3  # imported before the ranks fork, so they inherit them rather than import them twice
import lmi_generation
import lmi_loading
import moto
import torch.multiprocessing as mp
from lmi_distributed import Ranks, gather_errors, long_wait_group, shared_random_seed
from s3_standins import install_s5cmd, s5cmd_environment

HANDLER_DIR = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"
BUCKET = "lmi-test-weights"
PREFIX = "models/bloom-int8/"
# The process group's timeout stands in for the 30 minutes of deepspeed 0.12.6 (deepspeed/constants.py
# default_pg_timeout); the download for local rank 0's, which on a 47-minute BLOOM start-up takes longer than that.
GROUP_TIMEOUT_S = 1
DOWNLOAD_S = 3
MODEL_FILES = {"config.json": b'{"model_type": "bloom"}', "tokenizer.json": b"{}", "shard.pt": os.urandom(2048)}


def test_ranks_come_from_torch_names_or_from_open_mpi():
    assert Ranks.from_environ({}) == Ranks(rank=0, local_rank=0, world_size=1)
    assert Ranks.from_environ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == Ranks(3, 1, 4)
    # What mpirun gives each process before DJL's djl_python_engine.py copies it into WORLD_SIZE/RANK/LOCAL_RANK.
    mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert Ranks.from_environ(mpi) == Ranks(1, 1, 2)


def test_a_single_process_needs_no_process_group():
    assert gather_errors(None) == []
    assert gather_errors("boom") == ["rank 0: boom"]
    assert 0 <= shared_random_seed() < 2**63
    with long_wait_group(1) as group:
        assert group is None


def _rank_main(rank: int, rendezvous: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        errors = gather_errors("download failed: AccessDenied" if rank == 0 else None)
        seed = shared_random_seed()
        # A long wait ends at its own timeout: neither at the default group's (60 s here) nor when rank 0 comes.
        started = time.monotonic()
        try:
            with long_wait_group(1) as group:
                if rank == 0:
                    time.sleep(3)
                gather_errors(None, group=group)
            waited = ("returned", time.monotonic() - started)
        except RuntimeError:
            waited = ("timed out", time.monotonic() - started)
        results[rank] = (errors, seed, waited)
    finally:
        dist.destroy_process_group()


def test_every_rank_learns_rank_zeros_error_draws_the_same_seed_and_a_long_wait_still_times_out(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _rank_main, args=(str(tmp_path / "rendezvous"), results), nprocs=2, join=True, start_method="fork"
        )
        (errors_0, seed_0, _), (errors_1, seed_1, waited_1) = results[0], results[1]
    assert errors_0 == errors_1 == ["rank 0: download failed: AccessDenied"]
    assert seed_0 == seed_1
    assert waited_1[0] == "timed out" and waited_1[1] < 3, waited_1


def _handler_rank(rank: int, tmp: str, model_loading_timeout: str, results) -> None:
    """One DJL worker process of a TP=2 group, as djl_python_engine.py starts it, calling the handler's start-up."""
    import torch.distributed as dist

    tmp_path = Path(tmp)
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "WEIGHTS_S3_URI": f"s3://{BUCKET}/{PREFIX}",
            **{name: "testing" for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")},
            "AWS_DEFAULT_REGION": "us-east-1",
            **s5cmd_environment(
                tmp_path / "bin", tmp_path / "mirror", tmp_path / "s5cmd.log", S5CMD_STANDIN_DELAY=str(DOWNLOAD_S)
            ),
        }
    )
    # The group as deepspeed.init_distributed leaves it, with a short default timeout.
    dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp_path / 'rendezvous'}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=GROUP_TIMEOUT_S),
    )
    # Only the wait for the weights is under test: no model is built.
    plan = SimpleNamespace(context_length=64, max_input_length=63, kernel_injection=False)
    lmi_loading.load_model = lambda weights_dir, config, **_: (object(), object(), plan)
    lmi_generation.TextGenerator = lambda *args, **kwargs: SimpleNamespace(args=args, kwargs=kwargs)
    spec = importlib.util.spec_from_file_location(f"handler_rank_{rank}", HANDLER_DIR / "model.py")
    handler = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = handler
    spec.loader.exec_module(handler)
    started = time.monotonic()
    try:
        with moto.mock_aws():
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket=BUCKET)
            for relative, content in MODEL_FILES.items():
                s3.put_object(Bucket=BUCKET, Key=PREFIX + relative, Body=content)
            service = handler.TextGenerationService()
            service.initialize(
                {
                    "tensor_parallel_degree": 2,  # djl_python_engine.py sets it as an int
                    "model_loading_timeout": model_loading_timeout,  # a string, like every option.* value
                    "download_dir": str(tmp_path / "weights"),
                    "dtype": "fp32",
                    "model_dir": str(HANDLER_DIR),
                }
            )
        results[rank] = ("ready", time.monotonic() - started)
    except Exception as error:
        results[rank] = ("failed", f"{type(error).__name__}: {error}")
    finally:
        dist.destroy_process_group()


def _start_two_ranks(tmp_path, model_loading_timeout: str) -> dict:
    # The s5cmd stand-in reads "S3" from this mirror: the same bytes rank 0 puts into its moto.
    for relative, content in MODEL_FILES.items():
        (tmp_path / "mirror" / BUCKET / PREFIX / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mirror" / BUCKET / PREFIX / relative).write_bytes(content)
    install_s5cmd(tmp_path / "bin")
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _handler_rank,
            args=(str(tmp_path), model_loading_timeout, results),
            nprocs=2,
            join=True,
            start_method="fork",
        )
        return dict(results)


def test_ranks_wait_for_a_download_longer_than_the_process_groups_timeout(tmp_path):
    """Local rank 0 downloads for longer than the default group's timeout; the other rank waits as long as DJL's
    model-loading timeout allows, and both come up with the weights."""
    results = _start_two_ranks(tmp_path, model_loading_timeout="120")
    assert results[0][0] == results[1][0] == "ready", results
    assert results[1][1] >= DOWNLOAD_S > GROUP_TIMEOUT_S  # it really waited past the group's timeout
    weights = tmp_path / "weights" / BUCKET / PREFIX
    assert (weights / "DONE").is_file()
    assert {name: (weights / name).read_bytes() for name in MODEL_FILES} == MODEL_FILES
