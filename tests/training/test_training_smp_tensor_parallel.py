"""SMP v1 tensor parallelism, run in-process against the stand-in (smp_standins.py, smp_standin_gptj.py).

What the real library does and the stand-in reproduces: with tensor_parallel_degree > 1 and a transformers version
SMP supports, smp.DistributedModel swaps the Hugging Face GPT-J for a freshly initialized, non-HF distributed module
with SMP's parameter names; with any other transformers version it silently keeps the HF model. So train.py must
refuse unsupported versions itself, load the pretrained weights after the swap, and translate the gathered state dict
back to HF names to write the final model. These runs do not prove SMP's slicing, kernels or collectives.
"""

from __future__ import annotations

import json
import sys

import pytest
import smp_standin_gptj as gptj
import torch
import torch.distributed as dist
from finetune.backends.smp_v1 import SmpV1Backend
from finetune.errors import ConfigurationError
from finetune.hyperparameters import parse_hyperparameters
from finetune.layout import SMP_V1_TENSOR_PARALLEL_TRANSFORMERS, parse_layout
from finetune.modeling import build_model, load_model_source
from safetensors.torch import load_file
from smp_standins import SmpV1
from training_helpers import load_saved_model, train_arguments

from local.tiny import build_config, save_tiny_model

TP2 = {"ddp": True, "partitions": 1, "tensor_parallel_degree": 2, "prescaled_batch": True, "optimize": "speed"}
# Two processes (one tensor-parallel pair); the stand-in plays rank 0 of them.
ENVIRON = {"SM_HP_MP_PARAMETERS": json.dumps(TP2), "OMPI_COMM_WORLD_SIZE": "2"}


@pytest.fixture
def fresh_process_group():
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _use_transformers_version(monkeypatch, version: str) -> None:
    """Make transformers report `version`, as both SMP and train.py read it (transformers.__version__). transformers
    5.x re-executes its own __init__ into a new sys.modules["transformers"] the first time processing_utils is
    imported; importing that first makes the patch land on the module every later reader gets."""
    import transformers.processing_utils  # noqa: F401

    monkeypatch.setattr(sys.modules["transformers"], "__version__", version)


@pytest.fixture
def supported_transformers(monkeypatch):
    _use_transformers_version(monkeypatch, "4.21.0")


def _install(monkeypatch, smp: SmpV1) -> SmpV1:
    for name, module in smp.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    return smp


def _without(arguments: list[str], *flags: str) -> list[str]:
    for flag in flags:
        index = arguments.index(flag)
        del arguments[index : index + 2]
    return arguments


def test_the_stand_in_keeps_smps_list_of_transformers_versions():
    assert list(SMP_V1_TENSOR_PARALLEL_TRANSFORMERS) == gptj.SUPPORTED_HF_VERSIONS


def _gptj_source(tiny_assets):
    return load_model_source(None, str(tiny_assets["config"]), str(tiny_assets["tokenizer"]))


def test_smps_gptj_translation_maps_every_weight_both_ways(tiny_assets):
    hf = build_model(_gptj_source(tiny_assets), None).state_dict()
    smp_names = gptj.translate_hf_state_dict_to_smdistributed_gptj(hf)
    assert "transformer.seq_layers.1.attention.query.weight" in smp_names and "word_embedding.weight" in smp_names
    assert not any(name.startswith("transformer.h.") for name in smp_names)
    back = gptj.translate_state_dict_to_hf_gptj(smp_names, max_seq_len=16)
    assert back["transformer.h.0.attn.bias"].shape == (1, 1, 16, 16)  # SMP adds the causal-mask constants
    constants = (".attn.bias", ".attn.masked_bias")  # transformers 4.21 (the SMP v1 image) also keeps them in hf
    weights = {name: tensor for name, tensor in back.items() if not name.endswith(constants)}
    hf = {name: tensor for name, tensor in hf.items() if not name.endswith(constants)}
    assert weights.keys() == hf.keys() and all(torch.equal(weights[name], hf[name]) for name in hf)


def test_tensor_parallel_run_writes_a_hugging_face_folder_with_the_trained_weights(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group,
    supported_transformers,
) -> None:  # fmt: skip
    smp = _install(monkeypatch, SmpV1())
    options = {"activation_checkpointing": "true", "checkpoint_freq": 2, "validation_freq": 2, "lr_decay_iters": 4}
    summary = train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=3, **options), ENVIRON)

    assert dict(smp.calls)["model_creation"] == {"tensor_parallelism": True, "dtype": None}
    assert dict(smp.calls)["distributed"] == {
        "original": "GPTJForCausalLM",
        "replacement": "DistributedTransformerLMHead",
    }
    assert dict(smp.calls)["set_activation_checkpointing"] == {"module": "Sequential", "strategy": "each"}
    # Partial checkpoints hold SMP's names.
    partial = torch.load(tmp_path / "checkpoints" / "step_00000002" / "step_00000002_partial" / "model_0_0.pt")
    assert "transformer.seq_layers.0.attention.query.weight" in partial and partial["_smp_is_partial"] is True

    # The final model is an ordinary HF folder whose weights are the distributed module's, translated.
    folder = tmp_path / "model"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in folder.iterdir()}
    trained = gptj.translate_state_dict_to_hf_gptj(smp.model.get_module().state_dict(), max_seq_len=128)
    saved = load_file(folder / "model.safetensors")
    assert saved.keys() == {name for name in trained if not name.endswith((".attn.bias", ".attn.masked_bias"))}
    assert all(torch.equal(saved[name], trained[name]) for name in saved)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gptj" and config["use_cache"] is True

    loaded = load_saved_model(folder).eval()
    assert type(loaded).__name__ == "GPTJForCausalLM"
    distributed = smp.model.get_module().eval()
    blocks = torch.tensor([json.loads(line)["input_ids"] for line in _lines(prepared_data["validation"])[:4]])
    with torch.no_grad():
        expected = distributed(input_ids=blocks, labels=blocks)
        actual = loaded(input_ids=blocks, labels=blocks)
    assert torch.allclose(actual.logits, expected.logits, atol=1e-5) and summary["val_loss"] < 10


def _lines(folder):
    return [line for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines() if line]


def test_tensor_parallel_fine_tuning_starts_from_the_pretrained_weights(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group,
    supported_transformers,
) -> None:  # fmt: skip
    """SMP's distributed module starts from fresh weights; the pretrained ones must be loaded into it."""
    pretrained = save_tiny_model(tmp_path / "channel-model", arch="gptj")
    smp = _install(monkeypatch, SmpV1())
    arguments = _without(
        train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=1, lr=1e-12, min_lr=0),
        "--model_config",
        "--tokenizer_dir",
    )
    train_script.run(arguments, {**ENVIRON, "SM_CHANNEL_MODEL": str(pretrained)})
    names = smp.names()
    assert names.index("distributed") < names.index("load_state_dict") < names.index("deferred_load")
    # An update of 1e-12 leaves the weights as loaded: the final model is the pretrained one, not a fresh init.
    before, after = load_file(pretrained / "model.safetensors"), load_file(tmp_path / "model" / "model.safetensors")
    # GPT-J's causal-mask constants: transformers 4.21 (the SMP v1 image) saves them, SMP's final model does not.
    before = {name: tensor for name, tensor in before.items() if not name.endswith((".attn.bias", ".attn.masked_bias"))}
    assert after.keys() == before.keys()
    assert all(torch.allclose(after[name], before[name], rtol=0, atol=1e-7) for name in before)


def test_tensor_parallel_resume_continues_from_the_partial_checkpoint(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, clean_environment, fresh_process_group,
    supported_transformers,
) -> None:  # fmt: skip
    options = {"checkpoint_freq": 2, "validation_freq": 0, "lr_decay_iters": 4}
    _install(monkeypatch, SmpV1())
    train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=3, **options), ENVIRON)
    dist.destroy_process_group()
    resumed = _install(monkeypatch, SmpV1())
    train_script.run(train_arguments(tiny_assets, prepared_data, tmp_path, max_steps=4, **options), ENVIRON)
    assert dict(resumed.calls)["resume_from_checkpoint"]["tag"] == "step_00000002"
    dist.destroy_process_group()
    _install(monkeypatch, SmpV1())
    straight = tmp_path / "straight"
    train_script.run(train_arguments(tiny_assets, prepared_data, straight, max_steps=4, **options), ENVIRON)
    first, second = (
        load_file(tmp_path / "model" / "model.safetensors"),
        load_file(straight / "model" / "model.safetensors"),
    )
    assert first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


@pytest.mark.parametrize(
    ("version", "config", "mp_parameters", "message"),
    [
        (
            "4.28.1",
            "gptj",
            TP2,
            r"tensor_parallel_degree is 2 but transformers is 4\.28\.1 \(installed in this job\): SMP v1 replaces Hugging Face models with its tensor-parallel modules only for transformers 4\.17\.0, 4\.20\.1, 4\.21\.0",
        ),
        ("4.21.0", "gpt_neox", TP2, r"SMP v1 tensor parallelism only for model type gptj, not 'gpt_neox'"),
        ("4.21.0", "gptj", {**TP2, "optimize": "memory", "prescaled_batch": False}, r'supports only optimize="speed"'),
    ],
)
def test_refuses_tensor_parallelism_smp_v1_would_skip_or_mistranslate(
    train_script, tiny_assets, prepared_data, tmp_path, monkeypatch, capsys, clean_environment, version, config,
    mp_parameters, message,
) -> None:  # fmt: skip
    _use_transformers_version(monkeypatch, version)
    smp = _install(monkeypatch, SmpV1())
    config_path = tiny_assets["config"]
    if config != "gptj":
        config_path = tmp_path / f"{config}.json"
        config_path.write_text(json.dumps(build_config(config, vocab_size=512).to_dict()))
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path, model_config=config_path, max_steps=1)
    environ = {**ENVIRON, "SM_HP_MP_PARAMETERS": json.dumps(mp_parameters)}
    assert train_script.main(arguments, environ) == 2
    error = capsys.readouterr().err
    assert error.startswith("train.py: error: ") and "Traceback" not in error
    with pytest.raises(ConfigurationError, match=message):
        train_script.run(arguments, environ)
    assert smp.calls == [] and not (tmp_path / "model").exists()  # refused before SMP started


def test_the_stand_in_keeps_the_hf_model_on_unsupported_versions_and_the_backend_refuses_to_train_it(
    tiny_assets, monkeypatch, clean_environment, fresh_process_group
) -> None:
    """What SMP does with transformers 4.28.1: a warning, and no tensor parallelism. The start-up check above is
    the first net; the backend's check after smp.DistributedModel is the second."""
    _use_transformers_version(monkeypatch, "4.28.1")
    smp = _install(monkeypatch, SmpV1())
    hp, _ = parse_hyperparameters(["--model_config", str(tiny_assets["config"])], {})
    backend = SmpV1Backend(hp, parse_layout(TP2), "fp32", {})
    backend.setup()
    source = _gptj_source(tiny_assets)
    model = backend.create_model(lambda dtype, load_weights=True: build_model(source, dtype, load_weights))
    with pytest.raises(ConfigurationError, match=r"SMP v1 kept the Hugging Face GPTJForCausalLM whole"):
        backend.prepare(model, lambda module: torch.optim.AdamW(module.parameters()))
    assert "distributed" not in smp.names()
    assert "Found unsupported HuggingFace version 4.28.1" in dict(smp.calls)["warning"]["message"]
    assert type(smp.model.get_module()).__name__ == "GPTJForCausalLM"
