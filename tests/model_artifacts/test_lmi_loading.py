"""plan_loading decides kernel injection, dtypes, meta-device loading and token limits before any GPU work; load_model
hands DeepSpeed what the plan says."""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import deepspeed_standin
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


def test_int8_from_a_hugging_face_folder_is_refused_because_deepspeed_would_not_quantize_it():
    # DeepSpeed quantizes only while loading checkpoint shards; from HF weights it casts fp16 to unscaled int8.
    with pytest.raises(ConfigError, match=r"option.dtype='int8' needs a pre-sharded DeepSpeed checkpoint"):
        _plan(config=_config(dtype="int8"), cuda=True)


def _ds_checkpoint(folder, tp_size=8, dtype="int8", partitions=2, **overrides):
    """A folder laid out as microsoft/bloom-deepspeed-inference-int8 (and as DeepSpeed's save_mp_checkpoint_path
    writes it, replace_module.py @ v0.12.6): non-tp.pt, tp_<rank>_<partition>.pt, ds_inference_config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    description = {
        "type": "BLOOM",
        "checkpoints": {
            "non_tp": ["non-tp.pt"],
            "tp": [f"tp_{r:0>2d}_{m:0>2d}.pt" for m in range(partitions) for r in range(tp_size)],
        },
        "version": 1.0,
        "parallelization": "tp",
        "tp_size": tp_size,
        "dtype": dtype,
        **overrides,
    }
    for name in description["checkpoints"]["non_tp"] + description["checkpoints"]["tp"]:
        (folder / name).write_bytes(b"")
    (folder / "ds_inference_config.json").write_text(json.dumps(description))
    return description


BLOOM = _model_config("bloom", seq_length=2048)


def _int8_config(tp):
    return _config(dtype="int8", tensor_parallel_degree=tp)


def test_a_deepspeed_checkpoint_description_loads_on_the_meta_device(tmp_path):
    description = _ds_checkpoint(tmp_path, tp_size=8)
    plan = _plan(config=_int8_config(8), model_config=BLOOM, weights_dir=str(tmp_path), cuda=True)
    assert plan.meta_checkpoint == str(tmp_path / "ds_inference_config.json")
    assert plan.checkpoint == {**description, "base_dir": str(tmp_path)}


def test_an_int8_checkpoint_sharded_for_tp8_is_refused_on_a_tp4_endpoint_at_start_up(tmp_path):
    _ds_checkpoint(tmp_path, tp_size=8)
    with pytest.raises(ConfigError) as error:
        _plan(config=_int8_config(4), model_config=BLOOM, weights_dir=str(tmp_path), cuda=True)
    assert "is an int8 checkpoint sharded for tensor parallelism 8, but this endpoint runs " in str(error.value)
    assert "option.tensor_parallel_degree=4" in str(error.value)
    assert "serve it with tensor_parallel_degree=8" in str(error.value)


@pytest.mark.parametrize(
    ("overrides", "config", "model_type", "remove", "message"),
    [
        ({"version": None}, _int8_config(8), "bloom", None, "has no version; DeepSpeed's get_sd_loader_json needs"),
        ({"type": "Megatron"}, _int8_config(8), "bloom", None, "has type='Megatron'; DeepSpeed loads pre-sharded"),
        ({}, _int8_config(8), "gpt2", None, "not model_type='gpt2'; serve the Hugging Face weights"),
        ({"tp_size": 3}, _int8_config(3), "bloom", None, "its 16 checkpoints.tp files do not form groups of tp_size=3"),
        ({"dtype": "float16"}, _config(dtype="fp16", tensor_parallel_degree=3), "bloom", None, "neither divides nor"),
        (
            {},
            _config(dtype="fp16", tensor_parallel_degree=8),
            "bloom",
            None,
            "holds int8 weights, which option.dtype='fp16' cannot serve; use option.dtype=int8",
        ),
        ({"dtype": "fp8"}, _int8_config(8), "bloom", None, "has dtype='fp8'; expected one of int8, float16"),
        ({}, _int8_config(8), "bloom", "tp_03_01.pt", "lists 1 file(s) missing from"),
        ({"checkpoints": {"non_tp": ["non-tp.pt"]}}, _int8_config(8), "bloom", None, "lists no tensor-parallel shards"),
    ],
)
def test_a_checkpoint_deepspeed_cannot_load_here_is_refused_at_start_up(
    tmp_path, overrides, config, model_type, remove, message
):
    description = _ds_checkpoint(tmp_path, tp_size=8)
    description.update(overrides)
    description = {key: value for key, value in description.items() if value is not None}
    (tmp_path / "ds_inference_config.json").write_text(json.dumps(description))
    if remove:
        (tmp_path / remove).unlink()
    with pytest.raises(ConfigError, match=re.escape(message)):
        _plan(
            config=config, model_config=_model_config(model_type, seq_length=2048), weights_dir=str(tmp_path), cuda=True
        )


def test_an_fp16_checkpoint_may_be_merged_onto_fewer_ranks_or_quantized_to_int8(tmp_path):
    _ds_checkpoint(tmp_path, tp_size=8, dtype="float16")
    for config in (_config(dtype="fp16", tensor_parallel_degree=4), _int8_config(8), _int8_config(2)):
        assert _plan(config=config, model_config=BLOOM, weights_dir=str(tmp_path), cuda=True).checkpoint


@pytest.mark.parametrize("stored", ["int8", "float16"])
@pytest.mark.parametrize("checkpoint_tp", [1, 2, 4, 8])
@pytest.mark.parametrize("endpoint_tp", [1, 2, 4, 8])
def test_start_up_refuses_exactly_the_splits_deepspeed_would_fail_on(tmp_path, stored, checkpoint_tp, endpoint_tp):
    _ds_checkpoint(tmp_path, tp_size=checkpoint_tp, dtype=stored)
    config = _int8_config(endpoint_tp)
    try:
        plan = _plan(config=config, model_config=BLOOM, weights_dir=str(tmp_path), cuda=True)
    except ConfigError:
        plan = None
    meta_bloom = SimpleNamespace(device=SimpleNamespace(type="meta"), config=BLOOM)
    try:
        deepspeed_standin.init_inference(
            meta_bloom,
            tensor_parallel={"tp_size": endpoint_tp},
            replace_with_kernel_inject=True,
            checkpoint=str(tmp_path / "ds_inference_config.json"),
            base_dir=str(tmp_path),
        )
        deepspeed_loads = True
    except AssertionError:
        deepspeed_loads = False
    assert (plan is not None) == deepspeed_loads


def _meta_bloom():
    return SimpleNamespace(device=SimpleNamespace(type="meta"), config=BLOOM)


@pytest.mark.parametrize(
    ("model", "kwargs", "error", "message"),
    [
        (
            _meta_bloom,
            {"tensor_parallel": {"tp_size": 4}, "checkpoint": "int8-tp8"},
            AssertionError,
            "Merging of the checkpoints are not supported when using INT8",
        ),
        (
            _meta_bloom,
            {"tensor_parallel": {"tp_size": 8}, "checkpoint": "int8-tp4"},
            AssertionError,
            "We require the quantization scales for larger TP-size",
        ),
        (_meta_bloom, {"tensor_parallel": {"tp_size": 8}}, RuntimeError, "meta device without a checkpoint"),
        (
            _meta_bloom,
            {"tensor_parallel": {"tp_size": 8}, "checkpoint": "int8-tp8", "max_new_tokens": 5},
            ValueError,
            "extra fields not permitted: ['max_new_tokens']",
        ),
        (
            lambda: SimpleNamespace(device=SimpleNamespace(type="meta"), config=SimpleNamespace(model_type="gpt2")),
            {"tensor_parallel": {"tp_size": 8}, "checkpoint": "int8-tp8"},
            AssertionError,
            "Meta Tensor checkpoint loading not supported in gpt2 container",
        ),
    ],
)
def test_the_deepspeed_stand_in_refuses_what_deepspeed_0_12_6_refuses(tmp_path, model, kwargs, error, message):
    if "checkpoint" in kwargs:
        tp = int(kwargs["checkpoint"].rsplit("tp", 1)[1])
        _ds_checkpoint(tmp_path, tp_size=tp)
        kwargs = {**kwargs, "checkpoint": str(tmp_path / "ds_inference_config.json"), "base_dir": str(tmp_path)}
    with pytest.raises(error, match=re.escape(message)):
        deepspeed_standin.init_inference(model(), replace_with_kernel_inject=True, **kwargs)


def test_the_deepspeed_stand_in_refuses_descriptions_get_sd_loader_json_refuses(tmp_path):
    description = _ds_checkpoint(tmp_path, tp_size=1)
    call = {"tensor_parallel": {"tp_size": 1}, "replace_with_kernel_inject": True, "base_dir": str(tmp_path)}
    without_version = {key: value for key, value in description.items() if key != "version"}
    with pytest.raises(KeyError, match="version"):
        deepspeed_standin.init_inference(_meta_bloom(), checkpoint=without_version, **call)
    with pytest.raises(AssertionError, match="gpt checkpoint type is not supported"):
        deepspeed_standin.init_inference(_meta_bloom(), checkpoint={**description, "type": "gpt"}, **call)
    with pytest.raises(KeyError):  # AutoTP reads the checkpoints as a list of files
        deepspeed_standin.init_inference(_meta_bloom(), checkpoint=description, tensor_parallel={"tp_size": 1})


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
    """The GPU-only path (kernel injection + pre-sharded checkpoint), through the DeepSpeed stand-in: it needs CUDA
    kernels this machine does not have. The description names the folder DeepSpeed wrote it in (base_dir), as
    DeepSpeed's writer leaves it; the shards must be read from where they were downloaded."""
    import deepspeed
    import torch

    weights = tmp_path / "bloom-ds"
    shutil.copytree(tiny_model_dir("bloom"), weights)
    description = _ds_checkpoint(weights, tp_size=1, base_dir="/data/where-deepspeed-wrote-the-shards")
    calls = []

    def recorded_init_inference(model, **kwargs):
        calls.append((model, kwargs))
        return deepspeed_standin.init_inference(model, **kwargs)

    monkeypatch.setattr(deepspeed, "init_inference", recorded_init_inference)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setitem(lmi_loading._LAST_TRANSFORMERS_FOR_INJECTION, "bloom", (99,))  # pretend an older stack
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
        "checkpoint": {**description, "base_dir": str(weights)},
        "base_dir": str(weights),
    }
