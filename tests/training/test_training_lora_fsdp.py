"""LoRA over a base FSDP shards (SMP v2), run for real with 2 processes on CPU (gloo), each rank a process running
train.py with the torch.sagemaker stand-in (lora_fsdp_rank.py), with the environment torchrun gives the ranks in the
SMP v2 container: the frozen base is split between the ranks, only rank 0 reads the pretrained weights, the loss
falls, the output is the same adapter folder as the single-GPU LoRA run's, the adapter applied through PEFT equals the
merged weights, and a job killed mid-run resumes to bit-identical adapter weights. The jobs train.py refuses are at
the end."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import lora_fsdp_rank
import pytest
import torch
import transformers
from finetune.adapters import BASE_RECORD_FILE
from safetensors.torch import load_file
from training_helpers import (
    ADAPTER_FOLDER_FILES,
    TINY_LORA_ADAPTER_CONFIG,
    adapter_folder_files,
    assert_adapter_config,
    assert_training_loss_falls,
    train_arguments,
)

WORLD_SIZE = 2
MP_PARAMETERS = {"hybrid_shard_degree": WORLD_SIZE, "tensor_parallel_degree": 1}
BASE_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
# Grouped-query attention (2 KV heads for 4 query heads), as Llama 3.1 and Qwen2.5; Qwen2 adds q/k/v biases.
CONFIGS = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
FLAGS = {
    "method": "lora",
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.1,  # dropout on: a resume must restore every rank's RNG to match bit for bit
    "bf16": "true",
    "activation_checkpointing": "true",
    "train_batch_size": 4,
    "val_batch_size": 4,
    "max_steps": 8,
    "lr": 2e-2,
    "warmup": 0.1,
    "validation_freq": 4,
    "validation_batches": 2,
    "checkpoint_freq": 3,
    "base_model_name": "tiny-base",
    "base_model_id": "example/tiny-base",
    "base_model_revision": BASE_COMMIT,
}

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def _base(tiny_assets, folder: Path, arch: str = "llama", **config) -> Path:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_assets["tokenizer"])
    options = {"num_key_value_heads": 2, "max_position_embeddings": 128, "bos_token_id": 0, "eos_token_id": 0}
    torch.manual_seed(5)
    model = transformers.AutoModelForCausalLM.from_config(
        CONFIGS[arch](vocab_size=len(tokenizer), **TINY, **{**options, **config})
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _arguments(tiny_assets, prepared_data, base: Path, run_dir: Path) -> list[str]:
    arguments = train_arguments(tiny_assets, prepared_data, run_dir, **FLAGS)
    index = arguments.index("--model_config")
    arguments[index : index + 2] = ["--pretrained_dir", str(base)]
    return arguments


def launch(arguments: list[str], run_dir: Path, *, kill_at: str | None = None, fails: bool = False) -> dict:
    """Start the ranks as torchrun would; with kill_at, SIGKILL every rank when rank 0 prints a line starting with
    it (a spot interruption takes the whole instance). Returns rank 0's log and each rank's observations, or with
    `fails`, what the ranks wrote to stderr."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(lora_fsdp_rank.PRELOAD)  # takes effect when the first run starts the server
    run_dir.mkdir(parents=True, exist_ok=True)
    environment = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": _free_port(),
        "WORLD_SIZE": str(WORLD_SIZE),
        "LOCAL_WORLD_SIZE": str(WORLD_SIZE),
        "SM_HP_MP_PARAMETERS": json.dumps(MP_PARAMETERS),
        "TOKENIZERS_PARALLELISM": "false",
    }
    processes, logs = [], [run_dir / f"rank{rank}.log" for rank in range(WORLD_SIZE)]
    for rank in range(WORLD_SIZE):
        environ = {**environment, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        files = [str(run_dir / f"rank{rank}.json"), str(logs[rank]), str(run_dir / f"rank{rank}.err")]
        process = context.Process(target=lora_fsdp_rank.run_rank, args=(environ, arguments, *files), daemon=True)
        process.start()
        processes.append(process)
    deadline = time.monotonic() + 180
    while kill_at is not None and processes[0].is_alive() and time.monotonic() < deadline:
        if logs[0].is_file() and any(line.startswith(kill_at) for line in logs[0].read_text().splitlines()):
            for process in processes:
                os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    for process in processes:
        process.join(timeout=max(1.0, deadline - time.monotonic()))
    codes = [process.exitcode for process in processes]
    log = logs[0].read_text()
    if kill_at is not None:
        assert codes == [-signal.SIGKILL] * WORLD_SIZE, f"never printed {kill_at!r}: {log[-2000:]}"
        return {"log": log}
    errors = [(run_dir / f"rank{rank}.err").read_text()[-3000:] for rank in range(WORLD_SIZE)]
    if fails:
        assert codes == [1] * WORLD_SIZE, (codes, errors)
        return {"log": log, "errors": errors}
    assert codes == [0] * WORLD_SIZE, errors
    ranks = [json.loads((run_dir / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]
    return {"log": log, "ranks": ranks}


@pytest.fixture(scope="module")
def bases(tiny_assets, tmp_path_factory) -> dict[str, Path]:
    return {arch: _base(tiny_assets, tmp_path_factory.mktemp(f"fsdp-base-{arch}"), arch) for arch in CONFIGS}


@pytest.fixture(scope="module")
def straight_runs(tiny_assets, prepared_data, bases, tmp_path_factory) -> dict[str, dict]:
    runs = {}
    for arch, base in bases.items():
        run_dir = tmp_path_factory.mktemp(f"lora-fsdp-{arch}")
        runs[arch] = {**launch(_arguments(tiny_assets, prepared_data, base, run_dir), run_dir), "dir": run_dir}
    return runs


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_the_frozen_base_is_sharded_and_only_rank_0_reads_it(straight_runs, arch) -> None:
    straight_run = straight_runs[arch]
    first, second = straight_run["ranks"]
    assert first["weight_reads"] == 1 and second["weight_reads"] == 0
    # Rank 0 holds the loaded base; rank 1 built it on the meta device and received its shard from rank 0.
    assert first["frozen_on_meta"] == 0 and second["frozen_on_meta"] == second["frozen_parameters"] > 0
    total = first["frozen_elements"]
    assert second["frozen_elements"] == total
    for rank in (first, second):
        # Each rank holds half of every frozen unit (FSDP pads each of the 3 units by at most world_size - 1).
        assert abs(rank["local_frozen_elements"] - total / WORLD_SIZE) <= 8, (rank["local_frozen_elements"], total)
        # The optimizer holds the adapters only: 2 matrices x 7 projections x 2 layers.
        assert rank["optimizer_parameters"] == rank["trainable_parameters"] == 2 * 7 * 2
    assert first["local_frozen_elements"] + second["local_frozen_elements"] >= total
    # The SMP v2 calls: init, then DelayedParamIniter on rank 1 only, over a model on the meta device.
    assert first["calls"][0] == second["calls"][0] == "init"
    assert "DelayedParamIniter" not in first["calls"] and second["calls"].count("DelayedParamIniter") == 1
    assert second["materialized"] > 0 and first["materialized"] == 0
    assert first["calls"].count("clip_grad_norm_") == FLAGS["max_steps"]
    assert "world_size=2 data_parallel_size=2" in straight_run["log"] and "backend=lora_fsdp" in straight_run["log"]


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_the_loss_falls_and_the_output_is_the_lora_adapter_folder(straight_runs, arch) -> None:
    straight_run = straight_runs[arch]
    assert_training_loss_falls(straight_run["log"], FLAGS["max_steps"], window=3)

    model_dir = straight_run["dir"] / "model"
    assert adapter_folder_files(model_dir) == ADAPTER_FOLDER_FILES
    assert_adapter_config(model_dir, **TINY_LORA_ADAPTER_CONFIG, revision=BASE_COMMIT)
    weights = load_file(model_dir / "adapter_model.safetensors")
    # PEFT's clean names, whole matrices: no FSDP or checkpoint-wrapper prefixes, no flattened shards.
    assert len(weights) == 2 * 7 * 2
    assert all(
        re.fullmatch(r"base_model\.model\.model\.layers\.\d\.\w+\.\w+_proj\.lora_[AB]\.weight", n) for n in weights
    )
    assert weights["base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"].shape == (8, 64)
    assert weights["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"].shape == (64, 8)
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())
    assert json.loads((model_dir / BASE_RECORD_FILE).read_text())["method"] == "lora"
    # Checkpoints hold the adapters and their optimizer state, not the base.
    checkpoint = straight_run["dir"] / "checkpoints" / "step_00000006"
    assert sorted(path.name for path in checkpoint.iterdir() if path.is_file()) == [
        "adapter.pt",
        "manifest-node0.json",
        "optimizer.pt",
        "trainer_state.json",
    ]
    assert torch.load(checkpoint / "adapter.pt").keys() == {
        name.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        for name in weights
    }


def test_the_adapter_through_peft_equals_the_merged_weights(straight_runs, bases) -> None:
    from peft import PeftModel

    straight_run = straight_runs["qwen2"]
    base = transformers.AutoModelForCausalLM.from_pretrained(bases["qwen2"]).eval()
    input_ids = torch.randint(0, base.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base_logits = base(input_ids=input_ids).logits
        adapted = PeftModel.from_pretrained(base, str(straight_run["dir"] / "model")).eval()
        adapter_logits = adapted(input_ids=input_ids).logits
        merged_logits = adapted.merge_and_unload()(input_ids=input_ids).logits
    assert not (base_logits - adapter_logits).abs().max() < 1e-3  # the trained adapter changes the model
    torch.testing.assert_close(merged_logits, adapter_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.bad_input("kill")
def test_a_killed_job_resumes_to_identical_adapter_weights(
    straight_runs, tiny_assets, prepared_data, bases, tmp_path
) -> None:
    straight_run = straight_runs["llama"]
    arguments = _arguments(tiny_assets, prepared_data, bases["llama"], tmp_path)
    launch(arguments, tmp_path, kill_at="step=4 ")
    assert not (tmp_path / "model").exists()

    resumed = launch(arguments, tmp_path)
    assert re.search(r"resumed from checkpoint \S+step_00000003 at step 3\n", resumed["log"])
    assert resumed["ranks"][0]["weight_reads"] == 1 and resumed["ranks"][1]["weight_reads"] == 0
    expected = load_file(straight_run["dir"] / "model" / "adapter_model.safetensors")
    actual = load_file(tmp_path / "model" / "adapter_model.safetensors")
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[name], actual[name]) for name in expected)


# --- what train.py refuses ---------------------------------------------------------------------------------------

LAYOUT_REFUSALS = [
    (
        {"method": "qlora", "backend": "smp_v2"},
        {"hybrid_shard_degree": 2},
        r"--method qlora with SMP v2: bitsandbytes' 4-bit base weights are not sharded by FSDP",
    ),
    (  # the same, with the backend chosen by mp_parameters (--backend auto)
        {"method": "qlora"},
        {"hybrid_shard_degree": 2},
        r"--method qlora with SMP v2: bitsandbytes' 4-bit base weights are not sharded by FSDP",
    ),
    (
        {"backend": "smp_v2"},
        {"hybrid_shard_degree": 2, "tensor_parallel_degree": 2},
        r"--method lora with mp_parameters tensor_parallel_degree 2: SMP v2's torch.sagemaker.transform replaces",
    ),
    (
        {"backend": "smp_v1"},
        {"ddp": True},
        r"--method lora does not run on SMP v1",
    ),
]


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("flags", "mp_parameters", "message"), LAYOUT_REFUSALS, ids=["qlora", "qlora-auto", "tensor-parallel", "smp-v1"]
)
def test_adapter_layouts_train_py_refuses(
    train_script, tiny_assets, prepared_data, bases, tmp_path, monkeypatch, capsys, flags, mp_parameters, message
) -> None:
    from smp_standin_v2 import SmpV2

    for name, module in SmpV2().modules().items():  # --backend auto picks SMP v2 where torch.sagemaker imports
        monkeypatch.setitem(sys.modules, name, module)
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path, **{**FLAGS, **flags})
    index = arguments.index("--model_config")
    arguments[index : index + 2] = ["--pretrained_dir", str(bases["llama"])]
    environ = {"SM_HP_MP_PARAMETERS": json.dumps(mp_parameters), "WORLD_SIZE": "4"}
    assert train_script.main(arguments, environ) == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.bad_input("config")
def test_a_base_with_tied_embeddings_is_refused(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, capsys
) -> None:
    import torch.distributed as dist
    from smp_standin_v2 import SmpV2

    tsm = SmpV2()
    for name, module in tsm.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    base = _base(tiny_assets, tmp_path / "tied", tie_word_embeddings=True)
    environ = {
        "SM_HP_MP_PARAMETERS": json.dumps({"hybrid_shard_degree": 1}),
        **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": _free_port(), "RANK": "0", "LOCAL_RANK": "0"},
        **{"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert train_script.main(_arguments(tiny_assets, prepared_data, base, tmp_path), environ) == 2
    assert "--method lora with SMP v2: LlamaForCausalLM ties its input and output embeddings" in capsys.readouterr().err
    assert tsm.names() == ["init"] and not dist.is_initialized()  # refused before anything was loaded


@pytest.mark.bad_input("config")
def test_resuming_with_other_lora_settings_is_refused(straight_runs, tiny_assets, prepared_data, bases, tmp_path):
    shutil.copytree(straight_runs["llama"]["dir"] / "checkpoints", tmp_path / "checkpoints")
    arguments = [*_arguments(tiny_assets, prepared_data, bases["llama"], tmp_path), "--lora_r", "4"]
    run = launch(arguments, tmp_path, fails=True)
    assert all(
        "holds adapters for other LoRA settings (target modules or rank) than this run's" in e for e in run["errors"]
    )


def test_the_delayed_param_stand_in_refuses_what_smp_refuses(tmp_path) -> None:
    import torch.distributed as dist
    from smp_standin_v2 import SmpV2
    from smp_standins import ApiMisuse

    tsm = SmpV2()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2, device="meta"))
    with pytest.raises(ApiMisuse, match=r"DelayedParamIniter created before tsm\.init\(\)"):
        tsm.delayed_param_initer(model)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        tsm.init()
        with pytest.raises(ApiMisuse, match=r"no default init for Sequential .*pass init_method_using_config"):
            tsm.delayed_param_initer(model)
        initer = tsm.delayed_param_initer(model, init_method_using_config=lambda module: None)
        with pytest.raises(ApiMisuse, match=r"Linear: weight, bias still on the meta device"):
            initer.get_param_init_fn()(model[0])
        materialize = tsm.delayed_param_initer(model, init_method_using_config=lambda m: m.to_empty(device="cpu"))
        materialize.get_param_init_fn()(model[0])
        assert not model[0].weight.is_meta and tsm.materialized == 1
    finally:
        dist.destroy_process_group()
