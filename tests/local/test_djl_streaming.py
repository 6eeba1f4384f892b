"""local/djl_streaming.py sends a streamed Output (add_stream_content) as DJL Serving 0.27.0 does: the Python engine's
Output.send (chunks, the error text as the last chunk), the Java frontend's chunked HTTP response with its read
timeout, one stream at a time per worker, and no stream inside a dynamic batch."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from local import djl_frontend, djl_streaming
from local.serve import LocalEndpoint, _djl_python

djl_python = _djl_python()


def _streamed(items, formatter=None):
    return (
        djl_python.Output().add_property("content-type", "application/jsonlines").add_stream_content(items, formatter)
    )


def test_the_default_output_formatter_wraps_each_item_as_outputs():
    output = djl_python.Output().add_stream_content(iter([["a", "b"], ["c"]]))
    assert list(djl_streaming.stream_chunks(output)) == [b'{"outputs": ["a", "b"]}\n', b'{"outputs": ["c"]}\n']


def test_each_item_is_one_chunk_str_as_utf8_bytes_as_they_are_anything_else_as_indented_json():
    output = _streamed(iter(["é\n", b"raw", bytearray(b"array"), {"a": 1}]))
    assert list(djl_streaming.stream_chunks(output)) == [
        "é\n".encode(),
        b"raw",
        b"array",
        b'{\n  "a":1\n}',
    ]


def test_a_failing_stream_ends_with_its_error_text_as_the_last_chunk():
    def items():
        yield "one\n"
        raise RuntimeError("device lost")

    assert list(djl_streaming.stream_chunks(_streamed(items()))) == [b"one\n", b"device lost"]
    # Output.send calls next() on the stream: a list is not an iterator.
    assert list(djl_streaming.stream_chunks(_streamed(["x"]))) == [b"'list' object is not an iterator"]


def test_a_streamed_answer_to_a_batch_is_a_size_mismatch_after_the_stream_has_run():
    sent = []

    def items():
        for item in ("a", "b"):
            sent.append(item)
            yield item

    with pytest.raises(djl_frontend.BatchOutputError, match="Batch output size mismatch, expected: 2, actual: 1"):
        djl_frontend.split_batch_output(djl_python, _streamed(items()), 2)
    assert sent == ["a", "b"]  # the Python engine sends the whole stream whatever the frontend does with it


def test_a_chunk_that_does_not_come_in_time_is_a_read_timeout():
    gate = threading.Event()

    def items():
        yield "first\n"
        gate.wait(10)
        yield "late\n"

    response = djl_streaming.StreamedResponse(_streamed(items()), read_timeout=0.2)
    threading.Thread(target=response.drain, daemon=True).start()
    chunks = response.chunks()
    assert next(chunks) == b"first\n"
    with pytest.raises(djl_streaming.ChunkReadTimeout, match=r"Read chunk timeout\."):
        next(chunks)
    gate.set()


def test_the_worker_takes_the_next_request_only_after_the_stream_has_been_sent():
    gate, order = threading.Event(), []

    def items():
        yield "first\n"
        gate.wait(10)
        order.append("stream done")
        yield "last\n"

    def run_batch(jobs):
        order.append(f"run {jobs[0]}")
        return [djl_streaming.StreamedResponse(_streamed(items())) if jobs[0] == "stream" else jobs[0]]

    worker = djl_frontend.BatchAggregator(run_batch, batch_size=1, max_batch_delay_ms=1)
    worker.start()
    try:
        response = worker.submit("stream")  # answered at once, before the stream is drained
        assert next(response.chunks()) == b"first\n"
        plain = threading.Thread(target=worker.submit, args=("plain",))
        plain.start()
        time.sleep(0.2)
        assert order == ["run stream"]  # the plain request waits for the stream
        gate.set()
        plain.join(10)
        assert order == ["run stream", "stream done", "run plain"]
    finally:
        gate.set()
        worker.stop()


STREAMING_HANDLER = """
import os
import time

from djl_python import Output


def handle(inputs):
    if inputs.is_empty():
        return None
    gate = inputs.get_as_json()["gate"]

    def lines():
        yield "first\\n"
        deadline = time.monotonic() + 30
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        yield ""
        yield "second\\n"

    return Output().add_property("content-type", "application/jsonlines").add_stream_content(lines(), None)
"""


def test_over_http_each_chunk_is_sent_as_it_comes_with_chunked_transfer_coding(tmp_path):
    handler_dir = tmp_path / "handler"
    handler_dir.mkdir()
    (handler_dir / "model.py").write_text(STREAMING_HANDLER)
    gate = tmp_path / "gate"
    with LocalEndpoint(handler_dir, None, port=0) as endpoint:
        connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=30)
        connection.request(
            "POST", "/invocations", body=json.dumps({"gate": str(gate)}), headers={"Content-Type": "a/b"}
        )
        response = connection.getresponse()
        assert (response.status, response.version) == (200, 11)
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert response.getheader("Content-Type") == "application/jsonlines"
        assert response.readline() == b"first\n"  # while the handler's stream is still waiting
        gate.touch()
        assert response.read() == b"second\n"  # the empty item wrote nothing, and did not end the body
        connection.close()
