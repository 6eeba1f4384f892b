"""Parse and validate one invocation body: LMI 0.27.0's text-generation request (its "Dynamic Batch/Static Batch"
schema, serving/docs/lmi/user_guides/lmi_input_output_schema.md, with the DeepSpeed parameters).

    {"inputs": "prompt" | ["prompt", ...], "parameters": {...}, "stream": false}

What `parameters` takes (each field's type, range, default and doc) is declared once, in request_schema.PARAMETERS;
this module parses by those rows, so a simple numeric or boolean parameter is a row there, not code here.

`stream` (top level, as in LMI's rolling-batch handlers and its vLLM handler) asks for the answer as JSON lines,
one per generated token (lmi_streaming.py); it takes one prompt string. The OpenAI chat schema (`messages`) is
refused with a 400 that says to send `inputs`: LMI 0.27.0's own DeepSpeed handler took `messages` only with rolling
batch and refused it under DJL's dynamic batching, which is how this handler batches
(djl_python/chat_completions/chat_utils.py at v0.27.0, parse_chat_completions_request).

Every problem becomes a RequestError carrying the HTTP status and a message that names the field:
400 the body is not a JSON object of this shape: not UTF-8 JSON, a duplicate key, an integer too long for 64 bits,
    nesting too deep to parse, a string that is not valid Unicode (a lone surrogate escape such as "\\ud800"),
    missing `inputs`, wrong types, unknown fields;
413 the request exceeds a configured limit: too many prompts, or a parameter above the cap its row names;
422 a value of the right type is outside its range: an empty prompt, or a parameter outside its row's range.
Token-length limits need the tokenizer and are checked in lmi_generation (413 as well; 422 if the tokenizer cannot
encode a prompt). Values the client echoes back in messages are shortened (reprlib), so a hostile value cannot
make the error itself fail or grow to megabytes.

Stdlib only: no torch, no transformers.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass
from typing import Any

# The statuses stay importable from here: lmi_generation takes them from this module.
from request_schema import (
    BAD_REQUEST,
    MAX_STOP_SEQUENCES,
    MIN_TEMPERATURE,
    PARAMETER_NAMES,
    PAYLOAD_TOO_LARGE,
    ROWS,
    SAMPLING_PARAMETERS,
    TOP_LEVEL_FIELDS,
    UNPROCESSABLE,
    Parameter,
)

# The longest integer this API can use is a 64-bit seed (19 digits). Longer literals are refused while parsing:
# converting them is quadratic, and above 4300 digits Python refuses with a ValueError of its own.
_MAX_INTEGER_DIGITS = 20

# Fields of other request schemas that mean the client expects another endpoint; each gets its own answer.
CHAT_FIELDS = ("messages",)

_shown = reprlib.Repr()
_shown.maxstring, _shown.maxother, _shown.maxlist, _shown.maxdict, _shown.maxlevel = 80, 80, 6, 6, 3


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
    typical_p: float | None = None
    repetition_penalty: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    truncate: int | None = None  # keep only the last `truncate` tokens of each prompt (TGI's and LMI's meaning)
    return_full_text: bool = False
    details: bool = False


@dataclass(frozen=True)
class GenerationRequest:
    prompts: tuple[str, ...]
    parameters: GenerationParameters
    # `inputs` was one string: the answer is one object, not a list (LMI's and vLLM's shape).
    single: bool = False
    # Answer as JSON lines, token by token (only for a single prompt string).
    stream: bool = False


def parse_request(body: bytes | str | None, limits: RequestLimits) -> GenerationRequest:
    """Turn a raw body into a validated request, or raise RequestError."""
    payload = _decode_json(body)
    chat = [name for name in CHAT_FIELDS if name in payload]
    if chat and "inputs" not in payload:
        raise RequestError(
            BAD_REQUEST,
            f"this endpoint does not take the chat schema ({_names(chat)}); it serves LMI 0.27.0's text-generation "
            'schema: send {"inputs": "your prompt", "parameters": {...}}, with the chat turns rendered into the '
            "prompt (the vLLM engine takes messages)",
        )
    unknown = sorted(set(payload) - set(TOP_LEVEL_FIELDS))
    if unknown:
        raise RequestError(
            BAD_REQUEST,
            f"unknown field(s) {_names(unknown)} in the request; expected {', '.join(TOP_LEVEL_FIELDS)}",
        )
    prompts = _prompts(payload, limits)
    raw_parameters = payload.get("parameters", {})
    if raw_parameters is None:
        raw_parameters = {}
    if not isinstance(raw_parameters, dict):
        raise RequestError(BAD_REQUEST, f"parameters must be a JSON object; got {_json_type(raw_parameters)}")
    single = isinstance(payload["inputs"], str)
    stream = _boolean(payload, "stream", where="stream")
    if stream and not single:
        raise RequestError(
            UNPROCESSABLE,
            f"stream is true but inputs is a list of {len(prompts)} prompts; a stream answers one prompt string: "
            "send one request per prompt",
        )
    return GenerationRequest(
        prompts=prompts, parameters=_parameters(raw_parameters, limits), single=single, stream=bool(stream)
    )


class _DuplicateKey(Exception):
    pass


class _IntegerTooLong(Exception):
    pass


def _unique_keys(pairs: list) -> dict:
    # json.loads keeps the last of two equal keys; a proxy or WAF that read the first would have checked another
    # request than the one served.
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _integer_literal(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INTEGER_DIGITS:
        raise _IntegerTooLong(text)
    return int(text)


def _decode_json(body: bytes | str | None) -> dict:
    example = 'send {"inputs": "your prompt", "parameters": {"max_new_tokens": 32}}'
    if body is None or len(body) == 0:
        raise RequestError(BAD_REQUEST, f"request body is empty; {example}")
    try:
        text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body
        payload = json.loads(text, object_pairs_hook=_unique_keys, parse_int=_integer_literal)
    except UnicodeDecodeError as error:
        raise RequestError(BAD_REQUEST, f"request body is not UTF-8 text ({error}); {example}") from None
    except json.JSONDecodeError as error:
        raise RequestError(BAD_REQUEST, f"request body is not valid JSON ({error}); {example}") from None
    except _DuplicateKey as error:
        raise RequestError(
            BAD_REQUEST, f"request body has the key {_shown.repr(error.args[0])} twice in one object; send each once"
        ) from None
    except _IntegerTooLong as error:
        raise RequestError(
            BAD_REQUEST,
            f"request body has an integer of {len(error.args[0].lstrip('-'))} digits; integers in this API fit in "
            "64 bits (seed < 2**63)",
        ) from None
    except RecursionError:
        raise RequestError(BAD_REQUEST, f"request body nests lists or objects too deeply to parse; {example}") from None
    except ValueError as error:  # anything else the parser refuses is still the body's fault
        raise RequestError(BAD_REQUEST, f"request body cannot be parsed ({error}); {example}") from None
    if not isinstance(payload, dict):
        raise RequestError(BAD_REQUEST, f"request body must be a JSON object, got {_json_type(payload)}; {example}")
    _check_unicode(payload)
    return payload


def _check_unicode(payload: dict) -> None:
    """Refuse strings that are not valid Unicode: JSON's "\\ud800" escape decodes to a lone surrogate, which no
    tokenizer accepts and no UTF-8 answer can carry. Iterative, so that nesting cannot exhaust the stack."""
    pending: list[tuple[str, Any]] = [("", payload)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                _check_string(key, f"a key in {path or 'the body'}")
                pending.append((f"{path}.{key}" if path else key, item))
        elif isinstance(value, list):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
        elif isinstance(value, str):
            _check_string(value, path)


def _check_string(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        character = text[error.start]
        raise RequestError(
            BAD_REQUEST,
            f"{_shown.repr(where)[1:-1]} is not valid Unicode: it has a lone surrogate \\u{ord(character):04x} at "
            f"character {error.start}; escape a character outside the BMP as a surrogate pair (\\ud83d\\ude00) "
            "or send it as UTF-8",
        ) from None


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
    unknown = sorted(set(raw) - set(PARAMETER_NAMES))
    if unknown:
        raise RequestError(
            BAD_REQUEST, f"unknown parameter(s) {_names(unknown)}; expected any of {', '.join(PARAMETER_NAMES)}"
        )
    # One at a time, in the table's order: the first bad parameter is the one the answer names.
    values = {name: _PARSERS.get(name, _as_declared)(ROWS[name], raw, limits) for name in PARAMETER_NAMES}
    values["stop"] = tuple(dict.fromkeys(values.pop("stop_sequences")))  # both names merged, each string once
    return GenerationParameters(**values)


def _as_declared(row: Parameter, raw: dict, limits: RequestLimits) -> Any:
    """A parameter its row says everything about: its type, its range, its default."""
    value = _READERS[row.kind](raw, row)
    return row.default if value is None else value


def _max_new_tokens(row: Parameter, raw: dict, limits: RequestLimits) -> int:
    value = _integer(raw, row)
    if value is None:
        return min(row.default, limits.max_new_tokens)
    if value > limits.max_new_tokens:
        raise RequestError(
            row.over_cap_status,
            f"parameters.max_new_tokens={value} is above this endpoint's cap of {limits.max_new_tokens} "
            "(option.max_new_tokens)",
        )
    return value


def _temperature(row: Parameter, raw: dict, limits: RequestLimits) -> float | None:
    value = _number(raw, row)
    return None if value is None else max(value, MIN_TEMPERATURE)


def _do_sample(row: Parameter, raw: dict, limits: RequestLimits) -> bool:
    value = _boolean(raw, row.name)
    if value is None:
        # As in TGI and LMI >= 0.32: asking for a sampling knob means sampling.
        return any(raw.get(name) is not None for name in SAMPLING_PARAMETERS)
    return value


def _stop_sequences(row: Parameter, raw: dict, limits: RequestLimits) -> tuple[str, ...]:
    """LMI's name for `stop`, read after it: the strings of both, in order, counted together against the cap."""
    stops = _strings(raw, ROWS["stop"]) + _strings(raw, row)
    if len(stops) > MAX_STOP_SEQUENCES:
        raise RequestError(
            row.over_cap_status,
            f"parameters.stop and stop_sequences have {len(stops)} strings; at most {MAX_STOP_SEQUENCES} are accepted",
        )
    return stops


def _integer(raw: dict, row: Parameter) -> int | None:
    value = raw.get(row.name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(
            BAD_REQUEST, f"parameters.{row.name} must be an integer; got {_json_type(value)} {_shown.repr(value)}"
        )
    if not row.accepts(value):
        raise RequestError(
            row.out_of_range_status, f"parameters.{row.name}={value} is out of range; expected {row.expected()}"
        )
    return value


def _number(raw: dict, row: Parameter) -> float | None:
    value = raw.get(row.name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(
            BAD_REQUEST, f"parameters.{row.name} must be a number; got {_json_type(value)} {_shown.repr(value)}"
        )
    if not row.accepts(value):
        raise RequestError(
            row.out_of_range_status, f"parameters.{row.name}={value} is out of range; expected {row.expected()}"
        )
    return float(value)


def _boolean(raw: dict, name: str, *, where: str | None = None) -> bool | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise RequestError(
            BAD_REQUEST,
            f"{where or 'parameters.' + name} must be true or false; got {_json_type(value)} {_shown.repr(value)}",
        )
    return value


def _strings(raw: dict, row: Parameter) -> tuple[str, ...]:
    """A stop parameter: a string or a list of non-empty strings."""
    value = raw.get(row.name)
    if value is None:
        return ()
    given = [value] if isinstance(value, str) else value
    if not isinstance(given, list) or not all(isinstance(stop, str) for stop in given):
        raise RequestError(
            BAD_REQUEST,
            f"parameters.{row.name} must be a string or a list of strings; got {_json_type(value)} "
            f"{_shown.repr(value)}",
        )
    if any(stop == "" for stop in given):
        raise RequestError(
            row.out_of_range_status, f"parameters.{row.name} contains an empty string; every stop string needs text"
        )
    return tuple(given)


def _declared_boolean(raw: dict, row: Parameter) -> bool | None:
    return _boolean(raw, row.name)


_READERS = {"integer": _integer, "number": _number, "boolean": _declared_boolean, "strings": _strings}
# The parameters their rows do not say everything about: a cap from the limits, a floor, a derived default, a merge.
_PARSERS = {
    "max_new_tokens": _max_new_tokens,
    "temperature": _temperature,
    "do_sample": _do_sample,
    "stop_sequences": _stop_sequences,
}


def _names(keys: list) -> str:
    shown = ", ".join(_shown.repr(key) for key in keys[:8])
    return shown + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


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
