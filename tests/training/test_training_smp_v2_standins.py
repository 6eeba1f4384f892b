"""train.py's SMP v2 code path, run in-process against a STAND-IN of the library (smp_standin_v2.py), as
test_training_smp_standins.py runs the SMP v1 path: apart, because SMP v2 runs in its own image (torch 2.4.1,
tests/training/image_environments.py), which the SMP v1 image's torch 1.13.1 cannot stand in for (no
torch.distributed checkpoint offload_wrapper, no FSDP state-dict types SMP v2 uses)."""

from __future__ import annotations

import json

import pytest
import torch
from finetune.backends.smp_v2 import SmpV2Backend
from finetune.hyperparameters import Hyperparameters, parse_hyperparameters
from finetune.layout import parse_layout
from finetune.modeling import build_model, load_model_source
from smp_standin_v2 import SmpV2
from smp_standins import ApiMisuse
from test_training_smp_standins import _free_port, _install, _same_weights
from training_helpers import load_saved_model, train_arguments

from local.tiny import build_config

# One process stands in for the cluster, so FSDP falls back to NO_SHARD and says so; torch 2.13 also flags the FSDP1
# state-dict API that the SMP v2 images (torch 2.0-2.5) still use.
pytestmark = [
    pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`:UserWarning"),
    pytest.mark.filterwarnings("ignore:When using ``NO_SHARD`` for ``ShardingStrategy``:UserWarning"),
    pytest.mark.filterwarnings("ignore:FSDP.state_dict_type\\(\\) and FSDP.set_state_dict_type\\(\\):FutureWarning"),
]


def _v2_environment(parameters: dict) -> dict:
    # What torchrun (SageMaker's SMP v2 launcher) provides.
    return {
        "SM_HP_MP_PARAMETERS": json.dumps(parameters),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": _free_port(),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


def test_smp_v2_path_trains_with_fsdp_and_resumes(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group
) -> None:
    environ = _v2_environment({"hybrid_shard_degree": 1, "activation_loading_horizon": 2})
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    tsm = SmpV2()
    _install(monkeypatch, tsm.modules())
    options = {"activation_checkpointing": "true", "validation_freq": 3, "checkpoint_freq": 3, "lr_decay_iters": 7}
    summary = train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=6, **options), environ)
    assert summary["backend"] == "smp_v2"
    names = tsm.names()
    assert names[0] == "init" and "transform" not in names  # GPT-J: no SMP v2 tensor parallelism, plain FSDP
    assert names.count("clip_grad_norm_") == 6
    assert (tmp_path / "checkpoints" / "step_00000003" / "model.pt").is_file()

    model = load_saved_model(tmp_path / "model")
    reference = build_model(load_model_source(None, str(tiny_assets["config"]), str(tiny_assets["tokenizer"])), None)
    assert model.state_dict().keys() == reference.state_dict().keys()  # clean HF names, no FSDP/checkpoint prefixes

    # Restart: FSDP full state dicts are read back, and training continues from step 3.
    monkeypatch.setenv("MASTER_PORT", _free_port())
    resumed = SmpV2()
    _install(monkeypatch, resumed.modules())
    train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=7, **options), environ)
    assert resumed.names().count("clip_grad_norm_") == 4
    # ... and ends where an uninterrupted 7-step run ends (the SMP v2 backend closes its own process group).
    monkeypatch.setenv("MASTER_PORT", _free_port())
    _install(monkeypatch, SmpV2().modules())
    straight = tmp_path / "straight"
    train_script.run(train_arguments(tiny_assets, prepared_data, straight, max_steps=7, **options), environ)
    assert _same_weights(tmp_path / "model", straight / "model")


def test_smp_v2_transforms_before_the_fsdp_wrap_for_tensor_parallelism(
    tiny_assets, tmp_path, monkeypatch, clean_environment, fresh_process_group
) -> None:
    environ = _v2_environment({"tensor_parallel_degree": 2, "hybrid_shard_degree": 2})
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    tsm = SmpV2()
    _install(monkeypatch, tsm.modules())
    config = build_config("gpt_neox", vocab_size=512).to_dict()
    (tmp_path / "neox.json").write_text(json.dumps(config))
    arguments = ["--model_config", str(tmp_path / "neox.json"), "--tokenizer_dir", str(tiny_assets["tokenizer"])]
    hp, _ = parse_hyperparameters(arguments, environ)
    backend = SmpV2Backend(hp, parse_layout(json.loads(environ["SM_HP_MP_PARAMETERS"])), "fp32", environ)
    backend.setup()
    source = load_model_source(None, str(tmp_path / "neox.json"), str(tiny_assets["tokenizer"]))
    model = backend.create_model(lambda dtype: build_model(source, dtype))
    wrapped, _ = backend.prepare(model, lambda module: torch.optim.AdamW(module.parameters()))
    from torch.distributed.fsdp import FullyShardedDataParallel

    assert tsm.names() == ["init", "transform"]  # the stand-in raises if transform sees an FSDP-wrapped model
    assert isinstance(wrapped, FullyShardedDataParallel) and wrapped.module is model
    backend.shutdown()


def test_smp_v2_stand_in_rejects_init_before_the_process_group(fresh_process_group) -> None:
    with pytest.raises(ApiMisuse, match=r"needs torch\.distributed initialized first"):
        SmpV2().init()


# hybrid_shard_degree -> FSDP ShardingStrategy (AWS "SMP v2 reference", hybrid_shard_degree): 0 (no SMP sharding
# group: plain FSDP) and 1 shard over every GPU; 2 and up shard within groups of that many GPUs and replicate across
# them, which is HYBRID_SHARD with SMP's group size.
SHARDING_BY_DEGREE = [(0, "FULL_SHARD"), (1, "FULL_SHARD"), (2, "HYBRID_SHARD"), (4, "HYBRID_SHARD")]


@pytest.mark.parametrize(("degree", "expected"), SHARDING_BY_DEGREE, ids=[f"degree-{d}" for d, _ in SHARDING_BY_DEGREE])
def test_hybrid_shard_degree_picks_the_fsdp_sharding_strategy(degree, expected) -> None:
    from torch.distributed.fsdp import ShardingStrategy

    layout = parse_layout({"hybrid_shard_degree": degree, "tensor_parallel_degree": 1})
    backend = SmpV2Backend(Hyperparameters(), layout, "bf16", {})
    assert backend._sharding_strategy(ShardingStrategy) is ShardingStrategy[expected]


# The LoRA backend over a sharded base, on 8 GPUs: a degree of the whole world is one shard group, FULL_SHARD.
LORA_SHARDING_BY_DEGREE = [*SHARDING_BY_DEGREE, (8, "FULL_SHARD")]


@pytest.mark.parametrize(
    ("degree", "expected"), LORA_SHARDING_BY_DEGREE, ids=[f"degree-{d}" for d, _ in LORA_SHARDING_BY_DEGREE]
)
def test_hybrid_shard_degree_picks_the_lora_fsdp_sharding_strategy(degree, expected) -> None:
    from finetune.backends.lora_fsdp import LoraFsdpBackend
    from torch.distributed.fsdp import ShardingStrategy

    layout = parse_layout({"hybrid_shard_degree": degree, "tensor_parallel_degree": 1})
    backend = LoraFsdpBackend(Hyperparameters(method="lora"), layout, "bf16", {})
    backend.world_size = 8  # what setup reads from torchrun's WORLD_SIZE
    assert backend._sharding_strategy(ShardingStrategy) is ShardingStrategy[expected]
