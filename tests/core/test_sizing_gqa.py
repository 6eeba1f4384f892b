"""Sizing with grouped-query attention: the KV cache holds num_key_value_heads per layer, tensor parallelism must split
the key/value heads as the engine does, and every catalog model's serving fit matches figures worked out by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core import sizing
from core.catalog import models
from core.catalog.instances import INSTANCE_TYPES
from core.config import ServingConfig, TrainingConfig, load_config

GIB = 1024**3

# Per model: dtype, tensor parallel degree, instance, sequences, tokens; then the weights per GPU and the KV cache per
# GPU in bytes, written out: weights = (parameters - vocabulary x hidden) x bytes / tp + vocabulary x hidden x bytes
# (the token embedding, whole on every GPU; fp16 with int8 weights), KV = 2 x layers x key/value heads per GPU x head
# size x 2 bytes x tokens x sequences.
CASES = {
    "gpt-j-6b": ("fp16", 1, "ml.g5.2xlarge", 4, 2048,
                 6_053_381_344 * 2,
                 2 * 28 * 16 * 256 * 2 * 2048 * 4),  # multi-head: 16 heads of 256, as before
    "gpt-neox-20b": ("fp16", 4, "ml.g5.24xlarge", 4, 2048,
                     (20_554_567_680 - 50432 * 6144) * 2 / 4 + 50432 * 6144 * 2,
                     2 * 44 * (64 // 4) * 96 * 2 * 2048 * 4),
    "opt-30b": ("fp16", 4, "ml.g5.24xlarge", 4, 2048,
                (29_974_865_920 - 50272 * 7168) * 2 / 4 + 50272 * 7168 * 2,
                2 * 48 * (56 // 4) * 128 * 2 * 2048 * 4),
    "bloom-176b": ("int8", 8, "ml.p4d.24xlarge", 4, 2048,
                   (176_247_271_424 - 250880 * 14336) * 1 / 8 + 250880 * 14336 * 2,
                   2 * 70 * (112 // 8) * 128 * 2 * 2048 * 4),
    "llama-3.1-8b": ("bf16", 1, "ml.g5.2xlarge", 4, 8192,
                     8_030_261_248 * 2,
                     2 * 32 * 8 * 128 * 2 * 8192 * 4),  # 8 key/value heads, not 32: 4.0 GiB, not 16
    "llama-3.1-70b": ("bf16", 8, "ml.p4de.24xlarge", 4, 8192,
                      (70_553_706_496 - 128256 * 8192) * 2 / 8 + 128256 * 8192 * 2,
                      2 * 80 * (8 // 8) * 128 * 2 * 8192 * 4),
    "mistral-7b-v0.3": ("bf16", 1, "ml.g5.2xlarge", 4, 8192,
                        7_248_023_552 * 2,
                        2 * 32 * 8 * 128 * 2 * 8192 * 4),
    "qwen2.5-7b": ("bf16", 2, "ml.g5.12xlarge", 8, 32768,
                   (7_615_616_512 - 152064 * 3584) * 2 / 2 + 152064 * 3584 * 2,
                   2 * 28 * (4 // 2) * 128 * 2 * 32768 * 8),
    "qwen2.5-72b": ("bf16", 8, "ml.p4de.24xlarge", 4, 32768,
                    (72_706_203_648 - 152064 * 8192) * 2 / 8 + 152064 * 8192 * 2,
                    2 * 80 * (8 // 8) * 128 * 2 * 32768 * 4),
}  # fmt: skip


def formula_case(model: models.Model) -> tuple:
    """A case for any catalog model, its figures written out as above from the catalog's shape figures: bf16, no
    tensor parallelism, one sequence of its whole context, on the largest GPU instance."""
    weights = model.parameters * 2
    kv = 2 * model.layers * model.kv_heads * model.head_dim * 2 * model.context_tokens * 1
    return ("bf16", 1, "ml.p5.48xlarge", 1, model.context_tokens, weights, kv)


def test_the_hand_worked_cases_are_catalog_models():
    assert set(CASES) <= set(models.MODELS)


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_every_catalog_model_fits_by_the_written_out_formula(name):
    dtype, tp, instance, batch, tokens, weights, kv = formula_case(models.MODELS[name])
    fit = sizing.serving_fit(models.MODELS[name], dtype, tp, INSTANCE_TYPES[instance], batch_size=batch, tokens=tokens)
    assert fit.weights_gib == pytest.approx(weights / GIB)
    assert fit.kv_cache_gib == pytest.approx(kv / GIB)


@pytest.mark.parametrize("name", sorted(CASES))
def test_serving_fit_matches_the_hand_worked_figures(name):
    dtype, tp, instance, batch, tokens, weights, kv = CASES[name]
    fit = sizing.serving_fit(models.MODELS[name], dtype, tp, INSTANCE_TYPES[instance], batch_size=batch, tokens=tokens)
    assert fit.weights_gib == pytest.approx(weights / GIB)
    assert fit.kv_cache_gib == pytest.approx(kv / GIB)
    assert fit.runtime_gib == sizing.RUNTIME_OVERHEAD_GIB
    assert fit.fits  # each case is a setup that serves


def test_multi_head_models_size_their_kv_cache_as_before():
    # The formula before grouped-query attention: 2 x layers x hidden size x 2 bytes x tokens x sequences / tp.
    for name in ("gpt-j-6b", "gpt-neox-20b", "opt-30b", "bloom-176b"):
        model = models.MODELS[name]
        _, tp, instance, batch, tokens, _, _ = CASES[name]
        fit = sizing.serving_fit(model, "fp16", tp, INSTANCE_TYPES[instance], batch_size=batch, tokens=tokens)
        assert fit.kv_cache_gib == pytest.approx(2 * model.layers * model.hidden_size * 2 * tokens * batch / tp / GIB)


def test_with_more_gpus_than_key_value_heads_each_gpu_caches_one_copied_head():
    # vLLM copies each key/value head onto tp / kv GPUs: every GPU still caches one head, not a fraction of one.
    model = models.Model(adapters_summary="(a test model)",
        name="gqa-2", hf_id="x/gqa-2", architecture="llama", parameters=1_000_000_000, layers=16, hidden_size=2048,
        attention_heads=16, context_tokens=4096, vocab_size=32000, key_value_heads=2,
    )  # fmt: skip
    assert sizing.kv_heads_per_gpu(model, 8) == 1 and sizing.kv_heads_per_gpu(model, 2) == 1
    fit = sizing.serving_fit(model, "bf16", 8, INSTANCE_TYPES["ml.g5.48xlarge"], batch_size=1, tokens=4096)
    assert fit.kv_cache_gib == pytest.approx(2 * 16 * 1 * 128 * 2 * 4096 / GIB)
    assert sizing.splits_heads(model, 8, "vllm") and not sizing.splits_heads(model, 8, "deepspeed")


@pytest.fixture
def odd_gqa_models(monkeypatch):
    """Two grouped-query models whose head counts the catalog's real models never trip on their instances."""
    monkeypatch.setitem(
        models.MODELS,
        "gqa-6kv",
        models.Model(adapters_summary="(a test model)", name="gqa-6kv", hf_id="x/gqa-6kv", architecture="llama", parameters=1_000_000_000, layers=16,
                     hidden_size=3072, attention_heads=24, context_tokens=4096, vocab_size=32000,
                     key_value_heads=6, config_min_transformers="4.34.0"),
    )  # fmt: skip
    monkeypatch.setitem(
        models.MODELS,
        "gqa-2kv",
        models.Model(adapters_summary="(a test model)", name="gqa-2kv", hf_id="x/gqa-2kv", architecture="llama", parameters=1_000_000_000, layers=16,
                     hidden_size=2048, attention_heads=16, context_tokens=4096, vocab_size=32000,
                     key_value_heads=2, config_min_transformers="4.34.0"),
    )  # fmt: skip


@pytest.mark.bad_input("config")
def test_vllm_refuses_a_degree_that_neither_divides_nor_multiplies_the_key_value_heads(odd_gqa_models):
    with pytest.raises(ValidationError) as raised:
        ServingConfig(engine="vllm", model="gqa-6kv", instance_type="ml.g5.12xlarge", tensor_parallel_degree=4)
    message = str(raised.value)
    assert "neither divides nor is a multiple of the 6 key/value heads of gqa-6kv" in message
    assert "on ml.g5.12xlarge use one of [1, 2]" in message


@pytest.mark.bad_input("config")
def test_deepspeed_refuses_more_gpus_than_key_value_heads_which_vllm_accepts(odd_gqa_models):
    fields = dict(model="gqa-2kv", instance_type="ml.g5.12xlarge", tensor_parallel_degree=4, dtype="fp16")
    assert ServingConfig(engine="vllm", **fields).fit().fits
    with pytest.raises(ValidationError, match=r"does not divide the 2 key/value heads .* use one of \[1, 2\]"):
        ServingConfig(engine="deepspeed", **fields)


@pytest.mark.bad_input("config")
def test_a_degree_that_does_not_divide_the_query_heads_names_the_ones_that_work():
    with pytest.raises(ValidationError, match=r"does not divide the 28 attention heads of qwen2.5-7b; on ml.g5.48xlarge "
                       r"use one of \[1, 2, 4\]"):  # fmt: skip
        ServingConfig(engine="vllm", model="qwen2.5-7b", dtype="bf16", instance_type="ml.g5.48xlarge",
                      tensor_parallel_degree=8)  # fmt: skip


@pytest.mark.bad_input("config")
def test_lmi_deepspeed_cannot_load_llama_3_1():
    with pytest.raises(ValidationError, match=r"ships transformers 4\.39\.0, which cannot load llama-3\.1-8b .*"
                       r"needs transformers 4\.43\.0 or later\); use engine vllm"):  # fmt: skip
        ServingConfig(engine="deepspeed", model="llama-3.1-8b", instance_type="ml.g5.2xlarge", context_tokens=4096)


def test_lmi_deepspeed_serves_mistral_and_qwen_without_kernel_injection():
    config = ServingConfig(engine="deepspeed", model="mistral-7b-v0.3", instance_type="ml.g5.12xlarge",
                           tensor_parallel_degree=2, context_tokens=8192)  # fmt: skip
    assert config.fit().fits
    with pytest.raises(ValidationError, match="int8 needs DeepSpeed kernel injection, which has no policy"):
        ServingConfig(engine="deepspeed", model="qwen2.5-7b", dtype="int8", instance_type="ml.g5.12xlarge",
                      tensor_parallel_degree=4)  # fmt: skip


@pytest.mark.bad_input("config")
def test_the_whole_llama_3_1_context_does_not_fit_a_g5_and_the_message_says_to_lower_context_tokens():
    with pytest.raises(ValidationError) as raised:
        ServingConfig(engine="vllm", model="llama-3.1-8b", dtype="bf16", instance_type="ml.g5.2xlarge")
    message = str(raised.value)
    assert "KV cache 64.0" in message  # 4 x 131,072 tokens x 128 KiB
    assert "max_batch_size 4 x context_tokens 131072" in message


@pytest.mark.bad_input("config")
def test_context_tokens_above_the_models_context_is_refused():
    with pytest.raises(ValidationError, match=r"context_tokens 40000 is above the 32768-token context of qwen2\.5-7b"):
        ServingConfig(engine="vllm", model="qwen2.5-7b", instance_type="ml.g5.12xlarge", tensor_parallel_degree=4,
                      context_tokens=40000)  # fmt: skip


def test_context_tokens_reach_the_engines_properties():
    from core.serving_properties import stage_properties

    vllm = ServingConfig(engine="vllm", model="llama-3.1-8b", dtype="bf16", instance_type="ml.g5.2xlarge",
                         context_tokens=8192)  # fmt: skip
    assert stage_properties(vllm)["option.max_model_len"] == "8192"
    assert stage_properties(ServingConfig())["option.context_length"] == "2048"  # the model's, by default


@pytest.mark.bad_input("config")
def test_smp_v1_cannot_fine_tune_the_current_models():
    with pytest.raises(ValidationError, match=r"smp\.version 1 cannot fine-tune mistral-7b-v0\.3: its image runs "
                       r"transformers 4\.21\.0"):  # fmt: skip
        TrainingConfig(model="mistral-7b-v0.3")


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("stage", "field"),
    [
        ("training: {model: llama-3.1-8b, smp: {version: 2, tensor_parallel_degree: 1, hybrid_shard_degree: 8}, "
         "precision: bf16}", "training.model: llama-3.1-8b is gated"),
        ("serving: {engine: vllm, model: mistral-7b-v0.3, dtype: bf16, context_tokens: 8192}",
         "serving.model: mistral-7b-v0.3 is gated"),
    ],
    ids=["fine-tuning a gated model", "serving a gated model's staged weights"],
)  # fmt: skip
def test_a_gated_model_without_a_token_secret_is_refused_with_the_fix(tmp_path, stage, field):
    path = tmp_path / "c.yaml"
    path.write_text(f"stages:\n  dev:\n    region: us-east-1\n    {stage}\n")
    with pytest.raises(ValueError) as raised:
        load_config(path)
    message = str(raised.value)
    assert field in message and "set huggingface_token_secret" in message and "put-secret-value" in message


def test_a_gated_model_served_from_s3_needs_no_token(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "stages:\n  dev:\n    region: us-east-1\n    serving: {engine: vllm, model: mistral-7b-v0.3, dtype: bf16, "
        "context_tokens: 8192, weights: {source: s3, s3_uri: 's3://mine/mistral/'}}\n"
    )
    assert load_config(path).stages["dev"].huggingface_token_secret is None


@pytest.mark.bad_input("config")
def test_a_token_secret_name_ending_like_secrets_managers_suffix_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stages:\n  dev:\n    region: us-east-1\n    huggingface_token_secret: team/hf-abc123\n")
    with pytest.raises(ValueError, match="ends with a hyphen and six characters"):
        load_config(path)
