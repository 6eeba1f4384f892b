"""scripts/smoke_test.py against the local endpoint (real HTTP), and against SageMaker's API through botocore's
Stubber (the responses SageMaker documents; no AWS call is made)."""

from __future__ import annotations

import io
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import smoke_test

from local.serve import LocalEndpoint
from local.tiny import save_tiny_model

HANDLER = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"


def test_passes_against_the_local_endpoint(tmp_path, capsys):
    with LocalEndpoint(HANDLER, str(save_tiny_model(tmp_path / "model")), port=0) as endpoint:
        assert smoke_test.main(["--url", endpoint.url]) == 0
    out = capsys.readouterr().out
    assert out.count("ok  ") == 3 and "smoke test passed" in out


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


def body(payload) -> StreamingBody:
    data = json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(data), len(data))


def test_checks_a_sagemaker_endpoint_and_its_pipeline():
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    endpoint = smoke_test.SageMakerEndpoint("llm-platform-staging", session)
    with Stubber(endpoint.sagemaker) as sagemaker, Stubber(endpoint.runtime) as runtime:
        sagemaker.add_response(
            "describe_endpoint",
            {
                "EndpointName": "llm-platform-staging",
                "EndpointArn": "arn:aws:sagemaker:us-east-1:111111111111:endpoint/llm-platform-staging",
                "EndpointConfigName": "c",
                "EndpointStatus": "InService",
                "CreationTime": "2026-01-01",
                "LastModifiedTime": "2026-01-01",
            },
            {"EndpointName": "llm-platform-staging"},
        )
        answer = {
            "generated_text": " Paris.",
            "details": {"finish_reason": "length", "prompt_tokens": 5, "generated_tokens": 3},
        }
        runtime.add_response("invoke_endpoint", {"Body": body(answer), "ContentType": "application/json"})
        runtime.add_client_error(
            "invoke_endpoint",
            service_error_code="ModelError",
            http_status_code=424,
            service_message="Received client error (400) from primary",
            modeled_fields={"OriginalStatusCode": 400, "OriginalMessage": '{"code": 400}'},
        )
        sagemaker.add_response(
            "describe_pipeline",
            {"PipelineName": "llm-platform-staging-finetune"},
            {"PipelineName": "llm-platform-staging-finetune"},
        )
        failures = smoke_test.run_checks(endpoint, (endpoint.sagemaker, "llm-platform-staging-finetune"))
    assert failures == []


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
