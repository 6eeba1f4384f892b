"""parse_request: the request contract, its defaults, and the status + message of every way a request is bad."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from lmi_requests import GenerationParameters, RequestError, RequestLimits, parse_request
from request_schema import PARAMETER_NAMES, PARAMETERS, ROWS, Parameter, example_request

LIMITS = RequestLimits(max_batch_size=3, max_new_tokens=64)

# (body, status, fragment of the message): every entry names the field that is wrong.
BAD_REQUESTS = [
    (b"", 400, "request body is empty"),
    (b"inputs=hello", 400, "request body is not valid JSON"),
    (b"\xff\xfe", 400, "request body is not UTF-8 text"),
    ('["a", "b"]', 400, "request body must be a JSON object, got a list"),
    ({"prompt": "hi"}, 400, "unknown field(s) 'prompt' in the request; expected inputs, parameters"),
    ({"parameters": {}}, 400, 'field "inputs" is missing'),
    ({"inputs": 42}, 400, "inputs must be a string or a list of strings; got a number"),
    ({"inputs": ["ok", None]}, 400, "inputs[1] must be a string; got null"),
    ({"inputs": "hi", "parameters": [1]}, 400, "parameters must be a JSON object; got a list"),
    ({"inputs": "hi", "parameters": {"max_tokens": 5}}, 400, "unknown parameter(s) 'max_tokens'"),
    ({"inputs": "hi", "parameters": {"max_new_tokens": "5"}}, 400, "parameters.max_new_tokens must be an integer"),
    ({"inputs": "hi", "parameters": {"max_new_tokens": 5.0}}, 400, "parameters.max_new_tokens must be an integer"),
    ({"inputs": "hi", "parameters": {"do_sample": "yes"}}, 400, "parameters.do_sample must be true or false"),
    ({"inputs": "hi", "parameters": {"temperature": True}}, 400, "parameters.temperature must be a number"),
    ({"inputs": "hi", "parameters": {"stop": [1]}}, 400, "parameters.stop must be a string or a list of strings"),
    ({"inputs": "hi", "parameters": {"seed": 1.5}}, 400, "parameters.seed must be an integer"),
    ({"inputs": "hi", "parameters": {"return_full_text": 1}}, 400, "parameters.return_full_text must be true"),
    ({"inputs": ["a", "b", "c", "d"]}, 413, "inputs has 4 prompts; this endpoint accepts at most 3"),
    ({"inputs": "hi", "parameters": {"max_new_tokens": 65}}, 413, "max_new_tokens=65 is above this endpoint's cap"),
    ({"inputs": "hi", "parameters": {"stop": ["x"] * 17}}, 413, "stop and stop_sequences have 17 strings; at most 16"),
    ({"inputs": ""}, 422, "inputs is an empty string"),
    ({"inputs": ["fine", ""]}, 422, "inputs[1] is an empty string"),
    ({"inputs": []}, 422, "inputs is an empty list"),
    ({"inputs": "hi", "parameters": {"max_new_tokens": 0}}, 422, "parameters.max_new_tokens=0 is out of range"),
    ({"inputs": "hi", "parameters": {"temperature": 0}}, 422, "parameters.temperature=0 is out of range"),
    ('{"inputs": "hi", "parameters": {"temperature": Infinity}}', 422, "parameters.temperature=inf is out of range"),
    ({"inputs": "hi", "parameters": {"top_p": 1.5}}, 422, "parameters.top_p=1.5 is out of range; expected a number in"),
    ({"inputs": "hi", "parameters": {"top_k": -1}}, 422, "parameters.top_k=-1 is out of range; expected >= 0"),
    ({"inputs": "hi", "parameters": {"repetition_penalty": 0}}, 422, "parameters.repetition_penalty=0"),
    ({"inputs": "hi", "parameters": {"repetition_penalty": 1e-300}}, 422, "repetition_penalty=1e-300 is out of range"),
    ({"inputs": "hi", "parameters": {"repetition_penalty": 101}}, 422, "expected a number in [0.01, 100]"),
    (
        {"inputs": "hi", "parameters": {"typical_p": 0}},
        422,
        "parameters.typical_p=0 is out of range; expected a number in",
    ),
    ({"inputs": "hi", "parameters": {"typical_p": 1.01}}, 422, "parameters.typical_p=1.01 is out of range"),
    ({"inputs": "hi", "parameters": {"typical_p": "0.9"}}, 400, "parameters.typical_p must be a number"),
    ({"inputs": "hi", "parameters": {"truncate": 0}}, 422, "parameters.truncate=0 is out of range; expected >= 1"),
    ({"inputs": "hi", "parameters": {"truncate": 2.5}}, 400, "parameters.truncate must be an integer"),
    (
        {"inputs": "hi", "parameters": {"stop_sequences": [3]}},
        400,
        "parameters.stop_sequences must be a string or a list",
    ),
    (
        {"inputs": "hi", "parameters": {"stop_sequences": [""]}},
        422,
        "parameters.stop_sequences contains an empty string",
    ),
    (
        {"inputs": "hi", "parameters": {"stop": ["a"] * 9 + [str(i) for i in range(8)], "stop_sequences": ["b"]}},
        413,
        "stop and stop_sequences have 18 strings",
    ),
    ({"inputs": "hi", "parameters": {"details": "yes"}}, 400, "parameters.details must be true or false"),
    ({"inputs": "hi", "parameters": {"stop": ["end", ""]}}, 422, "parameters.stop contains an empty string"),
    ({"inputs": "hi", "parameters": {"seed": -1}}, 422, "parameters.seed=-1 is out of range"),
]


def _body(payload) -> bytes:
    if isinstance(payload, bytes):
        return payload
    return (payload if isinstance(payload, str) else json.dumps(payload)).encode()


@pytest.mark.parametrize(("payload", "status", "message"), BAD_REQUESTS)
def test_bad_request_gets_its_status_and_a_message_naming_the_field(payload, status, message):
    with pytest.raises(RequestError) as error:
        parse_request(_body(payload), LIMITS)
    assert error.value.status == status
    assert message in error.value.message


def test_a_single_prompt_with_defaults_is_greedy_with_30_new_tokens():
    request = parse_request(b'{"inputs": "the model"}', LIMITS)
    assert request.prompts == ("the model",)
    assert request.parameters == GenerationParameters(max_new_tokens=30, do_sample=False)
    assert request.single  # answered with one object, as LMI and the vLLM variant answer a string prompt
    assert not parse_request(b'{"inputs": ["the model"]}', LIMITS).single


def test_temperatures_below_a_hundredth_are_raised_to_it_as_vllm_does():
    for given, used in ((1e-300, 0.01), (0.005, 0.01), (0.01, 0.01), (0.7, 0.7)):
        request = parse_request(_body({"inputs": "x", "parameters": {"temperature": given}}), LIMITS)
        assert request.parameters.temperature == used


def test_default_max_new_tokens_never_exceeds_the_cap():
    request = parse_request(b'{"inputs": "x"}', RequestLimits(max_batch_size=1, max_new_tokens=8))
    assert request.parameters.max_new_tokens == 8


def test_every_parameter_is_parsed():
    payload = {
        "inputs": ["a", "b"],
        "parameters": {
            "max_new_tokens": 12,
            "do_sample": True,
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 40,
            "repetition_penalty": 1.1,
            "stop": "\n",
            "stop_sequences": ["\n", "END"],
            "typical_p": 0.95,
            "seed": 7,
            "truncate": 100,
            "return_full_text": True,
            "details": True,
        },
    }
    request = parse_request(_body(payload), LIMITS)
    assert request.prompts == ("a", "b")
    assert request.parameters == GenerationParameters(
        max_new_tokens=12,
        do_sample=True,
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        typical_p=0.95,
        repetition_penalty=1.1,
        stop=("\n", "END"),  # stop and LMI's stop_sequences merged, each string once
        seed=7,
        truncate=100,
        return_full_text=True,
        details=True,
    )
    assert not request.single


@pytest.mark.parametrize(
    ("parameters", "do_sample"),
    [
        ({}, False),
        ({"temperature": 0.5}, True),
        ({"top_k": 5}, True),
        ({"top_p": 0.5, "do_sample": False}, False),
        ({"do_sample": True}, True),
        ({"repetition_penalty": 1.2}, False),
        ({"typical_p": 0.9}, True),
    ],
)
def test_sampling_knobs_imply_sampling_unless_do_sample_says_otherwise(parameters, do_sample):
    request = parse_request(_body({"inputs": "x", "parameters": parameters}), LIMITS)
    assert request.parameters.do_sample is do_sample


def test_null_parameters_mean_defaults():
    assert parse_request(b'{"inputs": "x", "parameters": null}', LIMITS).parameters.max_new_tokens == 30


# Bodies a hostile or broken client can send. Each is the client's error (4xx, never 500), with a message that says
# what is wrong and stays short whatever the body holds.
HOSTILE_BODIES = [
    ('{"inputs": "a", "parameters": {"max_new_tokens": ' + "9" * 5000 + "}}", 400, "an integer of 5000 digits"),
    ('{"inputs": "a", "parameters": {"seed": -' + "1" * 21 + "}}", 400, "an integer of 21 digits"),
    ('{"inputs": "a", "parameters": {"top_k": ' + "7" * 30 + "}}", 400, "integers in this API fit in 64 bits"),
    ('{"inputs": ' + "[" * 100_000 + "]" * 100_000 + "}", 400, "nests lists or objects too deeply to parse"),
    ('{"inputs": "\\ud800"}', 400, "inputs is not valid Unicode: it has a lone surrogate \\ud800 at character 0"),
    ('{"inputs": ["fine", "a\\udfffb"]}', 400, "inputs[1] is not valid Unicode: it has a lone surrogate \\udfff"),
    ('{"inputs": "a", "parameters": {"stop": ["\\ud83d"]}}', 400, "parameters.stop[0] is not valid Unicode"),
    ('{"inputs": "a", "\\udc00": 1}', 400, "a key in the body is not valid Unicode"),
    ('{"inputs": "a", "inputs": "b"}', 400, "the key 'inputs' twice in one object"),
    ('{"inputs": "a", "parameters": {"seed": 1, "seed": 2}}', 400, "the key 'seed' twice in one object"),
    ('{"inputs": "a", "parameters": {"temperature": NaN}}', 422, "parameters.temperature=nan is out of range"),
    ('{"inputs": "a", "parameters": {"top_p": -Infinity}}', 422, "parameters.top_p=-inf is out of range"),
    ('{"inputs": "a", "parameters": {"max_new_tokens": NaN}}', 400, "parameters.max_new_tokens must be an integer"),
    ('{"inputs": "a", "parameters": {"temperature": 1e999}}', 422, "parameters.temperature=inf is out of range"),
    ('{"inputs": NaN}', 400, "inputs must be a string or a list of strings; got a number"),
    ('{"inputs": "a\u0001b"}', 400, "request body is not valid JSON (Invalid control character"),
    ('{"inputs": 12345}', 400, "inputs must be a string or a list of strings; got a number"),
    ('{"inputs": "a", "parameters": {"stop": ' + "[" * 900 + "]" * 900 + "}}", 400, "parameters.stop must be a string"),
    ('{"inputs": "a", "parameters": {"stop": [' + ",".join(["1"] * 100_000) + "]}}", 400, "got a list [1, 1, 1"),
    ('{"inputs": "a", "parameters": {"seed": "' + "x" * 1_000_000 + '"}}', 400, "parameters.seed must be an integer"),
    ('{"inputs": "a", "' + "k" * 100_000 + '": 1}', 400, "unknown field(s) 'kkkk"),
]


@pytest.mark.bad_input("request")
@pytest.mark.parametrize(("payload", "status", "message"), HOSTILE_BODIES, ids=lambda value: str(value)[:40])
def test_a_hostile_body_is_the_clients_error_with_a_short_message(payload, status, message):
    with pytest.raises(RequestError) as error:
        parse_request(_body(payload), LIMITS)
    assert (error.value.status, message in error.value.message) == (status, True), error.value.message
    assert len(error.value.message) < 400


def test_a_surrogate_pair_is_one_valid_character():
    assert parse_request(b'{"inputs": "smile \\ud83d\\ude00"}', LIMITS).prompts == ("smile \U0001f600",)


# The top-level `stream` flag and the chat schema, which this handler does not serve (LMI 0.27.0's own DeepSpeed
# handler refused `messages` under DJL's dynamic batching).
STREAM_AND_CHAT_REQUESTS = [
    ({"inputs": "hi", "stream": "yes"}, 400, "stream must be true or false; got a string 'yes'"),
    ({"inputs": "hi", "stream": 1}, 400, "stream must be true or false; got a number 1"),
    ({"inputs": ["a", "b"], "stream": True}, 422, "stream is true but inputs is a list of 2 prompts"),
    (
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        400,
        "this endpoint does not take the chat schema ('messages'); it serves LMI 0.27.0's text-generation schema: "
        'send {"inputs": "your prompt"',
    ),
    ({"messages": "hi", "stream": True}, 400, "does not take the chat schema"),
    ({"inputs": "hi", "messages": []}, 400, "unknown field(s) 'messages' in the request"),
]


@pytest.mark.bad_input("request")
@pytest.mark.parametrize(("payload", "status", "message"), STREAM_AND_CHAT_REQUESTS, ids=lambda v: str(v)[:40])
def test_a_bad_stream_flag_or_a_chat_request_is_the_clients_error(payload, status, message):
    with pytest.raises(RequestError) as error:
        parse_request(_body(payload), LIMITS)
    assert (error.value.status, message in error.value.message) == (status, True), error.value.message


def test_stream_is_a_top_level_flag_for_one_prompt():
    assert parse_request(b'{"inputs": "x", "stream": true}', LIMITS).stream
    assert not parse_request(b'{"inputs": "x", "stream": false}', LIMITS).stream
    assert not parse_request(b'{"inputs": ["x"], "stream": null}', LIMITS).stream
    assert not parse_request(b'{"inputs": "x"}', LIMITS).stream


# --- at each limit: accepted. The 413 cases above are one past it; these catch a `>` turned `>=`. ------------------


def test_exactly_max_batch_size_prompts_are_accepted():
    request = parse_request(_body({"inputs": ["one", "two", "three"]}), LIMITS)
    assert request.prompts == ("one", "two", "three")


def test_max_new_tokens_equal_to_the_cap_is_accepted():
    request = parse_request(_body({"inputs": "hi", "parameters": {"max_new_tokens": 64}}), LIMITS)
    assert request.parameters.max_new_tokens == 64


SIXTEEN_STOPS = [f"stop {n}" for n in range(16)]


@pytest.mark.parametrize(
    "parameters",
    [
        {"stop": SIXTEEN_STOPS},
        {"stop_sequences": SIXTEEN_STOPS},
        # The limit counts both fields together.
        {"stop": SIXTEEN_STOPS[:9], "stop_sequences": SIXTEEN_STOPS[9:]},
    ],
)
def test_exactly_16_stop_strings_are_accepted(parameters):
    request = parse_request(_body({"inputs": "hi", "parameters": parameters}), LIMITS)
    assert request.parameters.stop == tuple(SIXTEEN_STOPS)


# --- every row of request_schema.PARAMETERS, parsed as the row declares it (generated from the table itself) --------

ROOMY = RequestLimits(max_batch_size=3, max_new_tokens=2**31)  # no cap in the way of a row's own range
BOUNDED = [row for row in PARAMETERS if row.minimum is not None or row.maximum is not None]


def _parameters(parameters: dict) -> GenerationParameters:
    return parse_request(json.dumps({"inputs": "hi", "parameters": parameters}), ROOMY).parameters


def _refusal(parameters: dict) -> RequestError:
    with pytest.raises(RequestError) as error:
        parse_request(json.dumps({"inputs": "hi", "parameters": parameters}), ROOMY)
    return error.value


def _step(row: Parameter, bound: float, direction: float) -> float:
    """The next value from `bound` towards `direction`: the nearest integer, or the nearest float."""
    if row.kind == "integer":
        return bound + (1 if direction > 0 else -1)
    return math.nextafter(bound, direction)


def _edges(row: Parameter) -> list[tuple[float, bool]]:
    """(value, accepted) at each end of the row's range: the last value in, the first value out."""
    edges = []
    if row.minimum is not None:
        inside = _step(row, row.minimum, math.inf) if row.exclusive_minimum else row.minimum
        outside = row.minimum if row.exclusive_minimum else _step(row, row.minimum, -math.inf)
        edges += [(inside, True), (outside, False)]
    if row.maximum is not None:
        inside = _step(row, row.maximum, -math.inf) if row.exclusive_maximum else row.maximum
        outside = row.maximum if row.exclusive_maximum else _step(row, row.maximum, math.inf)
        edges += [(inside, True), (outside, False)]
    return edges


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [(row.name, value, accepted) for row in BOUNDED for value, accepted in _edges(row)],
)
def test_each_declared_range_is_the_range_the_handler_checks(name, value, accepted):
    row = ROWS[name]
    if accepted:
        _parameters({name: value})
        return
    error = _refusal({name: value})
    assert (error.status, error.message) == (
        row.out_of_range_status,
        f"parameters.{name}={value} is out of range; expected {row.expected()}",
    )


@pytest.mark.parametrize("row", PARAMETERS, ids=PARAMETER_NAMES)
def test_each_declared_type_is_the_type_the_handler_takes(row):
    wrong = {"integer": "1", "number": "1", "boolean": 1, "strings": 1}[row.kind]
    error = _refusal({row.name: wrong})
    assert error.status == 400
    assert error.message.startswith(f"parameters.{row.name} must be ")


def test_the_declared_parameters_are_the_ones_the_handler_knows():
    declared = set(PARAMETER_NAMES) - {"stop_sequences"}  # merged into `stop`
    assert declared == {field.name for field in dataclasses.fields(GenerationParameters)}
    assert _refusal({"nope": 1}).message.endswith(f"expected any of {', '.join(PARAMETER_NAMES)}")


def test_the_declared_example_request_is_parsed_as_given():
    request = parse_request(json.dumps(example_request()), ROOMY)
    for name, value in example_request()["parameters"].items():
        assert getattr(request.parameters, name) == (tuple(value) if isinstance(value, list) else value), name


@pytest.mark.parametrize("row", BOUNDED, ids=[row.name for row in BOUNDED])
def test_a_declared_sampling_parameter_turns_sampling_on_and_no_other_does(row):
    lowest = next(value for value, accepted in _edges(row) if accepted)
    assert _parameters({row.name: lowest}).do_sample is row.sampling


@pytest.mark.parametrize("row", [row for row in PARAMETERS if row.default is not None], ids=lambda row: row.name)
def test_a_declared_default_is_the_handler_s_default(row):
    assert getattr(_parameters({}), row.name) == row.default
