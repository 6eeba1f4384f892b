"""Parse and validate one invocation body: the Hugging Face / LMI text-generation request.

    {"inputs": "prompt" | ["prompt", ...],
     "parameters": {"max_new_tokens": 64, "do_sample": true, "temperature": 0.7, "top_p": 0.9, "top_k": 50,
                    "repetition_penalty": 1.1, "stop": ["\\n\\n"], "seed": 42, "return_full_text": false}}

Every problem becomes a RequestError carrying the HTTP status and a message that names the field:
400 the body is not a JSON object of this shape (not JSON, missing `inputs`, wrong types, unknown fields),
413 the request exceeds a configured limit (too many prompts, max_new_tokens above the cap, too many stop strings),
422 a value of the right type is outside its range (empty prompt, temperature <= 0, top_p outside (0, 1], ...).
Token-length limits need the tokenizer and are checked in lmi_generation (413 as well).

Stdlib only: no torch, no transformers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

BAD_REQUEST = 400
PAYLOAD_TOO_LARGE = 413
UNPROCESSABLE = 422

# LMI's documented default for max_new_tokens, capped by option.max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 30
MAX_STOP_SEQUENCES = 16
_MAX_SEED = 2**63 - 1

TOP_LEVEL_FIELDS = ("inputs", "parameters")
PARAMETERS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "do_sample",
    "repetition_penalty",
    "stop",
    "seed",
    "return_full_text",
    "details",  # accepted for LMI compatibility; details are always returned
)
_SAMPLING_PARAMETERS = ("temperature", "top_p", "top_k")


class RequestError(Exception):
    """A request the handler refuses; `status` is the HTTP code to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class RequestLimits:
    max_batch_size: int  # option.max_batch_size
    max_new_tokens: int  # option.max_new_tokens


@dataclass(frozen=True)
class GenerationParameters:
    max_new_tokens: int
    do_sample: bool = False
    # None: not given by the client, so the model's generation_config decides (as with model.generate).
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    return_full_text: bool = False


@dataclass(frozen=True)
class GenerationRequest:
    prompts: tuple[str, ...]
    parameters: GenerationParameters


def parse_request(body: bytes | str | None, limits: RequestLimits) -> GenerationRequest:
    """Turn a raw body into a validated request, or raise RequestError."""
    payload = _decode_json(body)
    unknown = sorted(set(payload) - set(TOP_LEVEL_FIELDS))
    if unknown:
        raise RequestError(
            BAD_REQUEST,
            f"unknown field(s) {', '.join(map(repr, unknown))} in the request; expected {', '.join(TOP_LEVEL_FIELDS)}",
        )
    prompts = _prompts(payload, limits)
    raw_parameters = payload.get("parameters", {})
    if raw_parameters is None:
        raw_parameters = {}
    if not isinstance(raw_parameters, dict):
        raise RequestError(BAD_REQUEST, f"parameters must be a JSON object; got {_json_type(raw_parameters)}")
    return GenerationRequest(prompts=prompts, parameters=_parameters(raw_parameters, limits))


def _decode_json(body: bytes | str | None) -> dict:
    example = 'send {"inputs": "your prompt", "parameters": {"max_new_tokens": 32}}'
    if body is None or len(body) == 0:
        raise RequestError(BAD_REQUEST, f"request body is empty; {example}")
    try:
        text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body
        payload = json.loads(text)
    except UnicodeDecodeError as error:
        raise RequestError(BAD_REQUEST, f"request body is not UTF-8 text ({error}); {example}") from None
    except json.JSONDecodeError as error:
        raise RequestError(BAD_REQUEST, f"request body is not valid JSON ({error}); {example}") from None
    if not isinstance(payload, dict):
        raise RequestError(BAD_REQUEST, f"request body must be a JSON object, got {_json_type(payload)}; {example}")
    return payload


def _prompts(payload: dict, limits: RequestLimits) -> tuple[str, ...]:
    if "inputs" not in payload:
        raise RequestError(BAD_REQUEST, 'field "inputs" is missing; expected a prompt string or a list of them')
    inputs = payload["inputs"]
    if isinstance(inputs, str):
        prompts = [inputs]
    elif isinstance(inputs, list):
        prompts = inputs
        if not prompts:
            raise RequestError(UNPROCESSABLE, "inputs is an empty list; expected at least one prompt")
        for index, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise RequestError(BAD_REQUEST, f"inputs[{index}] must be a string; got {_json_type(prompt)}")
    else:
        raise RequestError(BAD_REQUEST, f"inputs must be a string or a list of strings; got {_json_type(inputs)}")
    if len(prompts) > limits.max_batch_size:
        raise RequestError(
            PAYLOAD_TOO_LARGE,
            f"inputs has {len(prompts)} prompts; this endpoint accepts at most {limits.max_batch_size} per request "
            "(option.max_batch_size): split the list across requests",
        )
    for index, prompt in enumerate(prompts):
        if prompt == "":
            name = "inputs" if isinstance(inputs, str) else f"inputs[{index}]"
            raise RequestError(UNPROCESSABLE, f"{name} is an empty string; expected a non-empty prompt")
    return tuple(prompts)


def _parameters(raw: dict, limits: RequestLimits) -> GenerationParameters:
    unknown = sorted(set(raw) - set(PARAMETERS))
    if unknown:
        raise RequestError(
            BAD_REQUEST,
            f"unknown parameter(s) {', '.join(map(repr, unknown))}; expected any of {', '.join(PARAMETERS)}",
        )
    max_new_tokens = _integer(raw, "max_new_tokens", minimum=1)
    if max_new_tokens is None:
        max_new_tokens = min(DEFAULT_MAX_NEW_TOKENS, limits.max_new_tokens)
    elif max_new_tokens > limits.max_new_tokens:
        raise RequestError(
            PAYLOAD_TOO_LARGE,
            f"parameters.max_new_tokens={max_new_tokens} is above this endpoint's cap of {limits.max_new_tokens} "
            "(option.max_new_tokens)",
        )
    temperature = _number(raw, "temperature", "> 0", lambda value: value > 0)
    top_p = _number(raw, "top_p", "in (0, 1]", lambda value: 0 < value <= 1)
    top_k = _integer(raw, "top_k", minimum=0)
    repetition_penalty = _number(raw, "repetition_penalty", "> 0", lambda value: value > 0)
    do_sample = _boolean(raw, "do_sample")
    if do_sample is None:
        # As in TGI and LMI >= 0.32: asking for a sampling knob means sampling.
        do_sample = any(raw.get(name) is not None for name in _SAMPLING_PARAMETERS)
    _boolean(raw, "details")
    return GenerationParameters(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        repetition_penalty=repetition_penalty,
        stop=_stop(raw),
        seed=_seed(raw),
        return_full_text=bool(_boolean(raw, "return_full_text")),
    )


def _integer(raw: dict, name: str, *, minimum: int) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(BAD_REQUEST, f"parameters.{name} must be an integer; got {_json_type(value)} {value!r}")
    if value < minimum:
        raise RequestError(UNPROCESSABLE, f"parameters.{name}={value} is out of range; expected >= {minimum}")
    return value


def _number(raw: dict, name: str, expected: str, valid) -> float | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(BAD_REQUEST, f"parameters.{name} must be a number; got {_json_type(value)} {value!r}")
    if not math.isfinite(value) or not valid(value):
        raise RequestError(UNPROCESSABLE, f"parameters.{name}={value} is out of range; expected a number {expected}")
    return float(value)


def _boolean(raw: dict, name: str) -> bool | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise RequestError(BAD_REQUEST, f"parameters.{name} must be true or false; got {_json_type(value)} {value!r}")
    return value


def _stop(raw: dict) -> tuple[str, ...]:
    value = raw.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
        raise RequestError(
            BAD_REQUEST, f"parameters.stop must be a string or a list of strings; got {_json_type(value)} {value!r}"
        )
    if len(stops) > MAX_STOP_SEQUENCES:
        raise RequestError(
            PAYLOAD_TOO_LARGE, f"parameters.stop has {len(stops)} strings; at most {MAX_STOP_SEQUENCES} are accepted"
        )
    if any(stop == "" for stop in stops):
        raise RequestError(UNPROCESSABLE, "parameters.stop contains an empty string; every stop string needs text")
    return tuple(stops)


def _seed(raw: dict) -> int | None:
    value = raw.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(BAD_REQUEST, f"parameters.seed must be an integer; got {_json_type(value)} {value!r}")
    if not 0 <= value <= _MAX_SEED:
        raise RequestError(UNPROCESSABLE, f"parameters.seed={value} is out of range; expected 0 <= seed < 2**63")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
