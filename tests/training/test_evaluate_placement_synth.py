"""Synth's rules for evaluate.py's placement (core/sizing.py, core/config/lora_evaluation.py) against
training/finetune/placement.py and accelerate's own placement at the smallest capacity synth accepts. They import
core/, so they run in the dev suite only, apart from test_evaluate_placement.py, which also runs in the SMP v2
image environment (tests/training/image_environments.py)."""

from __future__ import annotations

import pytest
from accelerate.utils import compute_module_sizes
from finetune import placement
from finetune.errors import ConfigurationError
from test_evaluate_placement import llama_config, skeleton


def test_each_gpu_keeps_synths_runtime_reserve() -> None:
    from core import sizing

    assert placement.RUNTIME_RESERVE_GIB == sizing.RUNTIME_OVERHEAD_GIB
    gib = 1024**3
    assert placement.budgets([24 * gib, 40 * gib, gib]) == {0: 22 * gib, 1: 38 * gib, 2: 0}


@pytest.mark.parametrize(
    "shape",
    [
        {"vocab_size": 2048, "hidden_size": 64},  # the embedding is the largest part (as in Llama 3.1 70B)
        {"vocab_size": 128, "hidden_size": 128},  # a layer is
        {"vocab_size": 2048, "hidden_size": 64, "tie_word_embeddings": True},  # the LM head is the embedding
    ],
    ids=["embedding-largest", "layer-largest", "tied"],
)
@pytest.mark.parametrize("gpus", [2, 3, 4, 8])
def test_what_synth_accepts_spread_accelerate_places(shape, gpus) -> None:
    from core.config.lora_evaluation import spread_need, spread_room

    model = skeleton(llama_config(layers=16, **shape))
    sizes = compute_module_sizes(model)
    weights, layer = sizes[""], sizes["model.layers.0"]
    largest = max(layer, sizes["model.embed_tokens"], sizes["lm_head"])
    need = spread_need(weights, layer, largest, gpus)

    def accepted(capacity: float) -> bool:
        return need <= spread_room(weights, layer, gpus, capacity)

    # The least per GPU synth's rule accepts, within a byte: above an even share, at most `need` (the last GPU alone).
    low, high = weights / gpus, need
    assert not accepted(low) and accepted(high)
    while high - low > 1:
        low, high = (low, (low + high) / 2) if accepted((low + high) / 2) else ((low + high) / 2, high)
    spread = placement.device_map(model, {gpu: int(high) for gpu in range(gpus)})  # no ConfigurationError
    # Where synth's bound needs the weights' size on each GPU, accelerate's map is the whole model on one.
    assert (spread is None) == (high >= weights), spread
    with pytest.raises(ConfigurationError):  # the bound is not vacuous: below an even share nothing fits
        placement.device_map(model, {gpu: int(weights / gpus * 0.97) for gpu in range(gpus)})
