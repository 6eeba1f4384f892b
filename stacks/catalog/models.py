"""The language models this platform trains and serves, and the shape facts sizing needs.

Figures are from each model's Hugging Face config (layers, hidden size, heads, context, vocabulary) and its model
card (parameter count). `deepspeed_kernels` says whether DeepSpeed has a kernel-injection policy for the
architecture (research/lmi_serving.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    name: str
    hf_id: str  # where the pretrained weights come from, once, when they are staged in S3
    architecture: str  # Hugging Face model_type
    parameters: int
    layers: int
    hidden_size: int
    attention_heads: int
    context_tokens: int
    vocab_size: int
    deepspeed_kernels: bool

    @property
    def billions(self) -> float:
        return self.parameters / 1e9


MODELS: dict[str, Model] = {
    m.name: m
    for m in [
        Model("gpt-j-6b", "EleutherAI/gpt-j-6b", "gptj", 6_053_381_344, 28, 4096, 16, 2048, 50400, True),
        Model("gpt-neox-20b", "EleutherAI/gpt-neox-20b", "gpt_neox", 20_554_567_680, 44, 6144, 64, 2048, 50432, True),
        Model("opt-30b", "facebook/opt-30b", "opt", 29_974_865_920, 48, 7168, 56, 2048, 50272, True),
        Model("bloom-176b", "bigscience/bloom", "bloom", 176_247_271_424, 70, 14336, 112, 2048, 250880, True),
    ]
}


def model(name: str) -> Model:
    """The catalog entry for `name`; a KeyError that lists the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a known model; known: {', '.join(MODELS)}") from None
