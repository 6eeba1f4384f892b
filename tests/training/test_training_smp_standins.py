"""train.py's SMP v1 code path, run in-process against a STAND-IN of the library (smp_standins.py); the SMP v2 path,
which runs in another image (tests/training/image_environments.py), is test_training_smp_v2_standins.py.

The stand-ins check the call order and arguments the real libraries require (and raise where the real library
would refuse or misbehave); the runs here then check what train.py produced. They do NOT prove that SMP's
partitioning, tensor/pipeline parallelism, fp16 loss scaling, sharding or checkpoint formats work: those exist only
in the SageMaker containers, on GPUs.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from finetune.modeling import build_model, load_model_source
from safetensors.torch import load_file
from smp_standins import ApiMisuse, SmpV1
from training_helpers import load_saved_model, train_arguments

# One process stands in for the cluster, so FSDP falls back to NO_SHARD and says so; torch 2.13 also flags the FSDP1
# state-dict API that the SMP v2 images (torch 2.0-2.5) still use.
pytestmark = [
    pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`:UserWarning"),
    pytest.mark.filterwarnings("ignore:When using ``NO_SHARD`` for ``ShardingStrategy``:UserWarning"),
    pytest.mark.filterwarnings("ignore:FSDP.state_dict_type\\(\\) and FSDP.set_state_dict_type\\(\\):FutureWarning"),
]


def _install(monkeypatch: pytest.MonkeyPatch, modules: dict) -> None:
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def _same_weights(first: Path, second: Path) -> bool:
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


V1_PARAMETERS = {"ddp": True, "partitions": 1, "tensor_parallel_degree": 1, "microbatches": 2}


def test_smp_v1_path_follows_the_library_contract_and_resumes(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group
) -> None:
    environ = {"SM_HP_MP_PARAMETERS": json.dumps(V1_PARAMETERS)}
    # The schedule spans 8 steps whatever max_steps is, so a 6-step run resumed to 8 matches a straight 8-step run.
    options = {
        "activation_checkpointing": "true",
        "validation_freq": 3,
        "checkpoint_freq": 3,
        "activation_strategy": "each",
        "lr_decay_iters": 8,
    }
    smp = SmpV1()
    _install(monkeypatch, smp.modules())
    # --backend auto: mp_parameters holds SMP v1 keys and the (stand-in) library imports.
    summary = train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=6, **options), environ)
    assert summary["backend"] == "smp_v1"

    names = smp.names()
    order = ["init", "model_creation", "DistributedModel", "set_activation_checkpointing", "DistributedOptimizer"]
    first_calls = sorted(order, key=names.index)
    assert first_calls == order
    assert names.count("set_activation_checkpointing") == 2  # each GPT-J block (no tensor parallelism)
    init = dict(smp.calls)["init"]["config"]
    assert init == V1_PARAMETERS
    assert dict(smp.calls)["model_creation"] == {"tensor_parallelism": False, "dtype": None}
    assert dict(smp.calls)["DistributedModel"] == {"trace_device": "cpu", "backward_passes_per_step": 1}
    assert dict(smp.calls)["DistributedOptimizer"] == {
        "static_loss_scale": None,
        "dynamic_loss_scale": True,
        "dynamic_loss_args": {"scale_window": 1000, "min_scale": 1, "delayed_shift": 2},
    }
    steps = [details for name, details in smp.calls if name == "step"]
    assert {details["microbatches"] for details in steps} == {2}
    assert sum(details["function"] == "train_step" for details in steps) == 6
    saves = [details for name, details in smp.calls if name == "save_checkpoint"]
    assert saves[0]["partial"] is True and saves[0]["tag"] == "step_00000003"
    assert saves[0]["path"].endswith(".tmp-step_00000003")  # written under the temporary name, then renamed
    assert all(details["partial"] for details in saves)  # the final model is gathered with model.state_dict()
    assert names[-1] == "barrier"
    partial = torch.load(tmp_path / "checkpoints" / "step_00000003" / "step_00000003_partial" / "model_0_0.pt")
    assert partial["_smp_is_partial"] is True and "transformer.h.0.attn.q_proj.weight" in partial  # no TP: HF names

    # The final model: gathered on rank 0, written as an HF folder.
    model = load_saved_model(tmp_path / "model")
    assert type(model).__name__ == "GPTJForCausalLM"
    assert not (tmp_path / "model" / ".full_state").exists()

    # A restarted job resumes through smp.resume_from_checkpoint; SMP loads the state at the first step.
    dist.destroy_process_group()
    resumed = SmpV1()
    _install(monkeypatch, resumed.modules())
    train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=8, **options), environ)
    names = resumed.names()
    assert dict(resumed.calls)["resume_from_checkpoint"]["tag"] == "step_00000003"
    assert names.index("DistributedOptimizer") < names.index("resume_from_checkpoint") < names.index("deferred_load")
    assert names.index("deferred_load") < names.index("step")
    assert sum(details["function"] == "train_step" for name, details in resumed.calls if name == "step") == 5
    # ... and ends where an uninterrupted 8-step run ends.
    dist.destroy_process_group()
    _install(monkeypatch, SmpV1().modules())
    straight = tmp_path / "straight"
    train_script.run(train_arguments(tiny_assets, prepared_data, straight, max_steps=8, **options), environ)
    assert _same_weights(tmp_path / "model", straight / "model")


def test_smp_v1_fp16_path_uses_the_fp16_optimizer_api(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group
) -> None:
    environ = {"SM_HP_MP_PARAMETERS": json.dumps({**V1_PARAMETERS, "fp16": True})}
    smp = SmpV1()
    _install(monkeypatch, smp.modules())
    arguments = train_arguments(
        tiny_assets, prepared_data, tmp_path, max_steps=2, train_batch_size=4, gradient_accumulation=2,
        validation_batches=1, checkpoint_freq=0, grad_clip=0.5,
    )  # fmt: skip
    summary = train_script.run(arguments, environ)
    assert dict(smp.calls)["model_creation"] == {"tensor_parallelism": False, "dtype": torch.float16}
    assert dict(smp.calls)["DistributedModel"]["backward_passes_per_step"] == 2
    assert [details for name, details in smp.calls if name == "clip_master_grads"] == [{"max_norm": 0.5}] * 2
    assert sum(name == "step" for name, _ in smp.calls) == 2 * 2 + 1  # 2 steps x 2 micro-steps, 1 validation
    assert summary["val_loss"] < summary["train_loss"] + 1.0  # finite: fp32 master weights, no overflow
    saved = load_file(tmp_path / "model" / "model.safetensors")
    # The trained fp16 weights, as SMP holds them (transformers 4.2x also saves GPT-J's boolean causal-mask buffer).
    assert {tensor.dtype for tensor in saved.values() if tensor.is_floating_point()} == {torch.float16}


def test_smp_v1_bf16_path_clips_the_fp32_master_gradients_the_optimizer_steps_from(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group
) -> None:
    # Under bf16 SMP's Bit16_Optimizer steps from fp32 master gradients, copied at the end of each @smp.step
    # (SMP 1.12.1 torch/model.py, update_master_grads): clipping the bf16 .grad afterwards changes nothing.
    environ = {"SM_HP_MP_PARAMETERS": json.dumps({**V1_PARAMETERS, "bf16": True})}
    smp = SmpV1()
    _install(monkeypatch, smp.modules())
    grad_clip = 0.01  # far below the tiny model's gradient norm, so every step must clip
    arguments = train_arguments(
        tiny_assets, prepared_data, tmp_path, max_steps=3, train_batch_size=4, gradient_accumulation=2,
        validation_batches=1, checkpoint_freq=0, grad_clip=grad_clip, bf16="true",
    )  # fmt: skip
    train_script.run(arguments, environ)
    assert dict(smp.calls)["model_creation"] == {"tensor_parallelism": False, "dtype": torch.bfloat16}
    assert "clip_master_grads" not in smp.names()  # SMP 1.12.1's wrapper clips only under fp16
    stepped = [details["master_grad_norm"] for name, details in smp.calls if name == "optimizer.step"]
    assert len(stepped) == 3
    assert all(norm <= grad_clip * 1.001 for norm in stepped), stepped


def test_smp_v1_bf16_without_smps_master_map_is_refused_before_training() -> None:
    from finetune.backends.smp_v1 import SmpV1Backend
    from finetune.errors import ConfigurationError
    from finetune.hyperparameters import Hyperparameters
    from finetune.layout import parse_layout

    backend = SmpV1Backend(Hyperparameters(), parse_layout({**V1_PARAMETERS, "bf16": True}), "bf16", {})
    plain = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])  # what an SMP without Bit16_Optimizer would give
    with pytest.raises(ConfigurationError, match=r"mp_parameters bf16 is true, but .* returned a AdamW without"):
        backend._require_master_map(plain)


@pytest.mark.parametrize(
    ("precision", "sharded", "expected"),
    [("bf16", True, ("world", 16)), ("bf16", False, ("mp", 8)), ("fp32", True, ("mp", 8))],
    ids=["bf16-sharded-optimizer", "bf16", "fp32-model-grads"],
)
def test_smp_v1_sums_the_gradient_norm_where_smp_does(precision, sharded, expected) -> None:
    # SMP 1.12.1 clip_grad_norm_fp32: over the world when each data-parallel rank holds only its shard of the masters.
    from types import SimpleNamespace

    from finetune.backends.smp_v1 import SmpV1Backend
    from finetune.hyperparameters import Hyperparameters
    from finetune.layout import parse_layout

    layout = parse_layout({**V1_PARAMETERS, "tensor_parallel_degree": 8, "shard_optimizer_state": sharded})
    backend = SmpV1Backend(Hyperparameters(), layout, precision, {})
    backend.smp = SimpleNamespace(  # 2 hosts of 8 GPUs: tensor parallel 8, 2 data-parallel replicas
        get_world_process_group=lambda: "world", size=lambda: 16, get_mp_process_group=lambda: "mp", mp_size=lambda: 8
    )
    assert backend._norm_group() == expected


def test_smp_v1_stand_in_rejects_what_the_library_rejects(fresh_process_group) -> None:
    smp = SmpV1()
    with pytest.raises(ApiMisuse, match=r"before smp\.init"):
        smp.DistributedModel(torch.nn.Linear(2, 2))
    smp.init({"microbatches": 1})
    with pytest.raises(ApiMisuse, match=r"created inside smp\.model_creation"):
        smp.DistributedModel(torch.nn.Linear(2, 2))
    with smp.model_creation():
        layer = torch.nn.Linear(2, 1)
    model = smp.DistributedModel(layer)
    with pytest.raises(ApiMisuse, match=r"only be called inside an @smp\.step"):
        model(torch.ones(1, 2))

    @smp.step
    def wrong_backward(model, inputs):
        loss = model(inputs).sum()
        loss.backward()
        return loss

    with pytest.raises(ApiMisuse, match=r"not loss\.backward"):
        wrong_backward(model, torch.ones(4, 2))
    with pytest.raises(ApiMisuse, match="not the DistributedModel's"):
        smp.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"tensor_parallel_degree": 2}, "tensor_parallel_degree > 1 requires ddp"),
        ({"prescaled_batch": True, "optimize": "memory"}, "prescaled_batch requires optimize to be set to speed"),
        ({"fp16": True, "bf16": True}, "bf16 requires fp16 to be set to False"),
    ],
)
def test_smp_v1_stand_in_applies_smps_config_rules(config, message, fresh_process_group) -> None:
    with pytest.raises(ApiMisuse, match=message):
        SmpV1().init(config)


def test_smp_v1_stand_in_checkpoints_keep_smp_names_and_translate_full_ones_when_asked(
    tiny_assets, tmp_path, monkeypatch, fresh_process_group
) -> None:
    import transformers.processing_utils  # noqa: F401  (transformers 5.x replaces its module object once, here)

    monkeypatch.setattr(sys.modules["transformers"], "__version__", "4.21.0")
    smp = SmpV1()
    smp.init({"ddp": True, "tensor_parallel_degree": 2})
    assert (smp.size(), smp.tp_size(), smp.dp_size(), smp.rdp_size(), smp.mp_size()) == (2, 2, 2, 1, 2)
    source = load_model_source(None, str(tiny_assets["config"]), str(tiny_assets["tokenizer"]))
    with smp.model_creation(tensor_parallelism=True):
        hf = build_model(source, None)
    pretrained = {name: tensor.clone() for name, tensor in hf.state_dict().items()}
    model = smp.DistributedModel(hf)
    module = model.get_module()
    assert type(module).__name__ == "DistributedTransformerLMHead" and not hasattr(module, "config")
    assert "transformer.seq_layers.0.output.dense1.weight" in model.state_dict()
    assert not torch.equal(module.lm_head.weight, pretrained["lm_head.weight"])  # fresh weights, as SMP's

    model.load_state_dict(pretrained)  # a full HF state dict: translated, loaded at the first step
    assert not torch.equal(module.lm_head.weight, pretrained["lm_head.weight"])
    smp._load_pending()
    assert torch.equal(module.lm_head.weight, pretrained["lm_head.weight"])

    smp.save_checkpoint(str(tmp_path), "partial", partial=True, model=model)
    assert "transformer.seq_layers.1.attention.key.weight" in torch.load(tmp_path / "partial_partial" / "model_0_0.pt")
    smp.save_checkpoint(str(tmp_path), "full.pt", partial=False, model=model)
    assert "transformer.h.1.attn.k_proj.weight" in torch.load(tmp_path / "full.pt")
    smp.save_checkpoint(str(tmp_path), "smp.pt", partial=False, model=model, translate_if_full=False)
    untranslated = torch.load(tmp_path / "smp.pt")
    assert untranslated["_smp_is_partial"] is False and "word_embedding.weight" in untranslated
