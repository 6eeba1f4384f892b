"""`llmp invoke`: moto answers InvokeEndpoint; InvokeEndpointWithResponseStream, which moto lacks, is answered byte
for byte as SageMaker sends it (tests/scripts/sagemaker_runtime_standin.py: event-stream framing, parts cut at
arbitrary bytes), and parsed by botocore's own code."""

from __future__ import annotations

import json

import pytest
import requests

from cli import aws as aws_module
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
