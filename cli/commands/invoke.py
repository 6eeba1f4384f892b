"""`llmp invoke`: prompt the stage's endpoint, the answer streamed token by token (or in one piece)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from botocore.exceptions import ClientError

from cli import aws as aws_module
from cli import streaming
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output


@handled
def invoke(
    prompt: Annotated[str, typer.Argument(help="the prompt; - reads it from stdin")],
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", min=1, help="at most this many")] = 64,
    temperature: Annotated[
        float | None, typer.Option(help="sample at this temperature, above 0 (default: greedy)")
    ] = None,
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
    if temperature is not None and not temperature > 0:
        raise CliError(f"--temperature {temperature}: give a temperature above 0, or none for greedy", Exit.USAGE)
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    endpoint = aws.outputs(target, "serving")["EndpointName"]
    with aws_errors():
        state = aws.client("sagemaker", target.region).describe_endpoint(EndpointName=endpoint)["EndpointStatus"]
    if state not in ("InService", "Updating"):  # an endpoint being updated still answers on its current variant
        raise CliError(
            f"endpoint {endpoint} is {state}, not InService: see `llmp status --stage {target.name}`", Exit.AWS_STATE
        )
    parameters: dict[str, Any] = {"max_new_tokens": max_new_tokens, "details": True}
    if temperature is not None:
        parameters.update(do_sample=True, temperature=temperature)
    request: dict[str, Any] = {"inputs": text, "parameters": parameters}
    if stream:
        request["stream"] = True
    call: dict[str, Any] = {"EndpointName": endpoint, "ContentType": "application/json", "Body": json.dumps(request)}
    if component:
        call["InferenceComponentName"] = component
    runtime = aws.client("sagemaker-runtime", target.region)
    with aws_errors(), _model_errors(endpoint):
        if stream:
            answer = streaming.StreamedAnswer()
            response = runtime.invoke_endpoint_with_response_stream(**call)
            for piece in streaming.tokens(response["Body"], answer):
                if not out.json_mode:
                    sys.stdout.write(piece)
                    sys.stdout.flush()
            generated, details = answer.text, answer.final.get("details")
            if not out.json_mode:
                sys.stdout.write("\n")
        else:
            response = runtime.invoke_endpoint(**call)
            generated, details = _one_answer(response["Body"].read())
    data = {
        "endpoint": endpoint,
        "component": component,
        "streamed": stream,
        "generated_text": generated,
        "details": details,
    }
    out.result(data, lambda console: None if stream else console.print(generated, markup=False, highlight=False))


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
