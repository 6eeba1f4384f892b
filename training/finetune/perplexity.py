"""Token-weighted causal-LM loss and perplexity, shared by the training loop's validation and evaluate.py.

Every block has the same length L and labels equal to the inputs, so a batch of B blocks predicts B x (L - 1)
tokens and the HF mean loss times that count is the batch's summed token loss. Summing (loss, tokens) over
batches and ranks and dividing once gives the same number however the data is split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Callable

import torch

# forward(input_ids) -> mean token loss of the batch (a scalar tensor)
MeanLossForward = Callable[[torch.Tensor], torch.Tensor]


def predicted_tokens(input_ids: torch.Tensor) -> int:
    return int(input_ids.shape[0] * (input_ids.shape[1] - 1))


def loss_and_token_sums(forward: MeanLossForward, batches: Iterable[torch.Tensor]) -> tuple[float, int]:
    """(summed token loss, token count) over the batches, computed without gradients."""
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            count = predicted_tokens(batch)
            loss_sum += float(forward(batch)) * count
            tokens += count
    return loss_sum, tokens


def perplexity(mean_loss: float) -> float:
    """exp(loss), saturating to inf instead of raising for a diverged model."""
    try:
        return math.exp(mean_loss)
    except OverflowError:
        return float("inf")
