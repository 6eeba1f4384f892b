"""`llmp invoke`: prompt the stage's endpoint, the answer streamed token by token (or in one piece)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
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


def _invocation(
    endpoint: str, text: str, parameters: dict[str, Any], *, stream: bool, component: str | None
) -> dict[str, Any]:
    """The InvokeEndpoint(WithResponseStream) arguments: LMI's request, for the component if one is named."""
    request: dict[str, Any] = {"inputs": text, "parameters": parameters}
    if stream:
        request["stream"] = True
    call: dict[str, Any] = {"EndpointName": endpoint, "ContentType": "application/json", "Body": json.dumps(request)}
    if component:
        call["InferenceComponentName"] = component
    return call


def _streamed_answer(runtime: Any, call: dict[str, Any], out: Output) -> tuple[str, Any]:
    """The generated text and its details, printing each token as it comes (not in JSON mode)."""
    answer = streaming.StreamedAnswer()
    response = runtime.invoke_endpoint_with_response_stream(**call)
    for piece in streaming.tokens(response["Body"], answer):
        if not out.json_mode:
            sys.stdout.write(piece)
            sys.stdout.flush()
    if not out.json_mode:
        sys.stdout.write("\n")
    return answer.text, answer.final.get("details")


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
