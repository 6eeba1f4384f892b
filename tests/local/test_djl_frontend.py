"""local/djl_frontend.py does what DJL Serving 0.27.0's Java side does around the handler: RequestParser (HTTP request
to Input), PermanentBatchAggregator (forming batches), PyPredictor#batchPredict (batch Input, splitting the answer) and
djl_python_engine.py (what becomes of None, a wrong type, an exception)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from local import djl_frontend
from local.serve import _djl_python

djl_python = _djl_python()


def _request(body: bytes, **headers: str):
    return djl_frontend.request_input(djl_python, body, headers, {})


def test_a_request_input_holds_query_parameters_then_the_body_and_headers_as_properties():
    request = djl_frontend.request_input(
        djl_python,
        b"",
        {"Content-Type": "application/json", "X-Amzn-SageMaker-Custom-Attributes": "seed=3; trace = on;bare"},
        {"seed": ["1", "2"]},
    )
    assert request.content.get_keys() == ["seed", "seed", "data"]
    assert request.get_as_bytes() == b""  # the body is "data" even when empty, so the Input is not empty
    assert request.properties == {"Content-Type": "application/json", "seed": "3", "trace": "on"}


def test_two_or_more_requests_become_one_input_with_prefixed_keys():
    requests = [
        _request(json.dumps({"inputs": str(index)}).encode(), **{"Content-Type": "a/b"}) for index in range(101)
    ]
    requests[3].content.add(key=None, value=b"unnamed")
    batch = djl_frontend.batch_input(djl_python, requests)
    assert batch.properties["batch_size"] == "101"
    for index, prefix in ((0, "batch_000."), (10, "batch_010."), (100, "batch_100.")):
        assert batch.properties[prefix + "Content-Type"] == "a/b"
        assert batch.content.get(prefix + "data") == json.dumps({"inputs": str(index)}).encode()
    assert batch.content.get_keys().count("batch_003.data") == 2  # a None key is sent as "data"
    assert [item.get_as_json()["inputs"] for item in batch.get_batches()] == [str(index) for index in range(101)]


def test_a_batch_answer_is_split_by_its_batch_keys_and_shares_code_and_properties():
    output = djl_python.Output(code=201, message="Created").add_property("content-type", "application/json")
    output.add(b"second", key="data", batch_index=1)
    output.add(b"first", batch_index=0)
    first, second = djl_frontend.split_batch_output(djl_python, output, 2)
    assert (first.code, first.message, second.code) == (201, "Created", 201)
    assert first.properties == second.properties == {"content-type": "application/json"}
    assert (djl_frontend.response_body(first), djl_frontend.response_body(second)) == (b"first", b"second")
    assert first.content.get_keys() == [""] and second.content.get_keys() == ["data"]


def test_a_batch_answer_of_code_300_or_more_answers_every_request_with_itself():
    output = djl_python.Output().error("model not ready", code=503, message="Service Unavailable")
    answers = djl_frontend.split_batch_output(djl_python, output, 3)
    assert answers == [output] * 3


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["batch_0.data"], "Batch output size mismatch, expected: 2, actual: 1"),
        (["batch_0.data", "data"], "Unexpected batch output key: data"),
        (["batch_0.data", None], "Unexpected batch output key: None"),
    ],
)
def test_a_batch_answer_that_cannot_be_split_is_refused(keys, message):
    output = djl_python.Output()
    for key in keys:
        output.content.add(key=key, value=b"{}")
    with pytest.raises(djl_frontend.BatchOutputError, match=message):
        djl_frontend.split_batch_output(djl_python, output, 2)


def test_the_python_engine_turns_none_wrong_types_and_exceptions_into_outputs():
    seen = {}

    def handler(inputs):
        seen.update(inputs.properties)
        return inputs.properties.get("answer")

    engine = {"device_id": "0", "model_dir": "/opt/ml/model"}
    none = djl_frontend.call_handler(djl_python, handler, _request(b"x"), engine)
    assert (none.code, none.message, djl_frontend.response_body(none)) == (204, "No content", b"")
    assert seen["device_id"] == "0" and seen["model_dir"] == "/opt/ml/model"
    wrong = djl_frontend.call_handler(djl_python, handler, _request(b"x", answer="text"), engine)
    assert (
        wrong.code == 424
        and "Invalid output type: <class 'str'>" in json.loads(djl_frontend.response_body(wrong))["error"]
    )

    def raises(error):
        def handler(inputs):
            raise error

        return handler

    failed = djl_frontend.call_handler(djl_python, raises(KeyError("inputs")), _request(b"x"), engine)
    assert json.loads(djl_frontend.response_body(failed)) == {
        "code": 424,
        "message": "prediction failure",
        "error": "'inputs'",
    }
    oom = djl_frontend.call_handler(djl_python, raises(MemoryError("no room")), _request(b"x"), engine)
    assert (oom.code, oom.message, djl_frontend.response_body(oom)) == (507, "no room", b"")


def test_batch_size_and_delay_come_from_serving_properties_then_the_servers_defaults():
    assert djl_frontend.batching({}, {}) == (1, 100)
    assert djl_frontend.batching({}, {"SERVING_BATCH_SIZE": "4", "SERVING_MAX_BATCH_DELAY": "20"}) == (4, 20)
    assert djl_frontend.batching({"max_dynamic_batch_size": "6"}, {"SERVING_BATCH_SIZE": "4"}) == (6, 100)
    assert djl_frontend.batching({"batch_size": "8", "max_batch_delay": "5"}, {"SERVING_BATCH_SIZE": "4"}) == (8, 5)
    with pytest.raises(ValueError, match="batch_size='0' is not valid; expected a positive integer"):
        djl_frontend.batching({"batch_size": "0"}, {})


def _submit_together(worker, jobs):
    results = [None] * len(jobs)

    def submit(index):
        results[index] = worker.submit(jobs[index])

    threads = [threading.Thread(target=submit, args=(index,)) for index in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_the_worker_waits_up_to_max_batch_delay_to_fill_a_batch():
    calls = []

    def run_batch(jobs):
        calls.append(list(jobs))
        return [job * 10 for job in jobs]

    worker = djl_frontend.BatchAggregator(run_batch, batch_size=3, max_batch_delay_ms=5000)
    worker.start()
    try:
        started = time.monotonic()
        assert sorted(_submit_together(worker, [1, 2, 3])) == [10, 20, 30]
        assert time.monotonic() - started < 4  # full before the delay ran out
        assert worker.sizes == [3] and sorted(calls[0]) == [1, 2, 3]
    finally:
        worker.stop()

    alone = djl_frontend.BatchAggregator(run_batch, batch_size=3, max_batch_delay_ms=50)
    alone.start()
    try:
        assert alone.submit(7) == 70  # nobody else came within 50 ms: a batch of one
        assert alone.sizes == [1]
    finally:
        alone.stop()


def test_without_batching_the_worker_runs_one_request_at_a_time():
    worker = djl_frontend.BatchAggregator(lambda jobs: jobs, batch_size=1, max_batch_delay_ms=5000)
    worker.start()
    try:
        assert sorted(_submit_together(worker, [1, 2, 3])) == [1, 2, 3]
        assert worker.sizes == [1, 1, 1]
    finally:
        worker.stop()


def test_a_failing_batch_fails_each_of_its_requests_and_the_worker_goes_on():
    def run_batch(jobs):
        if "boom" in jobs:
            raise RuntimeError("boom")
        return jobs

    worker = djl_frontend.BatchAggregator(run_batch, batch_size=1, max_batch_delay_ms=1)
    worker.start()
    try:
        with pytest.raises(RuntimeError, match="boom"):
            worker.submit("boom")
        assert worker.submit("fine") == "fine"
    finally:
        worker.stop()
