"""plan_loading decides kernel injection, dtypes, meta-device loading and token limits before any GPU work; load_model
hands DeepSpeed what the plan says."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import lmi_loading
import pytest
from lmi_config import ConfigError, HandlerConfig
from lmi_loading import LoadPlan, load_model, plan_loading


def _config(**overrides) -> HandlerConfig:
    return HandlerConfig(weights="s3://bucket/model/", **overrides)


def _model_config(model_type="gptj", **attributes):
    return SimpleNamespace(model_type=model_type, **attributes)


def _plan(
    config=None, model_config=None, weights_dir="/nonexistent", cuda=False, transformers="4.34.0", tokenizer=None
):
    return plan_loading(
        config or _config(),
        model_config or _model_config(max_position_embeddings=2048),
        weights_dir,
        cuda_available=cuda,
        transformers_version=transformers,
        tokenizer_max_length=tokenizer,
    )


def test_gptj_on_a_gpu_gets_kernel_injection_in_fp16():
    plan = _plan(cuda=True)
    assert plan == LoadPlan(
        model_type="gptj",
        kernel_injection=True,
        torch_dtype="float16",
        deepspeed_dtype="float16",
        meta_checkpoint=None,
        context_length=2048,
        max_input_length=2047,
    )


@pytest.mark.parametrize("model_type", ["gptj", "opt", "bloom", "gpt_neox"])
def test_auto_never_injects_on_cpu(model_type):
    assert not _plan(model_config=_model_config(model_type, n_positions=128), cuda=False).kernel_injection


def test_auto_skips_architectures_without_a_deepspeed_policy():
    assert not _plan(model_config=_model_config("mistral", max_position_embeddings=4096), cuda=True).kernel_injection


def test_bloom_injection_follows_the_transformers_version():
    bloom = _model_config("bloom", seq_length=2048)
    assert _plan(model_config=bloom, cuda=True, transformers="4.36.2").kernel_injection
    assert not _plan(model_config=bloom, cuda=True, transformers="4.44.0").kernel_injection
    assert not _plan(model_config=bloom, cuda=True, transformers="5.24.0").kernel_injection


def test_int8_quantizes_fp16_weights_inside_deepspeed():
    plan = _plan(config=_config(dtype="int8"), cuda=True)
    assert (plan.torch_dtype, plan.deepspeed_dtype, plan.kernel_injection) == ("float16", "int8", True)


def test_a_deepspeed_checkpoint_description_loads_on_the_meta_device(tmp_path):
    (tmp_path / "ds_inference_config.json").write_text(json.dumps({"type": "ds_model", "checkpoints": []}))
    plan = _plan(model_config=_model_config("bloom", seq_length=2048), weights_dir=str(tmp_path), cuda=True)
    assert plan.meta_checkpoint == str(tmp_path / "ds_inference_config.json")


@pytest.mark.parametrize(
    ("config", "model_config", "cuda", "transformers", "message"),
    [
        (_config(kernel_injection="true"), None, False, "4.34.0", "needs a CUDA GPU, and none is visible"),
        (
            _config(kernel_injection="true"),
            _model_config("mistral", max_position_embeddings=4096),
            True,
            "4.34.0",
            "DeepSpeed has no injection policy for model_type='mistral'",
        ),
        (
            _config(kernel_injection="true"),
            _model_config("bloom", seq_length=2048),
            True,
            "5.24.0",
            "refuses BLOOM kernel injection with transformers 5.24.0",
        ),
        (_config(dtype="int8"), None, False, "4.34.0", "option.dtype='int8' needs DeepSpeed kernel injection"),
        (_config(max_input_length=4096), None, False, "4.34.0", "option.max_input_length=4096 leaves no room"),
        (_config(), _model_config("bloom"), False, "4.34.0", "cannot tell the context length of model_type='bloom'"),
    ],
)
def test_impossible_combinations_fail_at_start_up(config, model_config, cuda, transformers, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        _plan(config=config, model_config=model_config, cuda=cuda, transformers=transformers)


def test_a_deepspeed_checkpoint_without_injection_is_refused(tmp_path):
    (tmp_path / "ds_inference_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="only loads with kernel injection"):
        _plan(weights_dir=str(tmp_path), cuda=False)


@pytest.mark.parametrize(
    ("config", "model_config", "tokenizer", "context"),
    [
        (_config(), _model_config(n_positions=1024), None, 1024),
        (_config(), _model_config("bloom"), 4096, 4096),  # BLOOM states no window: the tokenizer's limit
        (_config(), _model_config("bloom"), int(1e30), None),  # tokenizers' "no limit" sentinel is not a window
        (_config(context_length=512), _model_config(max_position_embeddings=2048), None, 512),
    ],
)
def test_context_length_comes_from_the_property_the_config_or_the_tokenizer(config, model_config, tokenizer, context):
    if context is None:
        with pytest.raises(ConfigError, match=r"set option\.context_length"):
            _plan(config=config, model_config=model_config, tokenizer=tokenizer)
    else:
        plan = _plan(config=config, model_config=model_config, tokenizer=tokenizer)
        assert (plan.context_length, plan.max_input_length) == (context, context - 1)


def test_the_meta_path_builds_no_weights_and_hands_deepspeed_the_checkpoint(tmp_path, tiny_model_dir, monkeypatch):
    """The GPU-only path (kernel injection + pre-sharded checkpoint), with DeepSpeed's entry point recorded instead
    of run: it needs CUDA kernels this machine does not have."""
    import deepspeed
    import torch

    weights = tmp_path / "bloom-ds"
    for item in tiny_model_dir("bloom").iterdir():
        (weights / item.name).parent.mkdir(exist_ok=True)
        (weights / item.name).write_bytes(item.read_bytes())
    (weights / "ds_inference_config.json").write_text(json.dumps({"type": "ds_model", "checkpoints": []}))
    calls = []

    def fake_init_inference(model, **kwargs):
        calls.append((model, kwargs))
        return SimpleNamespace(module=model)

    monkeypatch.setattr(deepspeed, "init_inference", fake_init_inference)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(lmi_loading, "_LAST_TRANSFORMERS_FOR_BLOOM_INJECTION", (99,))  # pretend an older stack
    config = HandlerConfig(weights=str(weights), dtype="int8", tensor_parallel_degree=1)
    model, _, plan = load_model(str(weights), config, use_cuda=True)

    ((handed_over, kwargs),) = calls
    assert handed_over is model
    assert {parameter.device.type for parameter in model.parameters()} == {"meta"}
    assert kwargs == {
        "tensor_parallel": {"tp_size": 1},
        "dtype": torch.int8,
        "replace_with_kernel_inject": True,
        "max_out_tokens": plan.context_length,
        "checkpoint": str(weights / "ds_inference_config.json"),
        "base_dir": str(weights),
    }
