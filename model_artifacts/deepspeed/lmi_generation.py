"""Generate text for validated requests: prepare() tokenizes and checks one request, generate() runs one or more
prepared requests that share their generation settings as one left-padded batch through model.generate.

Each prompt's result is {"generated_text": str} plus, when the request asked for `details`, LMI 0.27.0's details
(rolling_batch.py's json output formatter): {"finish_reason": "length" | "eos_token" | "stop_sequence",
"generated_tokens": int, "inputs": the prompt, "tokens": [{"id": [int], "text": str, "log_prob": float}, ...]} and
"prompt_tokens": int (the prompt's tokens after `truncate`). `generated_tokens` counts the new tokens up to and
including the EOS token or the token that completed a stop string; the stop string itself is cut from
generated_text (as vLLM and OpenAI do). `log_prob` is the token's log-probability under the distribution it was
chosen from (after repetition penalty, temperature, top-k/top-p/typical-p). Parameters the client did not give are
left to the model's generation_config, exactly as when calling model.generate yourself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from typing import Any

from lmi_config import ConfigError
from lmi_requests import PAYLOAD_TOO_LARGE, UNPROCESSABLE, GenerationParameters, GenerationRequest, RequestError
from request_schema import SAMPLING_PARAMETERS
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

# BaseException that must never be taken for a bad prompt. Everything else a tokenizer raises is about its input,
# including pyo3's PanicException (a BaseException) from the Rust tokenizers.
_NOT_THE_PROMPTS_FAULT = (KeyboardInterrupt, SystemExit, GeneratorExit)


@dataclasses.dataclass(frozen=True)
class PreparedRequest:
    request: GenerationRequest
    token_ids: tuple[tuple[int, ...], ...]  # one row per prompt, after `truncate`


def batch_key(request: GenerationRequest) -> Hashable | None:
    """Requests with equal keys may share one model.generate call, each getting what it would get alone; None: this
    request runs alone. Greedy decoding does not depend on the other rows of a left-padded batch; sampling does (the
    random stream is drawn for every row), so a sampling request always runs alone and its seed reproduces it."""
    parameters = request.parameters
    if parameters.do_sample:
        return None
    # What only shapes the answer, or the prompts before generation, does not stop two requests sharing a call.
    return dataclasses.replace(parameters, seed=None, truncate=None, return_full_text=False, details=False)


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

    def warm_up(self, batch_size: int) -> None:
        """Generate once over `batch_size` rows before the first request. DeepSpeed's fused kernels allocate their
        workspace once, sized by the batch of the first forward pass (ds_transformer.py allocate_workspace at layer
        0), and a later, larger batch then fails ("The specified pointer resides on host memory",
        deepspeedai/DeepSpeed#3402, open since 0.9.0): the first forward must be the largest batch this worker runs."""
        import torch

        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((batch_size, 2), pad, dtype=torch.long, device=self.model.device)
        self.model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=2,
            do_sample=False,
            pad_token_id=pad,
        )

    def prepare(self, request: GenerationRequest) -> PreparedRequest:
        """Tokenize the prompts, apply `truncate` (keep each prompt's last tokens) and check the token limits."""
        rows = self._tokenize(request)
        truncate = request.parameters.truncate
        if truncate is not None:
            rows = [row[-truncate:] for row in rows]
        self._check_lengths(request, [len(row) for row in rows])
        return PreparedRequest(request, tuple(tuple(row) for row in rows))

    def generate(self, batch: Sequence[PreparedRequest], *, seed: int | None = None) -> list[list[dict]]:
        """One model.generate call for requests with equal batch_key (or one request); the results per request."""
        import torch

        details = any(prepared.request.parameters.details for prepared in batch)
        width, kwargs = self.generate_arguments(batch, scores=details)
        if seed is not None:
            torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
        output = self.model.generate(**kwargs)
        sequences = output.sequences if details else output
        new_tokens = sequences[:, width:].tolist()
        log_probs = _log_probs(output.scores, sequences[:, width:]) if details else [None] * len(new_tokens)
        results: list[list[dict]] = []
        row = 0
        for prepared in batch:
            request = prepared.request
            answers = []
            for prompt, prompt_ids in zip(request.prompts, prepared.token_ids):
                answers.append(self.result(prompt, len(prompt_ids), new_tokens[row], log_probs[row], request))
                row += 1
            results.append(answers)
        return results

    def generate_arguments(self, batch: Sequence[PreparedRequest], *, scores: bool = False) -> tuple[int, dict]:
        """(width of the left-padded prompts, model.generate's keyword arguments) for requests that share a call;
        `scores` asks model.generate for the scores of each step too (for `details`)."""
        import torch

        parameters = batch[0].request.parameters
        rows = [list(row) for prepared in batch for row in prepared.token_ids]
        width = max(len(row) for row in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])
        attention_mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
        device = self.model.device
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            "max_new_tokens": parameters.max_new_tokens,
            "do_sample": parameters.do_sample,
            "pad_token_id": pad,
            # transformers < 4.45 (the LMI 0.27.0 image has 4.39) samples in the model's dtype; in fp16, logits
            # divided by a small temperature overflow into inf and softmax gives NaN. This runs after the repetition
            # penalty and before temperature/top-k/top-p/typical-p there; newer releases already sample in fp32.
            "logits_processor": LogitsProcessorList([_Float32Scores()]),
        }
        if parameters.do_sample:
            for name in SAMPLING_PARAMETERS:
                value = getattr(parameters, name)
                if value is not None:
                    kwargs[name] = value
        if parameters.repetition_penalty is not None:
            kwargs["repetition_penalty"] = parameters.repetition_penalty
        if parameters.stop:
            kwargs["stopping_criteria"] = StoppingCriteriaList(
                [_StopOnStrings(self.tokenizer, parameters.stop, width, self.eos_token_ids)]
            )
        if scores:
            kwargs.update(output_scores=True, return_dict_in_generate=True)
        return width, kwargs

    def _tokenize(self, request: GenerationRequest) -> list[list[int]]:
        try:
            return [list(row) for row in self.tokenizer(list(request.prompts))["input_ids"]]
        except _NOT_THE_PROMPTS_FAULT:
            raise
        except BaseException:  # name the prompt: tokenize them one by one
            for index, prompt in enumerate(request.prompts):
                try:
                    self.tokenizer([prompt])
                except _NOT_THE_PROMPTS_FAULT:
                    raise
                except BaseException as error:
                    name = "inputs" if request.single else f"inputs[{index}]"
                    raise RequestError(
                        UNPROCESSABLE,
                        f"{name} cannot be tokenized by this model's tokenizer ({type(error).__name__}: {error})",
                    ) from None
            raise

    def _check_lengths(self, request: GenerationRequest, prompt_lengths: list[int]) -> None:
        max_new_tokens = request.parameters.max_new_tokens
        for index, length in enumerate(prompt_lengths):
            name = "inputs" if request.single else f"inputs[{index}]"
            if length == 0:
                raise RequestError(UNPROCESSABLE, f"{name} encodes to no tokens; expected a non-empty prompt")
            if length > self.max_input_length:
                raise RequestError(
                    PAYLOAD_TOO_LARGE,
                    f"{name} has {length} tokens; prompts may have at most {self.max_input_length} tokens "
                    "(option.max_input_length or the model's context minus one); parameters.truncate keeps only a "
                    "prompt's last tokens",
                )
            if length + max_new_tokens > self.context_length:
                raise RequestError(
                    PAYLOAD_TOO_LARGE,
                    f"{name} has {length} tokens and parameters.max_new_tokens={max_new_tokens} asks for "
                    f"{length + max_new_tokens} in all, above the model's context of {self.context_length} tokens; "
                    f"shorten the prompt or ask for at most {self.context_length - length} new tokens",
                )

    def result(
        self, prompt: str, prompt_tokens: int, tokens: list[int], log_probs: list | None, request: GenerationRequest
    ) -> dict:
        """One prompt's answer from its new tokens: cut at EOS or the first stop string, decoded, with details."""
        parameters: GenerationParameters = request.parameters
        finish_reason = "length"
        for position, token in enumerate(tokens):
            if token in self.eos_token_ids:
                tokens = tokens[: position + 1]
                finish_reason = "eos_token"
                break
        text = self.decode(tokens)
        cut = first_stop(text, parameters.stop)
        if cut is not None:
            text = text[:cut]
            tokens = tokens[: self._tokens_until_stop(tokens, parameters.stop)]
            finish_reason = "stop_sequence"
        result: dict = {"generated_text": prompt + text if parameters.return_full_text else text}
        if parameters.details:
            result["details"] = {
                "finish_reason": finish_reason,
                "generated_tokens": len(tokens),
                "inputs": prompt,
                "prompt_tokens": prompt_tokens,
                "tokens": [
                    {"id": [token], "text": self.tokenizer.decode([token]), "log_prob": log_prob}
                    for token, log_prob in zip(tokens, log_probs or [])
                ],
            }
        return result

    def _tokens_until_stop(self, tokens: list[int], stops: tuple[str, ...]) -> int:
        """The fewest leading tokens whose text already contains a stop string (binary search: text only grows)."""
        low, high = 1, len(tokens)
        while low < high:
            middle = (low + high) // 2
            if first_stop(self.decode(tokens[:middle]), stops) is None:
                low = middle + 1
            else:
                high = middle
        return high

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


def response_body(request: GenerationRequest, results: list[dict]) -> dict | list[dict]:
    """LMI's shape: one object for a single string prompt, a list of objects (in order) for a list of prompts."""
    return results[0] if request.single else results


class _Float32Scores(LogitsProcessor):
    def __call__(self, input_ids: Any, scores: Any) -> Any:
        return scores.float()


def _log_probs(scores: Sequence[Any], new_tokens: Any) -> list[list[float | None]]:
    """Per row, the log-probability of each new token under the scores it was chosen from (one step at a time, so
    that no [steps, rows, vocabulary] tensor is ever built)."""
    import torch

    columns = []
    for step, step_scores in enumerate(scores):
        chosen = new_tokens[:, step : step + 1].to(step_scores.device)
        columns.append(torch.log_softmax(step_scores.float(), dim=-1).gather(1, chosen).squeeze(1).tolist())
    rows = [list(row) for row in zip(*columns)] if columns else [[] for _ in range(new_tokens.shape[0])]
    # A JSON answer cannot carry -inf/NaN (Output.add_as_json refuses them): say "unknown" instead.
    return [[value if math.isfinite(value) else None for value in row] for row in rows]


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
            if first_stop(tail, self.stops) is None:
                return False
        return True


def first_stop(text: str, stops: tuple[str, ...]) -> int | None:
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
