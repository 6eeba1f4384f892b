"""DJL Serving entry point (option.entryPoint=model.py): text generation with DeepSpeed inference on LMI.

DJL calls `handle(inputs)` in every worker process (one per tensor-parallel rank, all ranks get every request):
- the first call, which DJL makes at start-up with an empty input whose properties are the `option.*` values,
  loads the model once for this process (from model_dir, where SageMaker delivered the weights before the container
  started; then deepspeed.init_inference);
- every later call is one invocation, JSON {"inputs": ..., "parameters": {...}} (LMI 0.27.0's schema), answered with
  {"generated_text": ...} for a string prompt or a list of them for a list of prompts, or, with "stream": true, with
  JSON lines token by token (lmi_streaming.py); or, with DJL dynamic batching (`batch_size` > 1), several invocations
  at once (see TextGenerationService.inference).
Bad requests get a 4xx Output with a message naming the field; the worker stays up for the next request.

Configuration: lmi_config.py (the option.* keys, from OPTION_* environment variables on an endpoint).
On an endpoint this file sits in <model_dir>/inference/<sha256>/ and DJL loads it by its absolute path
(OPTION_ENTRYPOINT); nothing in it reaches the network (EnableNetworkIsolation).
Locally: `python -m local.serve --handler model_artifacts/deepspeed` serves this file behind /ping and /invocations.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from http import HTTPStatus
from typing import Any

# DJL loads this file by its absolute path (inference/<sha256>/ inside the delivered folder), or as a module of the
# model directory locally; make its sibling modules importable whatever the loader did with sys.path.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from djl_python import Input, Output  # noqa: E402  (the container's package; local/djl_python stands in locally)
from lmi_config import HandlerConfig  # noqa: E402
from lmi_distributed import Ranks, init_process_group, shared_random_seed  # noqa: E402
from lmi_generation import PreparedRequest, batch_key, response_body  # noqa: E402
from lmi_requests import RequestError, RequestLimits, parse_request  # noqa: E402
from lmi_streaming import CONTENT_TYPE as STREAM_CONTENT_TYPE  # noqa: E402
from lmi_streaming import token_stream  # noqa: E402

log = logging.getLogger("lmi_handler")


class TextGenerationService:
    """One model per worker process: built by initialize(), then serving inference() calls."""

    def __init__(self) -> None:
        self.config: HandlerConfig | None = None
        self.ranks = Ranks()
        self.limits: RequestLimits | None = None
        self.generator = None
        # DJL calls a worker's handler once at a time; seeding is process-global, so generation is serialized anyway.
        self._lock = threading.Lock()

    @property
    def initialized(self) -> bool:
        return self.generator is not None

    def initialize(self, properties: dict) -> None:
        import torch
        from lmi_config import ConfigError
        from lmi_folder_check import check_model_folder, check_staged_files
        from lmi_generation import TextGenerator
        from lmi_loading import load_model

        started = time.monotonic()
        config = HandlerConfig.from_properties(properties)
        ranks = Ranks.from_environ()
        if config.tensor_parallel_degree != ranks.world_size:
            raise ConfigError(
                f"option.tensor_parallel_degree={config.tensor_parallel_degree} but this worker group has "
                f"WORLD_SIZE={ranks.world_size} process(es); with engine=DeepSpeed DJL starts one MPI process per "
                "tensor-parallel rank, so the two must match (check engine= and the property)"
            )
        log.info("rank %d/%d: %s", ranks.rank, ranks.world_size, config.describe())
        # Before any process group or load: a folder this image's transformers cannot read, or would read wrong
        # (written by a later release), is refused with the reason instead of failing or serving garbage later.
        check_model_folder(config.weights)
        # A staged folder's pickles against the hashes the staging job checked with the hub (each rank its share):
        # before any torch.load, which runs whatever code a pickle names.
        check_staged_files(config.weights, rank=ranks.rank, world_size=ranks.world_size)
        use_cuda = torch.cuda.is_available()
        init_process_group(ranks, use_cuda=use_cuda)
        model, tokenizer, plan = load_model(config.weights, config, use_cuda=use_cuda, local_rank=ranks.local_rank)
        self.generator = TextGenerator(
            model, tokenizer, context_length=plan.context_length, max_input_length=plan.max_input_length
        )
        if plan.kernel_injection:
            # Every rank, in step (tensor-parallel collectives): the kernels' workspace fits the largest batch.
            self.generator.warm_up(config.max_batch_size)
        self.config = config
        self.ranks = ranks
        self.limits = RequestLimits(max_batch_size=config.max_batch_size, max_new_tokens=config.max_new_tokens)
        log.info("model ready in %.1f s (kernel injection: %s)", time.monotonic() - started, plan.kernel_injection)

    def inference(self, inputs: Input) -> Output:
        """Answer one DJL call: one request, or a DJL dynamic batch of them (`batch_size` > 1 in serving.properties).

        A batch gets one Output whose content holds one answer per request under `batch_<i>.data`, which DJL's
        PyPredictor splits back. DJL 0.27.0 gives every request of a batch the batch Output's status code (and a code
        >= 300 would answer every request with the same body), so each request's own error travels as its JSON error
        body {"code", "message", "error"} under status 200, and the other requests are answered as usual.

        A request with `"stream": true` is answered with a stream of JSON lines (lmi_streaming.py) when it comes
        alone; DJL 0.27.0 cannot split a streamed answer out of a batch (PyPredictor#batchPredict: one chunked
        content for N requests is a "Batch output size mismatch" for all of them), so inside a batch it is refused."""
        if _is_djl_batch(inputs):
            requests = inputs.get_batches()
            output = Output().add_property("content-type", "application/json")
            for index, (_, body) in enumerate(self.answer([request.get_as_bytes() for request in requests])):
                output.add_as_json(body, key="data", batch_index=index)
            return output
        ((status, body),) = self.answer([inputs.get_as_bytes()], stream=True)
        if status != HTTPStatus.OK:
            return error_output(status, body["error"])
        if not isinstance(body, (dict, list)):  # a stream of lines; DJL's Output.send writes each as it comes
            return Output().add_property("content-type", STREAM_CONTENT_TYPE).add_stream_content(body, None)
        return Output().add_property("content-type", "application/json").add_as_json(body)

    def answer(self, bodies: list, *, stream: bool = False) -> list[tuple[int, Any]]:
        """(status, JSON body) for each raw request body, in order; no request's failure touches another's answer.
        With `stream` (one request, not a batch), a request that asks for a stream gets an iterator of JSON lines
        as its body."""
        answers: list = [None] * len(bodies)
        prepared: dict[int, PreparedRequest] = {}
        for index, body in enumerate(bodies):
            try:
                request = parse_request(body, self.limits)
                if request.stream and not stream:
                    raise RequestError(
                        HTTPStatus.BAD_REQUEST,
                        "stream is true but this request came in a DJL dynamic batch (batch_size > 1 in "
                        "serving.properties), which DJL 0.27.0 cannot stream; send it without stream, or serve "
                        "with batch_size=1 (the default)",
                    )
                prepared[index] = self.generator.prepare(request)
            except RequestError as error:
                log.info("rejected request (%d): %s", error.status, error.message)
                answers[index] = (error.status, error_body(error.status, error.message))
            except _FATAL:
                raise
            except BaseException as error:  # the worker must survive whatever one request does
                answers[index] = _failure(error)
        for index in [index for index, item in prepared.items() if item.request.stream]:
            item = prepared.pop(index)
            lines = token_stream(self.generator, item, seed=self._seed(item.request.parameters), lock=self._lock)
            answers[index] = (HTTPStatus.OK, lines)
        for group in _groups(prepared, self.limits.max_batch_size):
            try:
                seed = self._seed(prepared[group[0]].request.parameters)
                with self._lock:
                    results = self.generator.generate([prepared[index] for index in group], seed=seed)
            except _FATAL:
                raise
            except BaseException as error:
                for index in group:
                    answers[index] = _failure(error)
                continue
            for index, result in zip(group, results):
                body = response_body(prepared[index].request, result)
                try:
                    json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")  # as Output will
                except ValueError as error:
                    answers[index] = _failure(error)
                else:
                    answers[index] = (HTTPStatus.OK, body)
        return answers

    def _seed(self, parameters) -> int | None:
        if parameters.seed is None and parameters.do_sample and self.ranks.world_size > 1:
            return shared_random_seed()  # every rank draws the same tokens
        return parameters.seed


# Never turned into a 500: stopping the process must stop it.
_FATAL = (KeyboardInterrupt, SystemExit)
_BATCH_CONTENT_KEY = re.compile(r"batch_\d{3}\.")


def _is_djl_batch(inputs: Input) -> bool:
    """DJL's PyPredictor marks a batch with a `batch_size` property, but a client can send that property too: as a
    header, or in SageMaker's CustomAttributes ("batch_size=2"), which DJL's RequestParser turns into properties.
    Only a real batch has nothing but `batch_NNN.`-prefixed content."""
    keys = inputs.get_content().get_keys()
    return (
        inputs.is_batch() and bool(keys) and all(isinstance(key, str) and _BATCH_CONTENT_KEY.match(key) for key in keys)
    )


def _failure(error: BaseException) -> tuple[int, dict]:
    # BaseException, not Exception: a Rust panic in tokenizers is a BaseException (pyo3's PanicException), which
    # DJL's Python engine does not catch either; the process would exit and DJL would reload the model.
    log.error("generation failed", exc_info=error)
    status = HTTPStatus.INTERNAL_SERVER_ERROR
    return status, error_body(status, f"generation failed: {type(error).__name__}: {error}")


def _groups(prepared: dict, max_prompts: int) -> list[list[int]]:
    """Indices of the requests that share one model.generate call (equal batch_key, at most option.max_batch_size
    prompts in all, so that memory stays within what the deployment was sized for), in order of arrival."""
    groups: list[list[int]] = []
    open_groups: dict = {}  # batch_key -> (group, prompts in it)
    for index, item in prepared.items():
        key = batch_key(item.request)
        prompts = len(item.token_ids)
        if key is not None and key in open_groups:
            group, size = open_groups[key]
            if size + prompts <= max_prompts:
                group.append(index)
                open_groups[key] = (group, size + prompts)
                continue
        group = [index]
        groups.append(group)
        if key is not None:
            open_groups[key] = (group, prompts)
    return groups


def error_body(status: int, message: str) -> dict:
    """Output.error's JSON body: {"code", "message" (the HTTP reason), "error" (what was wrong)}."""
    return {"code": int(status), "message": HTTPStatus(int(status)).phrase, "error": message}


def error_output(status: int, message: str) -> Output:
    """Output.error's JSON body {"code", "message", "error"}, with `error` saying what was wrong."""
    return Output().error(message, code=int(status), message=HTTPStatus(int(status)).phrase)


_service = TextGenerationService()


def handle(inputs: Input) -> Output | None:
    """DJL's handler function (the default `option.handler`)."""
    initialized_now = False
    if not _service.initialized:
        _service.initialize(inputs.get_properties())
        initialized_now = True
    if inputs.is_empty():
        if initialized_now:
            return None  # DJL's start-up call: the model is loaded, nothing to answer
        return error_output(
            HTTPStatus.BAD_REQUEST, 'request body is empty; send {"inputs": "your prompt", "parameters": {...}}'
        )
    return _service.inference(inputs)
