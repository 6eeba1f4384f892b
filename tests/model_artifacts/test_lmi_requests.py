"""parse_request: the request contract, its defaults, and the status + message of every way a request is bad."""

from __future__ import annotations

import json

import pytest
from lmi_requests import GenerationParameters, RequestError, RequestLimits, parse_request

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
    ({"inputs": "hi", "parameters": {"stop": ["x"] * 17}}, 413, "parameters.stop has 17 strings; at most 16"),
    ({"inputs": ""}, 422, "inputs is an empty string"),
    ({"inputs": ["fine", ""]}, 422, "inputs[1] is an empty string"),
    ({"inputs": []}, 422, "inputs is an empty list"),
    ({"inputs": "hi", "parameters": {"max_new_tokens": 0}}, 422, "parameters.max_new_tokens=0 is out of range"),
    ({"inputs": "hi", "parameters": {"temperature": 0}}, 422, "parameters.temperature=0 is out of range"),
    ('{"inputs": "hi", "parameters": {"temperature": Infinity}}', 422, "parameters.temperature=inf is out of range"),
    ({"inputs": "hi", "parameters": {"top_p": 1.5}}, 422, "parameters.top_p=1.5 is out of range; expected a number in"),
    ({"inputs": "hi", "parameters": {"top_k": -1}}, 422, "parameters.top_k=-1 is out of range; expected >= 0"),
    ({"inputs": "hi", "parameters": {"repetition_penalty": 0}}, 422, "parameters.repetition_penalty=0"),
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
            "seed": 7,
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
        repetition_penalty=1.1,
        stop=("\n",),
        seed=7,
        return_full_text=True,
    )


@pytest.mark.parametrize(
    ("parameters", "do_sample"),
    [
        ({}, False),
        ({"temperature": 0.5}, True),
        ({"top_k": 5}, True),
        ({"top_p": 0.5, "do_sample": False}, False),
        ({"do_sample": True}, True),
        ({"repetition_penalty": 1.2}, False),
    ],
)
def test_sampling_knobs_imply_sampling_unless_do_sample_says_otherwise(parameters, do_sample):
    request = parse_request(_body({"inputs": "x", "parameters": parameters}), LIMITS)
    assert request.parameters.do_sample is do_sample


def test_null_parameters_mean_defaults():
    assert parse_request(b'{"inputs": "x", "parameters": null}', LIMITS).parameters.max_new_tokens == 30
