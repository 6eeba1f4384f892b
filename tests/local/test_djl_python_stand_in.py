"""local/djl_python behaves like DJL Serving 0.27.0's djl_python (the LMI 0.27.0 image) for everything model.py and
local.serve use: engines/python/setup/djl_python/{inputs,outputs,pair_list}.py at v0.27.0."""

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


def test_only_djls_start_up_call_is_an_empty_input_an_empty_body_is_content():
    """PairList.add ignores only None: DJL's RequestParser always adds the body as "data", even b""."""
    assert djl_python.Input().is_empty()
    assert djl_python.Input().get_as_bytes() is None
    empty_body = _input(b"")
    assert not empty_body.is_empty() and empty_body.get_as_bytes() == b""
    assert not djl_python.Input().is_batch() and djl_python.Input().get_batch_size() == 1


def test_a_batch_splits_into_its_requests_as_djl_0_27_0_does():
    batch = djl_python.Input()
    batch.properties = {
        "batch_size": "2",
        "batch_000.Content-Type": "application/json",
        "batch_001.content-type": "text/plain",
        "batch_001.X-Amzn-SageMaker-Target-Model": "m",
        "model_dir": "/opt/ml/model",  # added by the engine: the batch's, not a request's
        "device_id": "0",
    }
    batch.content.add(key="batch_000.data", value=b'{"inputs": "a"}')
    batch.content.add(key="batch_001.seed", value=b"7")  # a query parameter comes before the body
    batch.content.add(key="batch_001.data", value=b"")
    assert batch.is_batch() and batch.get_batch_size() == 2
    first, second = batch.get_batches()
    assert first.properties == {"Content-Type": "application/json"}
    assert second.properties == {"content-type": "text/plain", "X-Amzn-SageMaker-Target-Model": "m"}
    assert first.get_as_json() == {"inputs": "a"}
    assert (second.get_as_bytes(), second.get_as_string(key="seed")) == (b"", "7")
    assert second.content.get_keys() == ["seed", "data"]
    single = _input(b"x")
    assert single.get_batches() == [single]


def test_output_error_has_djls_json_body_and_code():
    output = djl_python.Output().error("inputs is missing", code=400, message="Bad Request")
    assert (output.code, output.message) == (400, "Bad Request")
    assert output.properties == {"content-type": "application/json"}
    body = json.loads(bytes(output.content.value_at(0)))
    assert body == {"code": 400, "message": "Bad Request", "error": "inputs is missing"}
    default = djl_python.Output().error("boom")
    assert (default.code, default.message) == (424, "prediction failure")
    # 0.27.0's Output has no getters for properties (later releases added them): the handler must not rely on them.
    assert not hasattr(default, "get_property") and not hasattr(default, "get_properties")


def test_output_batch_answers_are_keyed_the_way_pypredictor_splits_them():
    output = djl_python.Output()
    output.add_as_json({"generated_text": "x"}, key="data", batch_index=0)
    output.add("plain", batch_index=1)
    output.add(b"raw", key="data", batch_index=12)
    assert output.content.get_keys() == ["batch_0.data", "batch_1.", "batch_12.data"]
    assert json.loads(bytes(output.content.value_at(0))) == {"generated_text": "x"}
    assert [type(value) for value in output.content.get_values()] == [bytearray, bytes, bytearray]  # as in 0.27.0


def test_output_refuses_nan_in_json_as_djl_does():
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        djl_python.Output().add_as_json({"log_prob": float("-inf")})


def test_output_setters_chain_and_values_become_bytes():
    output = djl_python.Output().set_code(201).set_message("Created").add_property("x-id", "1").add("text")
    assert (output.code, output.message, output.properties["x-id"]) == (201, "Created", "1")
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
        djl_python.PairList(keys=["a"], values=[1, 2])
    assert djl_python.PairList(keys=["a"], values=[]).is_empty()  # 0.27.0 checks sizes only when both are non-empty
    pairs.add(key="c", value=3, index=0)
    pairs.add(pair=("d", 4))
    pairs.add(key="ignored", value=None)
    assert pairs.get_keys() == ["c", "a", "b", "d"]
