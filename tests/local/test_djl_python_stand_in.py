"""local/djl_python behaves like the container's djl_python for everything model.py and local.serve use."""

from __future__ import annotations

import json

import pytest

from local.serve import _djl_python

djl_python = _djl_python()


def _input(body: bytes, **properties: str):
    request = djl_python.Input()
    request.properties = dict(properties)
    request.content.add(key="data", value=body)
    return request


def test_input_properties_are_looked_up_case_insensitively_like_http_headers():
    request = _input(b"{}", **{"Content-Type": "application/json", "model_dir": "/opt/ml/model"})
    assert request.get_property("content-type") == "application/json"
    assert request.get_property("CONTENT-TYPE") == "application/json"
    assert request.get_property("missing") is None
    assert request.get_properties()["model_dir"] == "/opt/ml/model"


def test_input_content_reads_as_bytes_string_json_or_by_content_type():
    request = _input(b'{"inputs": "hi"}', **{"Content-Type": "application/json; charset=utf-8"})
    assert request.get_as_bytes() == b'{"inputs": "hi"}'
    assert request.get_as_string() == '{"inputs": "hi"}'
    assert request.get_as_json() == {"inputs": "hi"}
    assert request.get_data() == {"inputs": "hi"}
    assert _input(b"plain", **{"content-type": "text/plain"}).get_data() == "plain"
    assert request.contains_key("data") and not request.contains_key("other")
    with pytest.raises(KeyError, match="requested data for key:other is not found"):
        request.get_as_bytes(key="other")


def test_without_a_data_key_the_first_content_value_is_read():
    request = djl_python.Input()
    request.content.add(key="payload", value=b"first")
    request.content.add(key="second", value=b"second")
    assert request.get_as_bytes() == b"first"


def test_an_empty_body_makes_an_empty_input_like_djls_start_up_call():
    assert _input(b"").is_empty()
    assert djl_python.Input().is_empty()
    assert djl_python.Input().get_as_bytes() is None
    assert not _input(b"x").is_empty()
    assert not djl_python.Input().is_batch() and djl_python.Input().get_batch_size() == 1


def test_output_error_has_djls_json_body_and_code():
    output = djl_python.Output().error("inputs is missing", code=400, message="Bad Request")
    assert (output.code, output.message) == (400, "Bad Request")
    assert output.properties == {"content-type": "application/json"}
    body = json.loads(bytes(output.content.value_at(0)))
    assert body == {"code": 400, "message": "Bad Request", "error": "inputs is missing"}
    default = djl_python.Output().error("boom")
    assert (default.code, default.message) == (424, "prediction failure")


def test_output_setters_chain_and_values_become_bytes():
    output = djl_python.Output().set_code(201).set_message("Created").add_property("x-id", "1").add("text")
    assert (output.code, output.message, output.get_property("x-id")) == (201, "Created", "1")
    assert output.content.value_at(0) == b"text"
    output.add({"a": [1, 2]}, key="json")
    assert json.loads(bytes(output.content.get("json"))) == {"a": [1, 2]}
    output.add(b"raw")
    assert isinstance(output.content.value_at(2), bytearray)
    assert (djl_python.Output().code, djl_python.Output().message) == (200, "OK")


def test_pair_list_keeps_order_and_checks_sizes():
    pairs = djl_python.PairList(keys=["a", "b"], values=[1, 2])
    assert (pairs.size(), pairs.get_keys(), pairs.get_values(), pairs.key_at(1), pairs.value_at(0)) == (
        2,
        ["a", "b"],
        [1, 2],
        "b",
        1,
    )
    assert pairs.get("missing") is None
    with pytest.raises(ValueError, match="key value size mismatch"):
        djl_python.PairList(keys=["a"], values=[])
