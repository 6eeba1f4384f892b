"""Serve a DJL handler folder on localhost with SageMaker's inference contract: GET /ping, POST /invocations.

    python -m local.serve --handler model_artifacts/deepspeed                          # a fresh tiny GPT-J
    python -m local.serve --handler model_artifacts/deepspeed --model /path/to/hf-model
    python -m local.serve --handler model_artifacts/deepspeed --model s3://bucket/prefix/ --port 8080
    curl -s localhost:8080/invocations -H 'Content-Type: application/json' -d '{"inputs": "the model"}'

What it does, in the order DJL Serving does it in the container:
1. properties: the folder's serving.properties over `OPTION_<KEY>` environment variables (the file wins, as in DJL),
   with explicit overrides (--property / properties=) over both;
2. imports the folder's entry point (option.entryPoint, default model.py) with the folder on sys.path and
   local/djl_python standing in for the container's djl_python;
3. calls the handler once with an empty Input whose properties are the option.* values (prefix stripped) plus
   model_dir, device_id and tensor_parallel_degree: the model loads here, before the server answers anything;
4. serves: /ping answers 200 once that call succeeded; each /invocations body becomes Input content "data" with the
   HTTP headers as properties, and the handler's Output gives status code, content-type and body. One request is
   handled at a time, as one DJL worker does.
The model comes from --model: a local HF folder (option.weights_dir), an S3 prefix (env WEIGHTS_S3_URI, so the
handler downloads it exactly as on an endpoint), or nothing, which builds a tiny random GPT-J (local/tiny.py).
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
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger("local.serve")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HANDLER_DIR = REPO_ROOT / "model_artifacts" / "deepspeed"
WEIGHTS_S3_URI_ENV = "WEIGHTS_S3_URI"  # read by model_artifacts/deepspeed/lmi_config.py
# SageMaker real-time endpoints refuse invocation bodies above 6 MB; so does this server.
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
_module_counter = itertools.count()


class HandlerStartupError(RuntimeError):
    """The handler's start-up call failed, so the endpoint never became healthy."""


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
        self.healthy = False
        self._handle = None
        self._module_name: str | None = None
        self._added_to_path = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

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
        environment: dict[str, str | None] = {}
        if self.model_location is not None:
            if self.model_location.startswith("s3://"):
                environment[WEIGHTS_S3_URI_ENV] = self.model_location
            else:
                overrides["option.weights_dir"] = str(Path(self.model_location).resolve())
                environment[WEIGHTS_S3_URI_ENV] = None  # the explicit folder wins over a stray variable
        properties = resolve_properties(self.handler_dir, overrides)
        if not cuda_devices and "option.dtype" not in properties:
            log.info("no GPU: serving in fp32 (set option.dtype to override)")
            properties["option.dtype"] = "fp32"
        self.properties = handler_properties(properties, self.handler_dir, cuda_devices=cuda_devices)
        module = self._import_entry_point(properties)
        self._handle = getattr(module, properties.get("option.handler", "handle"))

        djl_python = _djl_python()
        startup = djl_python.Input()
        startup.properties = dict(self.properties)
        log.info("start-up call: loading the model (%s)", self.model_location or self.properties.get("weights_dir"))
        with _patched_environ(environment):
            result = self._handle(startup)
        if result is not None and result.code >= 300:
            raise HandlerStartupError(f"start-up call answered {result.code}: {_body(result).decode(errors='replace')}")
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
        if self._module_name is not None:
            sys.modules.pop(self._module_name, None)
            self._module_name = None
        if self._added_to_path:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(self.handler_dir))
            self._added_to_path = False
        self.healthy = False

    def invoke(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """One invocation through the handler, as DJL would make it: (status, headers, body)."""
        djl_python = _djl_python()
        request = djl_python.Input()
        request.properties = {**self.properties, **dict(headers)}
        request.content.add(key="data", value=body)
        with self._lock:
            try:
                output = self._handle(request)
            except Exception as error:  # DJL's Python engine answers an escaped exception the same way
                log.exception("handler raised")
                output = djl_python.Output().error(str(error))
        if output is None:
            return HTTPStatus.NO_CONTENT, {}, b""
        response_headers = {str(key).lower(): str(value) for key, value in output.properties.items()}
        return int(output.code), response_headers, _body(output)

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
        status, headers, payload = self.owner.invoke(body, dict(self.headers.items()))
        self.send_response(status)
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


def _body(output: Any) -> bytes:
    if output.content.is_empty():
        return b""
    return bytes(output.content.value_at(0))


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
