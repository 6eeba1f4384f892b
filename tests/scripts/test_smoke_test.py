"""scripts/smoke_test.py against the local endpoint (real HTTP), and against SageMaker's API: botocore's Stubber for
the sagemaker client, and for the runtime SageMaker's HTTP answers byte for byte, event streams included
(sagemaker_runtime_standin.py; no AWS call is made)."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import smoke_test
from sagemaker_runtime_standin import SageMakerRuntime, cut, stream_error

from local.serve import LocalEndpoint
from local.tiny import save_tiny_model

HANDLER = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"


def test_passes_against_the_local_endpoint(tmp_path, capsys):
    with LocalEndpoint(HANDLER, str(save_tiny_model(tmp_path / "model")), port=0) as endpoint:
        assert smoke_test.main(["--url", endpoint.url]) == 0
    out = capsys.readouterr().out
    assert out.count("ok  ") == 5 and "smoke test passed" in out
    assert "ok   the same prompt streamed gives the same text, token by token" in out
    assert "ok   the chat schema is refused with a 4xx that says to send inputs" in out


class WrongShape(BaseHTTPRequestHandler):
    """An endpoint that answers 200 with the wrong body to everything."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"text": "Paris"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_fails_naming_each_broken_promise(capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongShape)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert smoke_test.main(["--url", f"http://127.0.0.1:{server.server_port}"]) == 1
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert "FAIL a prompt gets generated text with token counts: generated_text is missing or not a string" in out
    assert "FAIL a malformed request is refused with a 4xx: answered 200" in out


PIPELINE = "llm-platform-staging-finetune"
DESCRIBED = {
    "EndpointName": "llm-platform-staging",
    "EndpointArn": "arn:aws:sagemaker:us-east-1:111111111111:endpoint/llm-platform-staging",
    "EndpointConfigName": "c",
    "EndpointStatus": "InService",
    "CreationTime": "2026-01-01",
    "LastModifiedTime": "2026-01-01",
}
# What the DeepSpeed handler answers (tests/model_artifacts/test_lmi_streaming.py shows the same shapes).
DEEPSPEED_ANSWER = {
    "generated_text": " Paris, la ville lumière.",
    "details": {"finish_reason": "length", "generated_tokens": 4, "inputs": smoke_test.PROMPT, "prompt_tokens": 5},
}
DEEPSPEED_STREAM = (
    '{"token": {"id": [6342], "text": " Paris"}}\n'
    '{"token": {"id": [11], "text": ", la"}}\n'
    '{"token": {"id": [1490], "text": " ville"}}\n'
    '{"token": {"id": [300], "text": " lumière."}, "generated_text": " Paris, la ville lumière."}\n'
).encode()
CHAT_REFUSAL = b'{"code": 400, "message": "Bad Request", "error": "this endpoint does not take the chat schema (\'messages\'); ... send {\\"inputs\\": ...}"}'
# LMI 0.35.0's vLLM handler: the LMI schema streamed as TGI-like lines (request_response_utils.py,
# convert_completion_chunk_response_to_lmi_schema), then an empty line for the usage chunk and one for [DONE].
VLLM_ANSWER = {"generated_text": " Paris, la ville lumière.", "details": {"finish_reason": None, "generated_tokens": 4}}
VLLM_STREAM = (
    '{"index": 0, "token": {"id": 6342, "text": " Paris", "logprob": -0.1}, "generated_text": null, "details": null}\n'
    '{"index": 0, "token": {"id": 11, "text": ", la", "logprob": -0.2}, "generated_text": null, "details": null}\n'
    '{"index": 0, "token": {"id": 1490, "text": " ville", "logprob": -0.3}, "generated_text": null, "details": null}\n'
    '{"index": 0, "token": {"id": 300, "text": " lumière.", "logprob": -0.4}, '
    '"generated_text": " Paris, la ville lumière.", "details": null}\n\n\n'
).encode()
# vLLM's chat completion and its chunks (vllm_non_stream_output_formatter / vllm_stream_output_formatter: the SSE
# `data: ` prefix stripped, one JSON object per line).
CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "lmi",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}
CHAT_STREAM = (
    "".join(
        json.dumps({"id": "chatcmpl-2", "object": "chat.completion.chunk", "model": "lmi", "choices": choices}) + "\n"
        for choices in (
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            [{"index": 0, "delta": {"content": "Par"}, "finish_reason": None}],
            [{"index": 0, "delta": {"content": "is."}, "finish_reason": "stop"}],
        )
    ).encode()
    + b"\n"
)


def sagemaker_endpoint(components: tuple[str, ...] | None = None):
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    endpoint = smoke_test.SageMakerEndpoint("llm-platform-staging", session)
    return endpoint, SageMakerRuntime(endpoint.runtime, components)


def run_against_sagemaker(
    endpoint, engine: str = "deepspeed", chat: bool = False, components: tuple[str, ...] = ()
) -> list[str]:
    with Stubber(endpoint.sagemaker) as sagemaker:
        sagemaker.add_response("describe_endpoint", DESCRIBED, {"EndpointName": "llm-platform-staging"})
        sagemaker.add_response("describe_pipeline", {"PipelineName": PIPELINE}, {"PipelineName": PIPELINE})
        return smoke_test.run_checks(
            endpoint, (endpoint.sagemaker, PIPELINE), engine=engine, chat=chat, components=components
        )


# An endpoint of inference components: a base model's component and a LoRA adapter component over it.
COMPONENTS = ("llm-platform-staging-base", "llm-platform-staging-sql")


def test_checks_every_component_and_adapter_of_an_endpoint_by_name(capsys):
    endpoint, runtime = sagemaker_endpoint(COMPONENTS)
    for _ in COMPONENTS:
        runtime.invoke(json.dumps(VLLM_ANSWER).encode())
        runtime.stream(cut(VLLM_STREAM, 7))
        runtime.model_error(400, b'{"code": 400, "error": "Input parsing failed"}')
    assert run_against_sagemaker(endpoint, engine="vllm", components=COMPONENTS) == []
    # SageMaker answers only requests that name a component: each check ran once per component, naming it.
    assert runtime.targets == [name for name in COMPONENTS for _ in range(3)]
    out = capsys.readouterr().out
    for name in COMPONENTS:
        assert f"ok   {name}: a prompt gets generated text with token counts" in out


def test_a_component_that_fails_is_named_in_the_failure():
    endpoint, runtime = sagemaker_endpoint(COMPONENTS)
    runtime.invoke(json.dumps(VLLM_ANSWER).encode())
    runtime.stream([VLLM_STREAM])
    runtime.model_error(400, b"{}")
    runtime.model_error(500, b'{"error": "adapter failed to load"}')
    runtime.model_error(400, b"{}")
    failures = run_against_sagemaker(endpoint, engine="vllm", components=COMPONENTS)
    assert failures[0].startswith(
        "llm-platform-staging-sql: a prompt gets generated text with token counts: answered 500"
    )
    assert all(f.startswith("llm-platform-staging-sql: ") for f in failures)


def test_components_are_refused_for_a_local_endpoint(capsys):
    with pytest.raises(SystemExit):
        smoke_test.main(["--url", "http://127.0.0.1:1", "--component", "llm-platform-dev-base"])
    assert "--component llm-platform-dev-base: a local endpoint serves one model" in capsys.readouterr().err


@pytest.mark.parametrize("part_size", [1, 2, 5, 64, 100_000])
def test_checks_a_deepspeed_endpoint_whose_stream_sagemaker_cuts_anywhere(part_size):
    endpoint, runtime = sagemaker_endpoint()
    runtime.invoke(json.dumps(DEEPSPEED_ANSWER).encode())
    runtime.stream(cut(DEEPSPEED_STREAM, part_size))  # 1 and 2 cut inside "è", a two-byte character
    runtime.model_error(400, CHAT_REFUSAL)
    runtime.model_error(400, b'{"code": 400, "error": "parameters.max_new_tokens must be an integer"}')
    assert run_against_sagemaker(endpoint) == []
    sent = [body for _, body in runtime.requests]
    assert sent == [smoke_test.GOOD_REQUEST, smoke_test.STREAM_REQUEST, smoke_test.CHAT_REQUEST, smoke_test.BAD_REQUEST]
    assert runtime.requests[1][0] == "InvokeEndpointWithResponseStream"
    assert sent[1]["parameters"]["do_sample"] is False and sent[1]["stream"] is True


def test_checks_a_vllm_endpoint_with_its_chat_schema():
    endpoint, runtime = sagemaker_endpoint()
    runtime.invoke(json.dumps(VLLM_ANSWER).encode())
    runtime.stream(cut(VLLM_STREAM, 7))
    runtime.invoke(json.dumps(CHAT_ANSWER).encode() + b"\n")
    runtime.stream(cut(CHAT_STREAM, 9))
    runtime.model_error(400, b'{"code": 400, "error": "Input parsing failed"}')
    assert run_against_sagemaker(endpoint, engine="vllm", chat=True) == []
    assert [operation for operation, _ in runtime.requests] == [
        "InvokeEndpoint",
        "InvokeEndpointWithResponseStream",
        "InvokeEndpoint",
        "InvokeEndpointWithResponseStream",
        "InvokeEndpoint",
    ]
    assert runtime.requests[3][1] == {**smoke_test.CHAT_REQUEST, "stream": True}


def _failures_with_stream(parts: list[bytes], *, end: bytes = b"", content_type: str = "application/jsonlines"):
    endpoint, runtime = sagemaker_endpoint()
    runtime.invoke(json.dumps(DEEPSPEED_ANSWER).encode())
    runtime.stream(parts, content_type=content_type, end=end)
    runtime.model_error(400, CHAT_REFUSAL)
    runtime.model_error(400, b"{}")
    return run_against_sagemaker(endpoint)


@pytest.mark.parametrize(
    ("parts", "end", "content_type", "problem"),
    [
        (
            [DEEPSPEED_STREAM.replace(b'"text": " ville"', b'"text": " city"')],
            b"",
            "application/jsonlines",
            "do not add up to the last line's generated_text",
        ),
        (
            [DEEPSPEED_STREAM.replace(b" ville", b" city")],
            b"",
            "application/jsonlines",
            "is not the non-streamed greedy answer",
        ),
        (
            [DEEPSPEED_STREAM[:60]],
            stream_error("ModelStreamError", "Model stream broke", "StreamBroken"),
            "application/jsonlines",
            "the stream broke off: An error occurred (ModelStreamError)",
        ),
        (
            [DEEPSPEED_STREAM[:120], b"CUDA out of memory"],
            b"",
            "application/jsonlines",
            "the stream does not end with a complete line",
        ),
        ([DEEPSPEED_STREAM], b"", "application/json", "content type 'application/json'"),
        (
            [b'{"code": 500, "message": "Internal Server Error", "error": "generation failed"}\n'],
            b"",
            "application/jsonlines",
            "the stream ended with an error",
        ),
    ],
    ids=["tokens-vs-last-line", "stream-vs-plain", "model-stream-error", "djl-error-text", "content-type", "error"],
)
def test_a_broken_stream_fails_the_check_naming_the_problem(parts, end, content_type, problem):
    (failure,) = _failures_with_stream(parts, end=end, content_type=content_type)
    assert failure.startswith("the same prompt streamed gives the same text, token by token: ")
    assert problem in failure


def test_a_deepspeed_endpoint_that_answers_chat_fails_the_check():
    endpoint, runtime = sagemaker_endpoint()
    runtime.invoke(json.dumps(DEEPSPEED_ANSWER).encode())
    runtime.stream([DEEPSPEED_STREAM])
    runtime.invoke(json.dumps(CHAT_ANSWER).encode())
    runtime.model_error(400, b"{}")
    (failure,) = run_against_sagemaker(endpoint)
    assert failure.startswith("the chat schema is refused with a 4xx that says to send inputs: answered 200")


def test_a_vllm_chat_stream_that_differs_fails_the_check():
    endpoint, runtime = sagemaker_endpoint()
    runtime.invoke(json.dumps(VLLM_ANSWER).encode())
    runtime.stream([VLLM_STREAM])
    runtime.invoke(json.dumps(CHAT_ANSWER).encode())
    runtime.stream([CHAT_STREAM.replace(b"is.", b"is!")])
    runtime.model_error(400, b"{}")
    (failure,) = run_against_sagemaker(endpoint, engine="vllm", chat=True)
    assert "the streamed message 'Paris!' is not the non-streamed greedy one 'Paris.'" in failure


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (
            {"generated_text": 7, "details": {"prompt_tokens": 5, "generated_tokens": 3}},
            "generated_text is missing or not a string",
        ),
        (
            {"generated_text": "x", "details": {"prompt_tokens": 0, "generated_tokens": 3}},
            "prompt_tokens should be a positive integer",
        ),
        (
            {"generated_text": "x", "details": {"prompt_tokens": 5, "generated_tokens": 99}},
            "generated_tokens should be 1..16",
        ),
        ({"generated_text": "x"}, "details are missing although the request asked for them"),
        ({"code": 400, "message": "Bad Request", "error": "inputs is missing"}, "answered with an error"),
        ([{"generated_text": "x", "details": {"generated_tokens": 3}}], "expected one object for a string prompt"),
    ],
)
def test_generation_check_names_the_problem(answer, problem):
    assert problem in smoke_test.check_generation(smoke_test.Reply(200, json.dumps(answer).encode()))


@pytest.mark.parametrize(
    "answer",
    [
        # LMI 0.35.0's vLLM handler with details: no prompt_tokens, finish_reason from vLLM's stop_reason
        # (lmi_vllm/request_response_utils.py, convert_completion_response_to_lmi_schema).
        {
            "generated_text": " Paris.",
            "details": {"finish_reason": None, "generated_tokens": 3, "seed": 0, "tokens": []},
        },
        # Our DeepSpeed handler with details.
        {
            "generated_text": " Paris.",
            "details": {"finish_reason": "length", "generated_tokens": 3, "prompt_tokens": 5},
        },
    ],
)
def test_the_generation_check_passes_both_engines_answers(answer):
    assert smoke_test.check_generation(smoke_test.Reply(200, json.dumps(answer).encode())) == ""
