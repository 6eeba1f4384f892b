"""The model catalog: the current open models' figures agree with their published parameter counts, grouped-query
attention is recorded as num_key_value_heads, and each model says which engines and training paths can load it."""

from __future__ import annotations

import pytest

from core.catalog.models import LMI_DEEPSPEED_TRANSFORMERS, MODELS, Model, version_tuple

CURRENT = ("llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.3", "qwen2.5-7b", "qwen2.5-72b")


def decoder_parameters(model: Model, *, qkv_bias: bool) -> int:
    """Llama, Mistral and Qwen2 layers as transformers builds them: q, k, v and o projections (k and v only
    num_key_value_heads x head_dim wide; Qwen2 has biases on q, k and v), the gated MLP (gate, up, down), two RMSNorms;
    then the final norm, the token embedding and, untied, the LM head."""
    h, kv_width = model.hidden_size, model.kv_heads * model.head_dim
    attention = h * h + 2 * h * kv_width + h * h + ((h + 2 * kv_width) if qkv_bias else 0)
    mlp = 3 * h * model.intermediate_size
    layer = attention + mlp + 2 * h
    embeddings = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    return model.layers * layer + h + embeddings


# Every catalog model of the architectures decoder_parameters rebuilds: the current ones and any added later.
LLAMA_LIKE = sorted(name for name, model in MODELS.items() if model.architecture in ("llama", "mistral", "qwen2"))


def test_the_rebuilt_models_include_the_current_ones():
    assert set(CURRENT) <= set(LLAMA_LIKE)


@pytest.mark.parametrize("name", LLAMA_LIKE)
def test_the_figures_rebuild_the_parameter_count(name):
    model = MODELS[name]
    assert decoder_parameters(model, qkv_bias=model.architecture == "qwen2") == model.parameters


@pytest.mark.parametrize(
    ("name", "billions"),
    # The model cards' rounded totals.
    [
        ("llama-3.1-8b", 8.03),
        ("llama-3.1-70b", 70.6),
        ("mistral-7b-v0.3", 7.25),
        ("qwen2.5-7b", 7.61),
        ("qwen2.5-72b", 72.7),
    ],
)
def test_the_parameter_counts_round_to_the_model_cards(name, billions):
    # Within the cards' last digit (Qwen's cards truncate 7.6156 to 7.61, Meta's round 70.554 to 70.6).
    assert abs(MODELS[name].billions - billions) < (0.01 if billions < 10 else 0.1)


def test_grouped_query_attention_is_recorded_and_multi_head_models_keep_all_their_heads():
    assert {name: MODELS[name].kv_heads for name in CURRENT} == {
        "llama-3.1-8b": 8, "llama-3.1-70b": 8, "mistral-7b-v0.3": 8, "qwen2.5-7b": 4, "qwen2.5-72b": 8,
    }  # fmt: skip
    for name in ("gpt-j-6b", "gpt-neox-20b", "opt-30b", "bloom-176b"):
        assert MODELS[name].kv_heads == MODELS[name].attention_heads
    assert all(MODELS[name].head_dim == 128 for name in CURRENT)


def test_gated_repositories_and_licenses():
    # Meta and Mistral AI gate their repositories; EleutherAI, Meta's OPT, BigScience and Qwen do not.
    for model in MODELS.values():
        assert model.gated == model.hf_id.startswith(("meta-llama/", "mistralai/")), model.name
    assert {"llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.3"} <= {n for n, m in MODELS.items() if m.gated}
    assert {MODELS[name].license for name in CURRENT} == {"llama3.1", "apache-2.0", "qwen"}
    # The gate follows the repository staged: a gated model's Hugging Face folder, never a public checkpoint repo.
    assert MODELS["llama-3.1-8b"].staged().gated and not MODELS["gpt-j-6b"].staged().gated
    assert not MODELS["bloom-176b"].staged("deepspeed-int8-tp8", allow_pickle=True).gated


def test_lmi_deepspeed_loads_mistral_and_qwen_but_not_llama_3_1_and_has_no_kernels_for_any():
    loadable = {name for name in CURRENT if MODELS[name].loads_with_transformers(LMI_DEEPSPEED_TRANSFORMERS)}
    assert loadable == {"mistral-7b-v0.3", "qwen2.5-7b", "qwen2.5-72b"}
    assert not any(MODELS[name].deepspeed_kernels for name in CURRENT)
    assert version_tuple("4.43.0") > version_tuple("4.39.0") > version_tuple("4.9.1")


def test_a_model_whose_heads_cannot_group_its_key_value_heads_is_refused():
    with pytest.raises(ValueError, match="must be a multiple of its 3 key/value heads"):
        Model(
            adapters_summary="(a test model)",
            name="odd",
            hf_id="x/odd",
            architecture="llama",
            parameters=1,
            layers=2,
            hidden_size=64,
            attention_heads=4,
            context_tokens=128,
            vocab_size=100,
            key_value_heads=3,
        )


def test_pickles_are_staged_only_from_a_pinned_commit():
    bloom, gptj = MODELS["bloom-176b"], MODELS["gpt-j-6b"]
    assert bloom.staged("deepspeed-int8-tp8", allow_pickle=True).revision  # the catalog pins it
    with pytest.raises(ValueError, match=r"bloom-deepspeed-inference-fp16 without a pinned commit"):
        bloom.staged("deepspeed-fp16-tp8", allow_pickle=True)
    with pytest.raises(ValueError, match=r"EleutherAI/gpt-j-6b without a pinned commit"):
        gptj.staged(allow_pickle=True)
    assert gptj.staged(revision="0" * 40, allow_pickle=True).name == "gpt-j-6b-pickle"
