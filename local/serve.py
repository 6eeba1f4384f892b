"""Serve a DJL handler folder on localhost with SageMaker's inference contract: GET /ping, POST /invocations.

    python -m local.serve --handler model_artifacts/deepspeed                          # a fresh tiny GPT-J
    python -m local.serve --handler model_artifacts/deepspeed --model /path/to/hf-model
    python -m local.serve --handler model_artifacts/deepspeed --model s3://bucket/prefix/ --port 8080  # as delivered
    curl -s localhost:8080/invocations -H 'Content-Type: application/json' -d '{"inputs": "the model"}'

What it does, in the order DJL Serving does it in the container:
1. properties: the folder's serving.properties over `OPTION_<KEY>` environment variables (the file wins, as in DJL),
   with explicit overrides (--property / properties=) over both;
2. imports the folder's entry point (option.entryPoint, default model.py) with the folder on sys.path and
   local/djl_python standing in for the container's djl_python;
3. calls the handler once with an empty Input whose properties are the option.* values (prefix stripped) plus
   model_dir, device_id and tensor_parallel_degree: the model loads here, before the server answers anything.
   model_dir is the model folder, as on an endpoint, where it is /opt/ml/model holding what SageMaker delivered;
4. serves: /ping answers 200 once that call succeeded; each /invocations request becomes an Input as DJL builds it
   (body as content "data", query parameters as content, headers as properties) and goes to one worker, which runs
   one handler call at a time. With `batch_size` > 1 in serving.properties (or SERVING_BATCH_SIZE), the worker
   gathers up to that many queued requests, waiting at most `max_batch_delay` ms (default 100), into one batch Input
   and splits the handler's answer back into one response per request, exactly as DJL 0.27.0 does
   (local/djl_frontend.py says where each rule comes from). The handler's Output gives status, headers and body.
The model comes from --model: a local HF folder, served as if SageMaker had delivered it (model_dir); an S3 prefix,
which this server first copies into a temporary folder the way SageMaker copies a Model's S3Prefix ModelDataSource
(each key less the prefix is the file's path; the handler downloads nothing, as on an endpoint); or nothing, which
builds a tiny random GPT-J (local/tiny.py).
Bound to 127.0.0.1; any other address needs --allow-non-loopback. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import ipaddress
import itertools
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

from local import djl_frontend, djl_streaming
from local.djl_frontend import handler_properties, read_properties_file, resolve_properties  # noqa: F401 (public here too)

log = logging.getLogger("local.serve")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HANDLER_DIR = REPO_ROOT / "model_artifacts" / "deepspeed"
WEIGHTS_S3_URI_ENV = "WEIGHTS_S3_URI"  # refused by model_artifacts/deepspeed/lmi_config.py: unset for the start-up
# SageMaker real-time endpoints refuse invocation bodies above 6 MB; so does this server.
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
_module_counter = itertools.count()


class HandlerStartupError(RuntimeError):
    """The handler's start-up call failed, so the endpoint never became healthy."""


class LocalEndpoint:
    """A handler folder behind a local HTTP server; use as a context manager.

    >>> with LocalEndpoint("model_artifacts/deepspeed", "/tmp/tiny-gptj", port=0) as endpoint:
    ...     urllib.request.urlopen(endpoint.url + "/ping")
    """

    def __init__(
        self,
        handler_dir: str | Path,
        model_location: str | Path | None,
        *,
        properties: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 8080,
        allow_non_loopback: bool = False,
    ) -> None:
        self.handler_dir = Path(handler_dir).resolve()
        self.model_location = None if model_location is None else str(model_location)
        self.overrides = dict(properties or {})
        self.host = host
        self.port = port
        if not allow_non_loopback and not _is_loopback(host):
            raise ValueError(
                f"host={host!r} is not a loopback address; this server has no authentication, so it binds to "
                "127.0.0.1 (or ::1, localhost) unless you pass allow_non_loopback=True / --allow-non-loopback"
            )
        self.properties: dict[str, Any] = {}
        self.engine_properties: dict[str, Any] = {}  # what DJL's Python engine adds to every request's properties
        self.worker: djl_frontend.BatchAggregator | None = None
        self.healthy = False
        self._handle = None
        self._module_name: str | None = None
        self._added_to_path = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._delivered: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __enter__(self) -> LocalEndpoint:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()  # undo the import and the sys.path entry of a failed start
            raise

    def _start(self) -> None:
        import torch

        cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        overrides = dict(self.overrides)
        environment: dict[str, str | None] = {WEIGHTS_S3_URI_ENV: None}  # a stray one would be refused
        model_dir = self.handler_dir  # without --model: weights_dir from the properties, or none
        if self.model_location is not None:
            if self.model_location.startswith("s3://"):
                self._delivered = tempfile.TemporaryDirectory(prefix="delivered-")
                model_dir = deliver(self.model_location, Path(self._delivered.name))
            else:
                model_dir = Path(self.model_location).resolve()
        properties = resolve_properties(self.handler_dir, overrides)
        if not cuda_devices and "option.dtype" not in properties:
            log.info("no GPU: serving in fp32 (set option.dtype to override)")
            properties["option.dtype"] = "fp32"
        self.properties = handler_properties(properties, model_dir, cuda_devices=cuda_devices)
        module = self._import_entry_point(properties)
        self._handle = getattr(module, properties.get("option.handler", "handle"))

        djl_python = _djl_python()
        startup = djl_python.Input()
        startup.properties = dict(self.properties)
        log.info("start-up call: loading the model (%s)", self.properties.get("weights_dir") or model_dir)
        with _patched_environ(environment):
            result = self._handle(startup)
        if result is not None and result.code >= 300:
            raise HandlerStartupError(
                f"start-up call answered {result.code}: {djl_frontend.response_body(result).decode(errors='replace')}"
            )
        batch_size, max_batch_delay = djl_frontend.batching(properties, os.environ)
        self.engine_properties = {
            key: self.properties[key]
            for key in ("tensor_parallel_degree", "device_id", "model_dir")
            if key in self.properties
        }
        self.worker = djl_frontend.BatchAggregator(
            self._run_batch, batch_size=batch_size, max_batch_delay_ms=max_batch_delay
        )
        self.worker.start()
        if batch_size > 1:
            log.info(
                "dynamic batching: up to %d requests per handler call, %d ms max_batch_delay",
                batch_size,
                max_batch_delay,
            )
        self.healthy = True

        endpoint = self

        class Handler(_SageMakerRequestHandler):
            owner = endpoint

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        log.info("serving %s on %s (POST /invocations, GET /ping)", self.handler_dir, self.url)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
        if self._module_name is not None:
            sys.modules.pop(self._module_name, None)
            self._module_name = None
        if self._added_to_path:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(self.handler_dir))
            self._added_to_path = False
        if self._delivered is not None:
            self._delivered.cleanup()
            self._delivered = None
        self.healthy = False

    def invoke(
        self, body: bytes, headers: Mapping[str, str], query: Mapping[str, list[str]] | None = None
    ) -> tuple[int, dict[str, str], bytes] | djl_streaming.StreamedResponse:
        """One invocation through the worker, as DJL would make it (possibly batched with others that are queued):
        (status, headers, body), or a StreamedResponse for a streamed answer."""
        if self.worker is None:
            raise RuntimeError("the endpoint is not started")
        request = djl_frontend.request_input(_djl_python(), body, headers, query or {})
        return self.worker.submit(request)

    def _run_batch(self, requests: list[Any]) -> list[tuple[int, dict[str, str], bytes]]:
        """One handler call for 1..batch_size requests, as DJL's PyPredictor makes it; one response per request."""
        djl_python = _djl_python()
        if len(requests) == 1:
            return [_response(djl_frontend.call_handler(djl_python, self._handle, requests[0], self.engine_properties))]
        batch = djl_frontend.batch_input(djl_python, requests)
        output = djl_frontend.call_handler(djl_python, self._handle, batch, self.engine_properties)
        try:
            return [_response(answer) for answer in djl_frontend.split_batch_output(djl_python, output, len(requests))]
        except djl_frontend.BatchOutputError as error:
            log.error("the handler's answer to a batch of %d cannot be split: %s", len(requests), error)
            return [djl_frontend.error_response(HTTPStatus.BAD_REQUEST, error)] * len(requests)

    def _import_entry_point(self, properties: Mapping[str, str]) -> ModuleType:
        entry_point = properties.get("option.entryPoint", properties.get("option.entrypoint", "model.py"))
        path = self.handler_dir / entry_point
        if not entry_point.endswith(".py") or not path.is_file():
            raise HandlerStartupError(
                f"{self.handler_dir} has no handler file {entry_point!r} (option.entryPoint); a built-in LMI handler "
                "such as djl_python.lmi_vllm.vllm_async_service exists only inside the container"
            )
        _ensure_djl_python_importable()
        if str(self.handler_dir) not in sys.path:
            sys.path.insert(0, str(self.handler_dir))
            self._added_to_path = True
        # A fresh module per endpoint: the handler keeps its model in a module-level singleton.
        self._module_name = f"_local_djl_handler_{next(_module_counter)}"
        spec = importlib.util.spec_from_file_location(self._module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[self._module_name] = module
        spec.loader.exec_module(module)
        return module


class _SageMakerRequestHandler(BaseHTTPRequestHandler):
    owner: LocalEndpoint
    server_version = "local-djl-serving"

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/ping":
            self._reply_json(HTTPStatus.NOT_FOUND, {"error": f"no route GET {self.path}; try GET /ping"})
        elif self.owner.healthy:
            self._reply_json(HTTPStatus.OK, {"status": "Healthy"})
        else:
            self._reply_json(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "Unhealthy"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/invocations":
            self._reply_json(HTTPStatus.NOT_FOUND, {"error": f"no route POST {self.path}; try POST /invocations"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_PAYLOAD_BYTES:
            self._reply_json(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                {"error": f"request body has {length} bytes; SageMaker accepts at most {MAX_PAYLOAD_BYTES}"},
            )
            return
        body = self.rfile.read(length) if length else b""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
        try:
            answer = self.owner.invoke(body, dict(self.headers.items()), query)
        except Exception as error:  # what DJL answers when a batch fails outside the handler
            log.exception("invocation failed")
            answer = djl_frontend.error_response(HTTPStatus.INTERNAL_SERVER_ERROR, error)
        if isinstance(answer, djl_streaming.StreamedResponse):
            djl_streaming.send(self, answer)
            return
        status, headers, payload = answer
        self.send_response(status)
        # DJL sends every property of the Output as a header.
        for key, value in headers.items():
            if key not in ("content-type", "content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Type", headers.get("content-type", "application/octet-stream"))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _reply_json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


def _response(output: Any) -> tuple[int, dict[str, str], bytes] | djl_streaming.StreamedResponse:
    if djl_streaming.is_streamed(output):
        return djl_streaming.StreamedResponse(output)
    headers = {str(key).lower(): str(value) for key, value in output.properties.items()}
    return int(output.code), headers, djl_frontend.response_body(output)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ensure_djl_python_importable() -> None:
    if importlib.util.find_spec("djl_python") is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))


def deliver(s3_uri: str, folder: Path) -> Path:
    """Copy every object under the S3 prefix into `folder` as SageMaker delivers an S3Prefix ModelDataSource with
    CompressionType None (API S3ModelDataSource): each key less the prefix is the file's path, '/' making folders;
    a name SageMaker refuses (empty, '.', '..', over 255 bytes) or a file that is also a folder fails the copy."""
    import boto3

    bucket, _, prefix = s3_uri.removeprefix("s3://").partition("/")
    if not prefix.endswith("/") and prefix:
        raise ValueError(f"{s3_uri!r} is not an S3 prefix: a ModelDataSource S3Prefix ends with '/'")
    client = boto3.client("s3")
    copied = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) :]
            parts = relative.split("/")
            if any(part in ("", ".", "..") or len(part.encode()) > 255 for part in parts):
                raise ValueError(f"s3://{bucket}/{item['Key']}: SageMaker refuses the file name {relative!r}")
            target = folder.joinpath(*parts)
            if target.is_dir() or any(parent.is_file() for parent in target.parents):
                raise ValueError(f"s3://{bucket}/{item['Key']}: a file and a folder share the name {relative!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, item["Key"], str(target))
            copied += 1
    log.info("delivered %d files from %s to %s, as SageMaker would to /opt/ml/model", copied, s3_uri, folder)
    return folder


def _djl_python() -> ModuleType:
    _ensure_djl_python_importable()
    import djl_python

    return djl_python


@contextlib.contextmanager
def _patched_environ(changes: Mapping[str, str | None]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--handler", type=Path, default=DEFAULT_HANDLER_DIR, help="handler folder (default: model_artifacts/deepspeed)"
    )
    parser.add_argument(
        "--model", help="HF model folder or s3://bucket/prefix/ (default: build a tiny random model and serve it)"
    )
    parser.add_argument("--tiny-arch", default="gptj", help="architecture of the tiny model when --model is absent")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: 8080; 0 picks a free one)")
    parser.add_argument(
        "--allow-non-loopback", action="store_true", help="allow binding a non-loopback address (no authentication!)"
    )
    parser.add_argument(
        "--property",
        "-p",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="serving.properties override, e.g. -p option.max_new_tokens=64 (repeatable)",
    )
    args = parser.parse_args(argv)
    for item in args.property:
        if "=" not in item:
            parser.error(f"--property {item!r} is not KEY=VALUE, e.g. option.max_new_tokens=64")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # quiet DeepSpeed's accelerator guess
    overrides = dict(item.split("=", 1) for item in args.property)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.ExitStack() as cleanup:
        model = args.model
        if model is None:
            from local.tiny import save_tiny_model

            folder = cleanup.enter_context(tempfile.TemporaryDirectory(prefix=f"tiny-{args.tiny_arch}-"))
            model = str(save_tiny_model(folder, arch=args.tiny_arch))
            log.info("no --model: built a tiny random %s in %s (removed on exit)", args.tiny_arch, model)
        endpoint = cleanup.enter_context(
            LocalEndpoint(
                args.handler,
                model,
                properties=overrides,
                host=args.host,
                port=args.port,
                allow_non_loopback=args.allow_non_loopback,
            )
        )
        log.info(
            "ready: curl -s %s/invocations -H 'Content-Type: application/json' -d '{\"inputs\": \"the model\"}'",
            endpoint.url,
        )
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    log.info("stopped")


if __name__ == "__main__":
    main()
