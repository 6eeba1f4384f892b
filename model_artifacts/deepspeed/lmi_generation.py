"""Generate text for a validated request: one left-padded batch through model.generate, then per-prompt results.

Each result is {"generated_text": str, "details": {"finish_reason": "length" | "eos_token" | "stop_sequence",
"prompt_tokens": int, "generated_tokens": int}}. `generated_tokens` counts the new tokens up to and including the
EOS token or the token that completed a stop string; the stop string itself is cut from generated_text (as vLLM and
OpenAI do). Parameters the client did not give are left to the model's generation_config, exactly as when calling
model.generate yourself.
"""

from __future__ import annotations

from typing import Any

from lmi_config import ConfigError
from lmi_requests import PAYLOAD_TOO_LARGE, UNPROCESSABLE, GenerationRequest, RequestError
from transformers import StoppingCriteria, StoppingCriteriaList


class TextGenerator:
    def __init__(self, model: Any, tokenizer: Any, *, context_length: int, max_input_length: int) -> None:
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise ConfigError("the tokenizer has neither a pad token nor an eos token, so batches cannot be padded")
            # GPT-J, OPT-style and BLOOM checkpoints ship without a pad token; EOS is the usual stand-in.
            tokenizer.pad_token = tokenizer.eos_token
        # Decoder-only models continue from the last position, so padding goes on the left.
        tokenizer.padding_side = "left"
        self.model = model
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.max_input_length = max_input_length
        self.eos_token_ids = _eos_token_ids(model, tokenizer)

    def generate(self, request: GenerationRequest, *, seed: int | None = None) -> list[dict]:
        import torch

        parameters = request.parameters
        encoded = self.tokenizer(list(request.prompts), return_tensors="pt", padding=True)
        prompt_lengths = [int(length) for length in encoded["attention_mask"].sum(dim=1).tolist()]
        self._check_lengths(request, prompt_lengths)

        kwargs: dict[str, Any] = {
            "max_new_tokens": parameters.max_new_tokens,
            "do_sample": parameters.do_sample,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if parameters.do_sample:
            for name in ("temperature", "top_p", "top_k"):
                value = getattr(parameters, name)
                if value is not None:
                    kwargs[name] = value
        if parameters.repetition_penalty is not None:
            kwargs["repetition_penalty"] = parameters.repetition_penalty
        prompt_width = encoded["input_ids"].shape[1]
        if parameters.stop:
            kwargs["stopping_criteria"] = StoppingCriteriaList(
                [_StopOnStrings(self.tokenizer, parameters.stop, prompt_width, self.eos_token_ids)]
            )
        device = self.model.device
        if seed is not None:
            torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
        output = self.model.generate(
            input_ids=encoded["input_ids"].to(device), attention_mask=encoded["attention_mask"].to(device), **kwargs
        )
        new_tokens = output[:, prompt_width:].tolist()
        return [
            self._result(prompt, prompt_tokens, tokens, request)
            for prompt, prompt_tokens, tokens in zip(request.prompts, prompt_lengths, new_tokens)
        ]

    def _check_lengths(self, request: GenerationRequest, prompt_lengths: list[int]) -> None:
        max_new_tokens = request.parameters.max_new_tokens
        for index, length in enumerate(prompt_lengths):
            name = "inputs" if len(prompt_lengths) == 1 else f"inputs[{index}]"
            if length == 0:
                raise RequestError(UNPROCESSABLE, f"{name} encodes to no tokens; expected a non-empty prompt")
            if length > self.max_input_length:
                raise RequestError(
                    PAYLOAD_TOO_LARGE,
                    f"{name} has {length} tokens; prompts may have at most {self.max_input_length} tokens "
                    "(option.max_input_length or the model's context minus one)",
                )
            if length + max_new_tokens > self.context_length:
                raise RequestError(
                    PAYLOAD_TOO_LARGE,
                    f"{name} has {length} tokens and parameters.max_new_tokens={max_new_tokens} asks for "
                    f"{length + max_new_tokens} in all, above the model's context of {self.context_length} tokens; "
                    f"shorten the prompt or ask for at most {self.context_length - length} new tokens",
                )

    def _result(self, prompt: str, prompt_tokens: int, tokens: list[int], request: GenerationRequest) -> dict:
        parameters = request.parameters
        finish_reason = "length"
        for position, token in enumerate(tokens):
            if token in self.eos_token_ids:
                tokens = tokens[: position + 1]
                finish_reason = "eos_token"
                break
        text = self._decode(tokens)
        cut = _first_stop(text, parameters.stop)
        if cut is not None:
            text = text[:cut]
            tokens = tokens[: self._tokens_until_stop(tokens, parameters.stop)]
            finish_reason = "stop_sequence"
        return {
            "generated_text": prompt + text if parameters.return_full_text else text,
            "details": {
                "finish_reason": finish_reason,
                "prompt_tokens": prompt_tokens,
                "generated_tokens": len(tokens),
            },
        }

    def _tokens_until_stop(self, tokens: list[int], stops: tuple[str, ...]) -> int:
        """The fewest leading tokens whose text already contains a stop string (binary search: text only grows)."""
        low, high = 1, len(tokens)
        while low < high:
            middle = (low + high) // 2
            if _first_stop(self._decode(tokens[:middle]), stops) is None:
                low = middle + 1
            else:
                high = middle
        return high

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


class _StopOnStrings(StoppingCriteria):
    """Stops generation once every sequence has produced a stop string or EOS.

    It answers for the whole batch with one bool, which both the transformers 4.3x API (a bool per criteria) and
    the >= 4.39 API (a bool tensor per sequence, OR-ed with this value) accept; sequences that finish early are cut
    at their stop string afterwards, so the text is the same either way.
    """

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], prompt_width: int, eos_token_ids: frozenset) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.prompt_width = prompt_width
        self.eos_token_ids = eos_token_ids
        # A stop string of n characters spans at most n tokens (plus a few partial-UTF-8 ones): decode only the tail.
        self.window = max(len(stop) for stop in stops) + 8

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
        for row in input_ids:
            new_tokens = row[self.prompt_width :].tolist()
            if any(token in self.eos_token_ids for token in new_tokens):
                continue
            tail = self.tokenizer.decode(new_tokens[-self.window :], skip_special_tokens=True)
            if _first_stop(tail, self.stops) is None:
                return False
        return True


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    positions = [position for position in (text.find(stop) for stop in stops) if position >= 0]
    return min(positions) if positions else None


def _eos_token_ids(model: Any, tokenizer: Any) -> frozenset:
    ids = set()
    generation_config = getattr(model, "generation_config", None)
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, (list, tuple)):
        ids.update(int(token) for token in configured)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)
