"""`llmp invoke`: prompt the stage's endpoint, the answer streamed token by token (or in one piece); or, with --url,
the same request to a server of SageMaker's container contract (`make local-serve`: POST /invocations on
http://127.0.0.1:8080), with no config and no AWS."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import ipaddress
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer
from botocore.exceptions import ClientError

from cli import aws as aws_module
from cli import streaming
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output


def _load_request_schema() -> ModuleType:
    """The handler's parameter table, read from its file: model_artifacts/ is not a package `llmp` installs."""
    path = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed" / "request_schema.py"
    spec = importlib.util.spec_from_file_location("llmp_request_schema", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their class's module up while building it
    spec.loader.exec_module(module)
    return module


REQUEST_SCHEMA = _load_request_schema()
# The request parameters `llmp invoke` takes as options (--name-with-dashes); their help and ranges are the table's.
EXPOSED_PARAMETERS = ("max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "seed", "stop")


def _help(name: str, more: str = "") -> str:
    row = REQUEST_SCHEMA.ROWS[name]
    bounds = row.bounds()
    return row.doc + (f"; {bounds}" if bounds else "") + more


def option_name(parameter: str) -> str:
    return "--" + parameter.replace("_", "-")


@handled
def invoke(
    prompt: Annotated[str, typer.Argument(help="the prompt; - reads it from stdin")],
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help=_help("max_new_tokens"))] = 64,
    temperature: Annotated[float | None, typer.Option(help=_help("temperature", " (default: greedy)"))] = None,
    top_p: Annotated[float | None, typer.Option(help=_help("top_p"))] = None,
    top_k: Annotated[int | None, typer.Option(help=_help("top_k"))] = None,
    repetition_penalty: Annotated[float | None, typer.Option(help=_help("repetition_penalty"))] = None,
    seed: Annotated[int | None, typer.Option(help=_help("seed"))] = None,
    stop: Annotated[list[str] | None, typer.Option(help=_help("stop", " (repeat the option for more)"))] = None,
    stream: Annotated[
        bool, typer.Option("--stream/--no-stream", help="print tokens as they come (InvokeEndpointWithResponseStream)")
    ] = True,
    component: Annotated[
        str | None, typer.Option("--component", help="the inference component to ask, on an endpoint that has them")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="a local server instead of the stage's endpoint: `make local-serve`'s http://127.0.0.1:8080 (plain "
            "http only on a loopback address; https anywhere)",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Send a prompt to the stage's endpoint in LMI's request schema and print the generated text."""
    out = Output(json_mode=json_output)
    text = sys.stdin.read() if prompt == "-" else prompt
    if not text.strip():
        raise CliError("the prompt is empty", Exit.USAGE)
    values = (max_new_tokens, temperature, top_p, top_k, repetition_penalty, seed, stop)
    options = dict(zip(EXPOSED_PARAMETERS, values, strict=True))
    parameters = request_parameters(options)
    if url is not None:
        if component:
            raise CliError("--component names an inference component of a SageMaker endpoint, not of --url", Exit.USAGE)
        _invoke_local(url, text, parameters, out, stream=stream)
        return
    _invoke_stage(config, stage, text, parameters, out, stream=stream, component=component)


def _invoke_local(url: str, text: str, parameters: dict[str, Any], out: Output, *, stream: bool) -> None:
    """The prompt to the server at `url` (no config, no AWS), and its answer."""
    endpoint = local_url(url)
    generated, details = _local_answer(endpoint, _request(text, parameters, stream=stream), out, stream=stream)
    data = {"endpoint": endpoint, "component": None, "streamed": stream, "generated_text": generated}
    data["details"] = details
    out.result(data, lambda console: None if stream else console.print(generated, markup=False, highlight=False))


def _invoke_stage(
    config: Path | None,
    stage: str | None,
    text: str,
    parameters: dict[str, Any],
    out: Output,
    *,
    stream: bool,
    component: str | None,
) -> None:
    """The prompt to the stage's endpoint (or one of its inference components), and its answer."""
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    endpoint = _answering_endpoint(aws, target)
    call = _invocation(endpoint, text, parameters, stream=stream, component=component)
    runtime = aws.client("sagemaker-runtime", target.region)
    with aws_errors(), _model_errors(endpoint):
        if stream:
            generated, details = _streamed_answer(runtime, call, out)
        else:
            generated, details = _one_answer(runtime.invoke_endpoint(**call)["Body"].read())
    data = {
        "endpoint": endpoint,
        "component": component,
        "streamed": stream,
        "generated_text": generated,
        "details": details,
    }
    out.result(data, lambda console: None if stream else console.print(generated, markup=False, highlight=False))


def _answering_endpoint(aws: Any, target: Any) -> str:
    """The stage's endpoint name, once it is known to answer."""
    endpoint = aws.outputs(target, "serving")["EndpointName"]
    with aws_errors():
        state = aws.client("sagemaker", target.region).describe_endpoint(EndpointName=endpoint)["EndpointStatus"]
    if state not in ("InService", "Updating"):  # an endpoint being updated still answers on its current variant
        raise CliError(
            f"endpoint {endpoint} is {state}, not InService: see `llmp status --stage {target.name}`", Exit.AWS_STATE
        )
    return endpoint


def _request(text: str, parameters: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """LMI's request: the prompt, its parameters, and `stream` for a streamed answer."""
    request: dict[str, Any] = {"inputs": text, "parameters": parameters}
    if stream:
        request["stream"] = True
    return request


def _invocation(
    endpoint: str, text: str, parameters: dict[str, Any], *, stream: bool, component: str | None
) -> dict[str, Any]:
    """The InvokeEndpoint(WithResponseStream) arguments: LMI's request, for the component if one is named."""
    request = _request(text, parameters, stream=stream)
    call: dict[str, Any] = {"EndpointName": endpoint, "ContentType": "application/json", "Body": json.dumps(request)}
    if component:
        call["InferenceComponentName"] = component
    return call


LOOPBACK_NAMES = ("localhost",)
# A local model's first answer can take minutes on a CPU (local/serve.py serves on whatever the machine has).
LOCAL_TIMEOUT_S = 600


def local_url(url: str) -> str:
    """The server's base URL; plain http only to this machine (a prompt and its answer cross the network in clear,
    and local/serve.py has no authentication), https to anywhere."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise CliError(f"--url {url}: give http://127.0.0.1:PORT (make local-serve) or an https:// URL", Exit.USAGE)
    if parsed.scheme == "http" and not _is_loopback(parsed.hostname):
        raise CliError(
            f"--url {url}: plain http is only for this machine (127.0.0.1, ::1, localhost), where make local-serve "
            f"listens; use https://{parsed.netloc}{parsed.path} for another host",
            Exit.USAGE,
        )
    return url.rstrip("/")


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_answer(url: str, request: dict[str, Any], out: Output, *, stream: bool) -> tuple[str, Any]:
    """POST /invocations on the server at `url`, as SageMaker does to the container: the answer streamed (the same
    jsonlines as through InvokeEndpointWithResponseStream, in HTTP chunks) or in one piece."""
    call = urllib.request.Request(
        f"{url}/invocations",
        data=json.dumps(request).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(call, timeout=LOCAL_TIMEOUT_S) as response:
            if not stream:
                return _one_answer(response.read())
            parts = ({"PayloadPart": {"Bytes": chunk}} for chunk in iter(lambda: response.read1(65536), b""))
            return _print_tokens(parts, out)
    except urllib.error.HTTPError as error:
        message = " ".join(error.read().decode(errors="replace").split())
        raise CliError(f"{url} answered {error.code}: {message[:500]}", Exit.FAILED) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise CliError(
            f"nothing answers at {url} ({reason}): start the local server with `make local-serve` (PORT=... for "
            "another port), or check --url",
            Exit.UNAVAILABLE,
        ) from None


def _print_tokens(events: Any, out: Output) -> tuple[str, Any]:
    """The generated text and its details, printing each token as it comes (not in JSON mode)."""
    answer = streaming.StreamedAnswer()
    for piece in streaming.tokens(events, answer):
        if not out.json_mode:
            sys.stdout.write(piece)
            sys.stdout.flush()
    if not out.json_mode:
        sys.stdout.write("\n")
    return answer.text, answer.final.get("details")


def _streamed_answer(runtime: Any, call: dict[str, Any], out: Output) -> tuple[str, Any]:
    """The generated text and its details, printing each token as it comes (not in JSON mode)."""
    return _print_tokens(runtime.invoke_endpoint_with_response_stream(**call)["Body"], out)


def request_parameters(options: dict[str, Any]) -> dict[str, Any]:
    """The request's `parameters` from the options given, each checked against the handler's range for it, so that
    a value the endpoint would refuse fails here, naming the option. A sampling option turns sampling on."""
    given = {name: value for name, value in options.items() if value is not None}
    for name, value in given.items():
        _check_option(REQUEST_SCHEMA.ROWS[name], value)
    parameters: dict[str, Any] = {**given, "details": True}
    if any(name in REQUEST_SCHEMA.SAMPLING_PARAMETERS for name in given):
        parameters["do_sample"] = True
    return parameters


def _check_option(row: Any, value: Any) -> None:
    if row.kind != "strings":
        if not row.accepts(value):
            raise CliError(f"{option_name(row.name)} {value}: give a {row.name} {row.bounds()}", Exit.USAGE)
        return
    if "" in value:
        raise CliError(f"{option_name(row.name)} '': every stop string needs text", Exit.USAGE)
    if len(value) > REQUEST_SCHEMA.MAX_STOP_SEQUENCES:
        raise CliError(
            f"{option_name(row.name)} given {len(value)} times: at most {REQUEST_SCHEMA.MAX_STOP_SEQUENCES}", Exit.USAGE
        )


@contextlib.contextmanager
def _model_errors(endpoint: str) -> Iterator[None]:
    """The container's own refusal (ModelError: its HTTP status and message) as the command's failure."""
    try:
        yield
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ModelError":
            raise
        status = error.response.get("OriginalStatusCode", "?")
        message = error.response.get("OriginalMessage") or error.response["Error"].get("Message", "")
        raise CliError(f"endpoint {endpoint} answered {status}: {message[:500]}", Exit.FAILED) from None


def _one_answer(body: bytes) -> tuple[str, Any]:
    """LMI's answer to one prompt string: one object with generated_text (a list of one, from some handlers)."""
    try:
        answer = json.loads(body)
    except ValueError:
        raise CliError(f"the endpoint answered something other than JSON: {body[:200]!r}", Exit.FAILED) from None
    if isinstance(answer, list) and len(answer) == 1:
        answer = answer[0]
    if not isinstance(answer, dict) or not isinstance(answer.get("generated_text"), str):
        raise CliError(f"the endpoint's answer has no generated_text: {str(answer)[:200]}", Exit.FAILED)
    return answer["generated_text"], answer.get("details")
