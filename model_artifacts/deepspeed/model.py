"""DJL Serving entry point (option.entryPoint=model.py): text generation with DeepSpeed inference on LMI.

DJL calls `handle(inputs)` in every worker process (one per tensor-parallel rank, all ranks get every request):
- the first call, which DJL makes at start-up with an empty input whose properties are the `option.*` values,
  loads the model once for this process (weights from S3 via local rank 0, then deepspeed.init_inference);
- every later call is one invocation: JSON {"inputs": ..., "parameters": {...}} -> JSON [{"generated_text": ...}].
Bad requests get a 4xx Output with a message naming the field; the worker stays up for the next request.

Configuration: lmi_config.py (serving.properties keys and the WEIGHTS_S3_URI / TENSOR_PARALLEL_DEGREE environment).
Locally: `python -m local.serve --handler model_artifacts/deepspeed` serves this file behind /ping and /invocations.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from http import HTTPStatus

# DJL imports this file as a module of the model directory; make its sibling modules importable whatever the
# loader did with sys.path.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from djl_python import Input, Output  # noqa: E402  (the container's package; local/djl_python stands in locally)
from lmi_config import HandlerConfig  # noqa: E402
from lmi_distributed import Ranks, gather_errors, init_process_group, shared_random_seed  # noqa: E402
from lmi_requests import RequestError, RequestLimits, parse_request  # noqa: E402

log = logging.getLogger("lmi_handler")


class TextGenerationService:
    """One model per worker process: built by initialize(), then serving inference() calls."""

    def __init__(self) -> None:
        self.config: HandlerConfig | None = None
        self.ranks = Ranks()
        self.limits: RequestLimits | None = None
        self.generator = None
        # DJL sends one request at a time per worker; the local server is threaded, and seeding is process-global.
        self._lock = threading.Lock()

    @property
    def initialized(self) -> bool:
        return self.generator is not None

    def initialize(self, properties: dict) -> None:
        import torch
        from lmi_config import ConfigError
        from lmi_generation import TextGenerator
        from lmi_loading import load_model
        from lmi_weights import resolve_weights

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
        use_cuda = torch.cuda.is_available()
        init_process_group(ranks, use_cuda=use_cuda)
        if config.weights_in_s3:
            weights_dir = str(
                resolve_weights(
                    config.weights, config.download_dir, local_rank=ranks.local_rank, gather_errors=gather_errors
                )
            )
        else:
            weights_dir = config.weights
        model, tokenizer, plan = load_model(weights_dir, config, use_cuda=use_cuda, local_rank=ranks.local_rank)
        self.generator = TextGenerator(
            model, tokenizer, context_length=plan.context_length, max_input_length=plan.max_input_length
        )
        self.config = config
        self.ranks = ranks
        self.limits = RequestLimits(max_batch_size=config.max_batch_size, max_new_tokens=config.max_new_tokens)
        log.info("model ready in %.1f s (kernel injection: %s)", time.monotonic() - started, plan.kernel_injection)

    def inference(self, inputs: Input) -> Output:
        try:
            request = parse_request(inputs.get_as_bytes(), self.limits)
            seed = request.parameters.seed
            if seed is None and request.parameters.do_sample and self.ranks.world_size > 1:
                seed = shared_random_seed()
            with self._lock:
                results = self.generator.generate(request, seed=seed)
        except RequestError as error:
            log.info("rejected request (%d): %s", error.status, error.message)
            return error_output(error.status, error.message)
        except Exception as error:  # the worker must survive whatever one request does
            log.exception("generation failed")
            return error_output(HTTPStatus.INTERNAL_SERVER_ERROR, f"generation failed: {type(error).__name__}: {error}")
        return Output().add_property("content-type", "application/json").add_as_json(results)


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
