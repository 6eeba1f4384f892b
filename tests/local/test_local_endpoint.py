"""The handler behind a real local HTTP server with SageMaker's contract: /ping, /invocations, status codes passed
through, weights from a folder or from S3 (moto), loopback only, and the CLI that `make local-serve` runs."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from local.serve import MAX_PAYLOAD_BYTES, HandlerStartupError, LocalEndpoint, deliver

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLER_DIR = REPO_ROOT / "model_artifacts" / "deepspeed"


def _call(url: str, payload=None, *, method: str | None = None) -> tuple[int, str, object]:
    """(status, content-type, JSON body) of one HTTP request; 4xx/5xx are answers too."""
    data = None if payload is None else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers["Content-Type"], json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], json.loads(error.read())


@pytest.fixture(scope="module")
def endpoint(tiny_gptj_dir):
    with LocalEndpoint(HANDLER_DIR, tiny_gptj_dir, port=0) as running:
        yield running


def test_ping_is_healthy_once_the_model_is_loaded(endpoint):
    assert endpoint.url.startswith("http://127.0.0.1:")
    assert _call(endpoint.url + "/ping") == (200, "application/json", {"status": "Healthy"})


def test_invocations_answer_what_model_generate_gives(endpoint, tiny_gptj_dir):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    status, content_type, body = _call(
        endpoint.url + "/invocations",
        {"inputs": ["the model likes", "a cat"], "parameters": {"max_new_tokens": 6, "details": True}},
    )
    assert (status, content_type) == (200, "application/json")
    dtype_name = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"  # 4.3x too
    model = AutoModelForCausalLM.from_pretrained(tiny_gptj_dir, **{dtype_name: torch.float32})
    tokenizer = AutoTokenizer.from_pretrained(tiny_gptj_dir)
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, "left"
    encoded = tokenizer(["the model likes", "a cat"], return_tensors="pt", padding=True)
    output = model.generate(
        input_ids=encoded["input_ids"],
        attention_mask=encoded["attention_mask"],
        max_new_tokens=6,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    expected = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    assert [item["generated_text"] for item in body] == expected
    assert [item["details"]["prompt_tokens"] for item in body] == [3, 2]


def test_a_bad_request_gets_its_4xx_over_http_and_the_next_one_is_served(endpoint):
    status, content_type, body = _call(endpoint.url + "/invocations", b"{not json")
    assert (status, content_type) == (400, "application/json")
    assert body["code"] == 400 and "request body is not valid JSON" in body["error"]
    status, _, body = _call(endpoint.url + "/invocations", {"inputs": "x", "parameters": {"max_new_tokens": 10_000}})
    assert status == 413 and "parameters.max_new_tokens=10000 is above this endpoint's cap" in body["error"]
    status, _, body = _call(endpoint.url + "/invocations", {"inputs": "a cat", "parameters": {"max_new_tokens": 2}})
    assert status == 200 and set(body) == {"generated_text"}


def test_an_empty_body_and_query_parameters_reach_the_handler_as_djl_sends_them(endpoint):
    status, _, body = _call(endpoint.url + "/invocations?seed=3", b"")
    assert status == 400 and "request body is empty" in body["error"]
    status, _, body = _call(
        endpoint.url + "/invocations?seed=3", {"inputs": "a cat", "parameters": {"max_new_tokens": 2}}
    )
    assert status == 200 and isinstance(body["generated_text"], str)  # the body is "data", not the first entry


def test_with_batch_size_concurrent_requests_are_answered_in_one_batch_as_djl_does(endpoint, tiny_gptj_dir):
    payloads = [
        {"inputs": "the model likes", "parameters": {"max_new_tokens": 4}},
        {"inputs": ["a cat", "a dog"], "parameters": {"max_new_tokens": 4, "details": True}},
        {"inputs": "a cat", "parameters": {"max_new_tokens": 10_000}},
    ]
    alone = [_call(endpoint.url + "/invocations", payload) for payload in payloads]
    assert [status for status, _, _ in alone] == [200, 200, 413]
    properties = {"batch_size": "3", "max_batch_delay": "10000"}
    with LocalEndpoint(HANDLER_DIR, tiny_gptj_dir, properties=properties, port=0) as batching:
        answers = [None] * len(payloads)

        def post(index):
            answers[index] = _call(batching.url + "/invocations", payloads[index])

        threads = [threading.Thread(target=post, args=(index,)) for index in range(len(payloads))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert batching.worker.sizes == [3]
    assert [body for _, _, body in answers] == [body for _, _, body in alone]
    # DJL 0.27.0 answers every request of a batch with the batch's status: a refused one is a 200 with its error body.
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert answers[2][2]["code"] == 413


def test_other_routes_are_not_found(endpoint):
    assert _call(endpoint.url + "/predictions/model", {"inputs": "x"})[0] == 404
    assert _call(endpoint.url + "/invocations", method="GET")[0] == 404


def test_a_body_above_sagemakers_limit_is_refused_before_it_is_read(endpoint):
    connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=30)
    connection.putrequest("POST", "/invocations")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(MAX_PAYLOAD_BYTES + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413
    assert "SageMaker accepts at most" in json.loads(response.read())["error"]
    connection.close()


def test_a_non_loopback_address_is_refused_unless_allowed(tiny_gptj_dir):
    with pytest.raises(ValueError, match=re.escape("host='0.0.0.0' is not a loopback address")):
        LocalEndpoint(HANDLER_DIR, tiny_gptj_dir, host="0.0.0.0")
    LocalEndpoint(HANDLER_DIR, tiny_gptj_dir, host="0.0.0.0", allow_non_loopback=True)  # constructed, not started


def test_an_s3_prefix_is_delivered_as_sagemaker_delivers_it_and_the_handler_downloads_nothing(
    tiny_gptj_dir, moto_s3, monkeypatch
):
    for path in tiny_gptj_dir.iterdir():
        moto_s3.put_object(Bucket="local-endpoint-test", Key=f"tiny/{path.name}", Body=path.read_bytes())
    # The handler's folder beside the weights, as the stack writes it: delivered too, and not in the way.
    moto_s3.put_object(Bucket="local-endpoint-test", Key=f"tiny/inference/{'0' * 64}/model.py", Body=b"# handler")
    monkeypatch.setenv("WEIGHTS_S3_URI", "s3://stray/")  # an old setting the handler would refuse
    with LocalEndpoint(HANDLER_DIR, "s3://local-endpoint-test/tiny/", port=0) as running:
        delivered = Path(running.properties["model_dir"])
        assert sorted(p.name for p in delivered.iterdir()) == sorted(
            [*(p.name for p in tiny_gptj_dir.iterdir()), "inference"]
        )
        assert os.environ["WEIGHTS_S3_URI"] == "s3://stray/"  # unset for the start-up call only
        status, _, body = _call(
            running.url + "/invocations", {"inputs": "a cat", "parameters": {"max_new_tokens": 2, "details": True}}
        )
        assert status == 200 and body["details"]["prompt_tokens"] == 2
    assert not delivered.exists()  # removed with the endpoint


def test_delivery_refuses_what_sagemaker_refuses(moto_s3, tmp_path):
    moto_s3.put_object(Bucket="local-endpoint-test", Key="bad/weights", Body=b"a file")
    moto_s3.put_object(Bucket="local-endpoint-test", Key="bad/weights/part1", Body=b"and a folder")
    with pytest.raises(ValueError, match="a file and a folder share the name 'weights/part1'"):
        deliver("s3://local-endpoint-test/bad/", tmp_path)


def test_a_start_up_failure_is_raised_and_nothing_is_left_behind(tmp_path):
    path_before, modules_before = list(sys.path), {name for name in sys.modules if name.startswith("_local_djl")}
    endpoint = LocalEndpoint(HANDLER_DIR, tmp_path, port=0)
    with pytest.raises(ValueError, match=r"has no config\.json"):
        endpoint.start()
    assert not endpoint.healthy
    assert sys.path == path_before
    assert {name for name in sys.modules if name.startswith("_local_djl")} == modules_before


def test_the_vllm_folder_cannot_be_served_locally(tiny_gptj_dir):
    with pytest.raises(HandlerStartupError, match="exists only inside the container"):
        LocalEndpoint(REPO_ROOT / "model_artifacts" / "vllm", tiny_gptj_dir, port=0).start()


def test_the_cli_serves_a_fresh_tiny_model_until_terminated():
    """What `make local-serve` runs, as a user would: start, wait for the ready line, curl, Ctrl-C."""
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    process = subprocess.Popen(
        [sys.executable, "-m", "local.serve", "--port", "0", "-p", "option.max_new_tokens=16"],
        cwd=REPO_ROOT,
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url, deadline, log = None, time.monotonic() + 120, []
        while url is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            log.append(line)
            match = re.search(r"ready: curl -s (http://127\.0\.0\.1:\d+)/invocations", line)
            url = match.group(1) if match else None
        assert url, "".join(log)
        (tiny_folder,) = re.findall(r"built a tiny random gptj in (\S+)", "".join(log))
        assert Path(tiny_folder, "config.json").is_file()
        status, _, body = _call(
            url + "/invocations", {"inputs": "the model", "parameters": {"max_new_tokens": 4, "details": True}}
        )
        assert status == 200 and body["details"]["generated_tokens"] <= 4
        status, _, body = _call(url + "/invocations", {"inputs": "x", "parameters": {"max_new_tokens": 17}})
        assert status == 413 and "cap of 16" in body["error"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
    assert not Path(tiny_folder).exists()  # the tiny model is removed on exit
