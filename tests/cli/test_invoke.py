"""`llmp invoke`: moto answers InvokeEndpoint; InvokeEndpointWithResponseStream, which moto lacks, is answered byte
for byte as SageMaker sends it (tests/scripts/sagemaker_runtime_standin.py: event-stream framing, parts cut at
arbitrary bytes), and parsed by botocore's own code."""

from __future__ import annotations

import json
import math

import pytest
import requests
import typer.main

from cli import aws as aws_module
from cli.app import app as llmp
from cli.commands import invoke as invoke_command
from local.serve import LocalEndpoint
from model_artifacts.deepspeed import request_schema
from tests.cli.conftest import ACCOUNT, REGION, client
from tests.scripts.sagemaker_runtime_standin import SageMakerRuntime, cut, stream_error

LINES = [
    {"token": {"id": [6342], "text": " Paris"}},
    {"token": {"id": [13], "text": "."}},
    {"token": {"id": [198], "text": " Olé"}, "generated_text": " Paris. Olé", "details": {"generated_tokens": 3}},
]
STREAM = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in LINES).encode()


@pytest.fixture
def runtime(moto, monkeypatch):
    """The CLI's sagemaker-runtime client, answered by the stand-in; the other services stay on moto."""
    aws = aws_module.Aws()
    monkeypatch.setattr(aws_module, "connect", lambda: aws)
    runtime_client = client("sagemaker-runtime")
    aws.clients["sagemaker-runtime", REGION] = runtime_client
    return SageMakerRuntime(runtime_client)


@pytest.mark.parametrize("part_size", [1, 7, 100_000])
def test_invoke_prints_the_streamed_tokens_however_sagemaker_cuts_the_parts(cli, deployed, runtime, part_size):
    runtime.stream(cut(STREAM, part_size))

    result = cli("invoke", "The capital of France is", "-n", "3")

    assert result.exit_code == 0, result.output
    assert result.stdout == " Paris. Olé\n"
    ((operation, request),) = runtime.requests
    assert operation == "InvokeEndpointWithResponseStream"
    assert request == {
        "inputs": "The capital of France is",
        "parameters": {"max_new_tokens": 3, "details": True},
        "stream": True,
    }


def test_invoke_stream_json_has_the_text_and_the_last_line_details(cli, deployed, runtime):
    runtime.stream(cut(STREAM, 5))

    result = cli("invoke", "The capital of France is", "--temperature", "0.7", "--json")

    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["generated_text"] == " Paris. Olé"
    assert answer["details"] == {"generated_tokens": 3}
    assert answer["streamed"] is True
    assert runtime.requests[0][1]["parameters"] == {
        "max_new_tokens": 64,
        "details": True,
        "do_sample": True,
        "temperature": 0.7,
    }


@pytest.mark.parametrize(
    ("parts", "end", "message"),
    [
        (
            [STREAM[:40]],
            stream_error("ModelStreamError", "CUDA out of memory", "ModelStreamError"),
            "the stream broke off",
        ),
        (
            [b'{"code": 500, "message": "generation failed", "error": "RuntimeError"}\n'],
            b"",
            "the endpoint failed while answering (500): generation failed",
        ),
        ([b"Traceback (most recent call last)\n"], b"", "the endpoint streamed a line that is not JSON"),
    ],
)
def test_invoke_a_stream_that_breaks_off_is_a_failure(cli, deployed, runtime, parts, end, message):
    runtime.stream(parts, end=end)

    result = cli("invoke", "hi")

    assert result.exit_code == 1, result.output
    assert message in result.stderr


def test_invoke_the_container_s_refusal_is_one_line_with_its_status(cli, deployed, runtime):
    runtime.model_error(
        422, b'{"error": "temperature must be > 0", "code": 422}', operation="InvokeEndpointWithResponseStream"
    )

    result = cli("invoke", "hi")

    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        'llmp: endpoint llm-platform-dev answered 422: {"error": "temperature must be > 0", "code": 422}'
    )


def test_invoke_without_streaming_through_moto(cli, deployed):
    answer = {"generated_text": " Paris.", "details": {"generated_tokens": 2}}
    requests.post(
        "http://motoapi.amazonaws.com/moto-api/static/sagemaker/endpoint-results",
        json={
            "account_id": ACCOUNT,
            "region": REGION,
            "results": [{"Body": json.dumps(answer), "ContentType": "application/json"}],
        },
        timeout=5,
    )

    result = cli("invoke", "-", "--no-stream", input="The capital of France is")

    assert result.exit_code == 0, result.output
    assert result.stdout == " Paris.\n"


@pytest.mark.parametrize(
    ("args", "message"), [(["  "], "the prompt is empty"), (["hi", "--temperature", "0"], "give a temperature above 0")]
)
def test_invoke_refuses_an_empty_prompt_and_a_zero_temperature(cli, deployed, args, message):
    result = cli("invoke", *args)

    assert result.exit_code == 2, result.output
    assert message in result.stderr


# --- the request options come from the handler's parameter table (model_artifacts/deepspeed/request_schema.py) ----


def _beyond(row, bound, direction: float):
    """The first value past an inclusive bound: the next integer, or the next float."""
    return bound + (1 if direction > 0 else -1) if row.kind == "integer" else math.nextafter(bound, direction)


def _outside(row) -> list[str]:
    """The first values beyond each end of the row's range, as typed on a command line."""
    values = []
    if row.minimum is not None:
        values.append(row.minimum if row.exclusive_minimum else _beyond(row, row.minimum, -math.inf))
    if row.maximum is not None:
        values.append(row.maximum if row.exclusive_maximum else _beyond(row, row.maximum, math.inf))
    return [str(value) for value in values]


OUT_OF_RANGE = [
    (name, value) for name in invoke_command.EXPOSED_PARAMETERS for value in _outside(request_schema.ROWS[name])
]


@pytest.mark.parametrize(("name", "value"), OUT_OF_RANGE)
def test_invoke_refuses_a_value_outside_the_handler_s_range_naming_the_option(cli, deployed, name, value):
    row = request_schema.ROWS[name]

    result = cli("invoke", "hi", invoke_command.option_name(name), value)

    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"{invoke_command.option_name(name)} " in line
    assert f"give a {name} {row.bounds()}" in line


def test_invoke_refuses_an_empty_stop_string(cli, deployed):
    result = cli("invoke", "hi", "--stop", "")

    assert result.exit_code == 2, result.output
    assert "--stop '': every stop string needs text" in result.stderr


def test_invoke_options_take_their_help_from_the_handler_s_table():
    command = typer.main.get_command(llmp).commands["invoke"]
    helps = {param.name: param.help for param in command.params}
    for name in invoke_command.EXPOSED_PARAMETERS:
        row = request_schema.ROWS[name]
        assert helps[name].startswith(f"{row.doc}; {row.bounds()}"), name


def test_invoke_sends_the_sampling_options_and_turns_sampling_on(cli, deployed, runtime):
    runtime.stream(cut(STREAM, 100_000))

    result = cli(
        "invoke", "hi", "--top-p", "0.9", "--top-k", "40", "--repetition-penalty", "1.1", "--seed", "7",
        "--stop", "\n\n", "--stop", "END",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert runtime.requests[0][1]["parameters"] == {
        "max_new_tokens": 64,
        "details": True,
        "do_sample": True,
        "top_p": 0.9,
        "top_k": 40,
        "repetition_penalty": 1.1,
        "seed": 7,
        "stop": ["\n\n", "END"],
    }


# --- --url: a server of SageMaker's container contract (make local-serve), no config and no AWS ---------------------

# A handler with LMI's answer shapes and no model, served by local/serve.py as `make local-serve` serves the real one.
STAND_IN_HANDLER = """
import json

from djl_python import Output

TOKENS = [" Paris", ".", " Olé"]


def handle(inputs):
    if inputs.is_empty():
        return None
    request = inputs.get_as_json()
    details = {"parameters": request.get("parameters", {}), "inputs": request["inputs"], "stream": "stream" in request}
    if not request.get("stream"):
        return Output().add_as_json({"generated_text": "".join(TOKENS), "details": details})

    def lines():
        for at, text in enumerate(TOKENS):
            line = {"token": {"id": [at], "text": text}}
            if at == len(TOKENS) - 1:
                line.update(generated_text="".join(TOKENS), details=details)
            yield json.dumps(line, ensure_ascii=False) + "\\n"

    return Output().add_property("content-type", "application/jsonlines").add_stream_content(lines(), None)
"""


@pytest.fixture
def local_serve(tmp_path, credentials):
    """local/serve.py on a free loopback port, serving the stand-in handler."""
    handler, model = tmp_path / "handler", tmp_path / "model"
    handler.mkdir()
    model.mkdir()
    (handler / "model.py").write_text(STAND_IN_HANDLER)
    with LocalEndpoint(handler, model, port=0) as endpoint:
        yield endpoint.url


@pytest.mark.parametrize("stream", [True, False])
def test_invoke_url_asks_the_local_server_in_lmi_s_schema(cli, local_serve, stream):
    result = cli("invoke", "The capital of France is", "-n", "3", "--url", local_serve, "--json",
                 *([] if stream else ["--no-stream"]))  # fmt: skip

    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["endpoint"] == local_serve
    assert answer["generated_text"] == " Paris. Olé"
    assert answer["details"] == {
        "parameters": {"max_new_tokens": 3, "details": True},
        "inputs": "The capital of France is",
        "stream": stream,
    }


def test_invoke_url_prints_the_streamed_tokens(cli, local_serve):
    result = cli("invoke", "hi", "--url", local_serve + "/")

    assert result.exit_code == 0, result.output
    assert result.stdout == " Paris. Olé\n"


@pytest.mark.parametrize("url", ["http://10.0.0.8:8080", "http://example.com", "http://127.0.0.1.example.com"])
def test_invoke_url_refuses_plain_http_to_another_machine(cli, credentials, url):
    result = cli("invoke", "hi", "--url", url)

    assert result.exit_code == 2, result.output
    assert "plain http is only for this machine (127.0.0.1, ::1, localhost)" in result.stderr
    assert "use https://" in result.stderr


@pytest.mark.parametrize("url", ["http://localhost:9", "http://[::1]:9", "https://10.0.0.8:9"])
def test_invoke_url_allows_loopback_http_and_any_https(url):
    assert invoke_command.local_url(url) == url


def test_invoke_url_with_nothing_listening_says_to_start_make_local_serve(cli, credentials):
    result = cli("invoke", "hi", "--url", "http://127.0.0.1:9")

    assert result.exit_code == 5, result.output
    assert "start the local server with `make local-serve`" in result.stderr
