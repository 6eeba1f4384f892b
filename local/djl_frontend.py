"""What DJL Serving 0.27.0's Java side does between an HTTP request and the Python handler, for local/serve.py.

Each piece follows one file of deepjavalibrary/djl-serving at v0.27.0 (branch 0.27.0-dlc):
- read_properties_file / resolve_properties / handler_properties: wlm/.../ModelInfo.java#loadServingProperties
  (serving.properties, then OPTION_<KEY> environment variables for keys it lacks) and the properties the Python
  engine's start-up Input carries (option.* without the prefix, model_dir, device_id, tensor_parallel_degree);
- request_input: serving/src/main/java/ai/djl/serving/http/RequestParser.java (query parameters become content
  entries, then the body is content "data", always, even when empty; headers become properties, and the
  X-Amzn-SageMaker-Custom-Attributes header is split into `key=value` properties);
- BatchAggregator: wlm/src/main/java/ai/djl/serving/wlm/{BatchAggregator,PermanentBatchAggregator}.java (a worker
  takes one job, then drains the queue up to `batch_size` jobs, waiting at most `max_batch_delay` ms in all);
- batch_input / split_batch_output: engines/python/src/main/java/ai/djl/python/engine/PyPredictor.java#batchPredict
  (one request goes alone, unprefixed; two or more become one Input with `batch_size` and every property and content
  key prefixed `batch_NNN.`; the answer is split by content keys `batch_<i>.<key>`, one per request, each request
  getting the batch Output's code, message and *all* its properties; a code >= 300 answers every request with the
  whole Output; a content count other than the batch size is a TranslateException, which
  serving/.../http/InferenceRequestHandler.java#onException answers with 400 for every request of the batch);
- call_handler: engines/python/setup/djl_python_engine.py#run_server and djl_python/service_loader.py (the engine
  adds tensor_parallel_degree and device_id, the service loader model_dir; None becomes 204 "No content"; an escaped
  exception becomes Output().error(str(e)), 424, or a bare 507 for MemoryError / OutOfMemoryError);
- response_body: ai.djl.modality.Input#getData in deepjavalibrary/djl (content "data", else the first entry).
A streamed answer (Output.add_stream_content) is sent as local/djl_streaming.py says; in a batch it is one content
entry for N requests, which split_batch_output refuses as PyPredictor does.
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from local import djl_streaming

# WlmConfigManager's defaults (wlm/src/main/java/ai/djl/serving/wlm/util/WlmConfigManager.java).
DEFAULT_BATCH_SIZE = 1
DEFAULT_MAX_BATCH_DELAY_MS = 100
_BATCH_KEY = re.compile(r"batch_(\d+)\.(.*)", re.DOTALL)
_CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes"


def read_properties_file(path: Path) -> dict[str, str]:
    """serving.properties as DJL reads it: `key=value` (or `key: value`) lines, `#`/`!` comments."""
    properties: dict[str, str] = {}
    for number, raw_line in enumerate(path.read_text().splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        separators = [position for position in (line.find("="), line.find(":")) if position > 0]
        if not separators:
            raise ValueError(f"{path}:{number}: {raw_line!r} is not a property; expected key=value")
        position = min(separators)
        properties[line[:position].strip()] = line[position + 1 :].strip()
    return properties


def resolve_properties(
    handler_dir: Path, overrides: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """OPTION_<KEY> environment < serving.properties < explicit overrides."""
    env = os.environ if environ is None else environ
    properties = {
        "option." + name[len("OPTION_") :].lower(): value for name, value in env.items() if name.startswith("OPTION_")
    }
    properties_file = handler_dir / "serving.properties"
    if properties_file.is_file():
        properties.update(read_properties_file(properties_file))
    properties.update(overrides or {})
    return properties


def handler_properties(properties: Mapping[str, str], handler_dir: Path, *, cuda_devices: int) -> dict[str, Any]:
    """What DJL puts in the Input's properties: option.* without the prefix, plus the engine's own keys."""
    result: dict[str, Any] = {
        key[len("option.") :]: value for key, value in properties.items() if key.startswith("option.")
    }
    result["model_dir"] = str(handler_dir)
    result["device_id"] = "0" if cuda_devices else "-1"
    degree = properties.get("option.tensor_parallel_degree", os.environ.get("TENSOR_PARALLEL_DEGREE"))
    if degree is not None:
        # DJL resolves `max` to the GPU count and hands the engine an int.
        if str(degree).strip() == "max":
            result["tensor_parallel_degree"] = max(1, cuda_devices)
        elif str(degree).strip().isdigit():
            result["tensor_parallel_degree"] = int(degree)
        else:
            raise ValueError(f"option.tensor_parallel_degree={degree!r} is not valid; expected an integer or max")
    return result


class BatchOutputError(Exception):
    """PyPredictor's TranslateException: the handler's answer to a batch cannot be split into one per request."""


def batching(properties: Mapping[str, str], environ: Mapping[str, str]) -> tuple[int, int]:
    """(batch_size, max_batch_delay in ms) as ModelInfo#configPerModelSettings resolves them: serving.properties'
    `batch_size` (or its alias `max_dynamic_batch_size`) and `max_batch_delay`, else the server-wide defaults, which
    the environment sets as SERVING_BATCH_SIZE / SERVING_MAX_BATCH_DELAY (ConfigManager), else 1 and 100 ms."""
    size = _positive_int(environ, "SERVING_BATCH_SIZE", DEFAULT_BATCH_SIZE)
    size = _positive_int(properties, "max_dynamic_batch_size", size)
    size = _positive_int(properties, "batch_size", size)
    delay = _positive_int(environ, "SERVING_MAX_BATCH_DELAY", DEFAULT_MAX_BATCH_DELAY_MS)
    delay = _positive_int(properties, "max_batch_delay", delay)
    return size, delay


def _positive_int(source: Mapping[str, str], key: str, default: int) -> int:
    value = source.get(key)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{key}={value!r} is not valid; expected a positive integer")
    return number


def request_input(djl_python: Any, body: bytes, headers: Mapping[str, str], query: Mapping[str, list[str]]):
    """The Input DJL builds from one HTTP request (RequestParser#parseRequest, a non-form body)."""
    request = djl_python.Input()
    for key, values in query.items():
        for value in values:
            request.content.add(key=key, value=value.encode("utf-8"))
    for key, value in headers.items():
        if key.lower() == _CUSTOM_ATTRIBUTES:
            for token in value.split(";"):
                pair = token.split("=", 1)
                if len(pair) == 2:
                    request.properties[pair[0].strip()] = pair[1].strip()
        else:
            request.properties[key] = value
    request.content.add(key="data", value=bytes(body))
    return request


def batch_input(djl_python: Any, requests: list[Any]):
    """The Input PyPredictor#batchPredict sends the Python engine for two or more requests."""
    batch = djl_python.Input()
    batch.properties["batch_size"] = str(len(requests))
    for index, request in enumerate(requests):
        prefix = f"batch_{index:03d}."  # "batch_00" + i below 10, "batch_0" + i below 100, then "batch_" + i
        for key, value in request.properties.items():
            batch.properties[prefix + key] = value
        for key, value in zip(request.content.get_keys(), request.content.get_values(), strict=True):
            batch.content.add(key=prefix + ("data" if key is None else key), value=value)
    return batch


def split_batch_output(djl_python: Any, output: Any, size: int) -> list[Any]:
    """One Output per request from the handler's answer to a batch, as PyPredictor#batchPredict splits it."""
    if djl_streaming.is_streamed(output):
        # The Python engine sends the whole stream whatever the frontend makes of it; Java sees one content entry.
        for _ in djl_streaming.stream_chunks(output):
            pass
        if output.code >= 300:
            return [output] * size
        raise BatchOutputError(f"Batch output size mismatch, expected: {size}, actual: 1")
    if output.code >= 300:
        return [output] * size
    if output.content.size() != size:
        raise BatchOutputError(f"Batch output size mismatch, expected: {size}, actual: {output.content.size()}")
    answers = []
    for _ in range(size):
        answer = djl_python.Output(output.code, output.message)
        answer.properties = output.properties  # shared, as Java's setProperties(output.getProperties())
        answers.append(answer)
    for key, value in zip(output.content.get_keys(), output.content.get_values(), strict=True):
        match = _BATCH_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            raise BatchOutputError(f"Unexpected batch output key: {key}")
        index = int(match.group(1))
        if index >= size:  # Java: IndexOutOfBoundsException, an unexpected error (500) for the whole batch
            raise IndexError(f"Index {index} out of bounds for length {size}")
        answers[index].content.add(key=match.group(2), value=value)
    return answers


def call_handler(djl_python: Any, handle: Callable, inputs: Any, engine_properties: Mapping[str, Any]):
    """One call of the handler as the Python engine makes it; always returns an Output."""
    inputs.properties.update(engine_properties)
    try:
        output = handle(inputs)
        if output is None:
            return djl_python.Output(code=204, message="No content")
        if not isinstance(output, djl_python.Output):
            return djl_python.Output().error(f"Invalid output type: {type(output)}")
        return output
    except Exception as error:
        if type(error).__name__ in ("OutOfMemoryError", "MemoryError"):
            return djl_python.Output(code=507, message=str(error))
        return djl_python.Output().error(str(error))


def response_body(output: Any) -> bytes:
    """The HTTP body DJL sends for an Output (Input#getData: content "data", else the first entry)."""
    if output.content.is_empty():
        return b""
    data = output.content.get("data")
    return bytes(output.content.value_at(0) if data is None else data)


def error_response(status: int, error: BaseException) -> tuple[int, dict[str, str], bytes]:
    """NettyUtils#sendError's answer: {"code", "type", "message"}."""
    body = {"code": status, "type": type(error).__name__, "message": str(error)}
    return status, {"content-type": "application/json"}, json.dumps(body).encode()


class BatchAggregator:
    """One DJL worker: a job queue, and a thread that takes batches from it and runs them one at a time.

    `run_batch(jobs)` gets a list of 1..batch_size jobs and returns one result per job. `sizes` records every batch
    size, as DJL's DynamicBatchSize metric does for batches above one. A djl_streaming.StreamedResponse result goes
    to its request at once and is then drained on this thread before the next batch is taken, as DJL's Python engine
    sends a whole stream before it reads the next request."""

    def __init__(self, run_batch: Callable[[list[Any]], list[Any]], *, batch_size: int, max_batch_delay_ms: int):
        self.run_batch = run_batch
        self.batch_size = batch_size
        self.max_batch_delay = max_batch_delay_ms / 1000
        self.sizes: list[int] = []
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="djl-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def submit(self, job: Any) -> Any:
        if self._thread is None:
            raise RuntimeError("the worker is not running; start the endpoint first")
        future: Future = Future()
        self._queue.put((job, future))
        return future.result()

    def _poll_batch(self, first: tuple) -> tuple[list[tuple], bool]:
        """PermanentBatchAggregator#pollBatch + BatchAggregator#drainTo: what is queued now, then wait for more until
        the batch is full or max_batch_delay has passed since the first job was taken."""
        batch, stopping = [first], False
        while len(batch) < self.batch_size:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        deadline = time.monotonic() + self.max_batch_delay
        while len(batch) < self.batch_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                item = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if item is None:
                stopping = True
                break
            batch.append(item)
        return batch, stopping

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stopping = self._poll_batch(first)
            self.sizes.append(len(batch))
            try:
                results = self.run_batch([job for job, _ in batch])
                for (_, future), result in zip(batch, results, strict=True):
                    future.set_result(result)
                for result in results:
                    if isinstance(result, djl_streaming.StreamedResponse):
                        result.drain()
            except BaseException as error:  # every waiting request must get an answer
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
            if stopping:
                return
