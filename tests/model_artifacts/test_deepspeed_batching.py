"""DJL dynamic batching (`batch_size` > 1 in serving.properties): DJL 0.27.0 hands the handler one Input holding
several requests and splits its answer back. Every request must get what it would get alone, its errors its own.

The batch is built and split by local/djl_frontend.py, which follows DJL's PyPredictor#batchPredict."""

from __future__ import annotations

import json

import pytest

from local import djl_frontend


@pytest.fixture
def service(loaded_service):
    return loaded_service("gptj")


def _djl_python():
    import djl_python

    return djl_python


def _run_batch(service, payloads: list) -> list[tuple[int, dict, object]]:
    """Each payload through one batched handler call, as DJL would: (status, headers, JSON body) per request."""
    djl_python = _djl_python()
    requests = [
        djl_frontend.request_input(
            djl_python,
            payload if isinstance(payload, bytes) else json.dumps(payload).encode(),
            {"Content-Type": "application/json"},
            {},
        )
        for payload in payloads
    ]
    batch = djl_frontend.batch_input(djl_python, requests)
    assert batch.is_batch() and batch.get_batch_size() == len(payloads)
    output = djl_frontend.call_handler(djl_python, service.inference, batch, {"model_dir": "/opt/ml/model"})
    answers = djl_frontend.split_batch_output(djl_python, output, len(payloads))
    return [(answer.code, answer.properties, json.loads(djl_frontend.response_body(answer))) for answer in answers]


def _alone(service, make_input, read_output, payload) -> tuple[int, object]:
    return read_output(service.inference(make_input(payload)))


def _count_generate_calls(service, monkeypatch) -> list[int]:
    """Rows of each model.generate call the handler makes."""
    rows: list[int] = []
    original = service.generator.model.generate

    def generate(*args, **kwargs):
        rows.append(int(kwargs["input_ids"].shape[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(service.generator.model, "generate", generate)
    return rows


def test_every_request_of_a_batch_gets_what_it_would_get_alone(service, make_input, read_output):
    payloads = [
        {"inputs": "the model likes", "parameters": {"max_new_tokens": 5}},
        {"inputs": ["a cat", "my friend reads old books"], "parameters": {"max_new_tokens": 5, "details": True}},
        {"inputs": "a cat", "parameters": {"max_new_tokens": "five"}},
        {"inputs": "a dog", "parameters": {"max_new_tokens": 4, "do_sample": True, "seed": 11}},
        b"",
    ]
    answers = _run_batch(service, payloads)
    for payload, (status, headers, body) in zip(payloads, answers, strict=True):
        alone_status, alone_body = _alone(service, make_input, read_output, payload)
        assert body == alone_body
        # DJL 0.27.0 gives every request of a batch the batch Output's status and properties.
        assert status == 200 and headers == {"content-type": "application/json"}
        if alone_status != 200:
            assert body["code"] == alone_status
    assert isinstance(answers[0][2], dict) and isinstance(answers[1][2], list) and len(answers[1][2]) == 2
    assert "parameters.max_new_tokens must be an integer" in answers[2][2]["error"]
    assert "request body is empty" in answers[4][2]["error"]


def test_greedy_requests_with_the_same_settings_share_one_generate_call(service, monkeypatch):
    rows = _count_generate_calls(service, monkeypatch)
    same = {"max_new_tokens": 4, "repetition_penalty": 1.2}
    _run_batch(
        service,
        [
            {"inputs": "a cat", "parameters": same},
            {"inputs": ["the model", "a dog"], "parameters": {**same, "details": True, "truncate": 50}},
            {"inputs": "a bird", "parameters": {"max_new_tokens": 3}},  # other settings: a call of its own
            {"inputs": "a fish", "parameters": {**same, "seed": 5, "return_full_text": True}},
            {"inputs": "a cow", "parameters": {**same, "do_sample": True}},  # sampling: always alone
        ],
    )
    assert rows == [4, 1, 1]


def test_a_shared_call_never_holds_more_prompts_than_option_max_batch_size(service, monkeypatch):
    rows = _count_generate_calls(service, monkeypatch)
    assert service.limits.max_batch_size == 4
    prompts = {"inputs": ["a cat", "a dog", "a cow"], "parameters": {"max_new_tokens": 2}}
    _run_batch(service, [prompts, prompts, {"inputs": "a fish", "parameters": {"max_new_tokens": 2}}])
    assert rows == [3, 4]  # the second request does not fit in the first call; the third joins the second


def test_a_failed_generate_call_fails_only_its_own_requests(service, monkeypatch):
    original = service.generator.model.generate

    def generate(*args, **kwargs):
        if kwargs["max_new_tokens"] == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return original(*args, **kwargs)

    monkeypatch.setattr(service.generator.model, "generate", generate)
    answers = _run_batch(
        service,
        [
            {"inputs": "a cat", "parameters": {"max_new_tokens": 3}},
            {"inputs": "a dog", "parameters": {"max_new_tokens": 2}},
            {"inputs": "a cow", "parameters": {"max_new_tokens": 3}},
        ],
    )
    assert [body.get("code") for _, _, body in answers] == [500, None, 500]
    assert "generation failed: RuntimeError: CUDA error" in answers[0][2]["error"]
    assert isinstance(answers[1][2]["generated_text"], str)


def test_handle_answers_a_batch_after_the_start_up_call(handler_module, tiny_model_dir, monkeypatch):
    """Through model.handle, as DJL calls it: the empty start-up Input first, then a batch."""
    djl_python = _djl_python()
    monkeypatch.setattr(handler_module, "_service", handler_module.TextGenerationService())
    startup = djl_python.Input()
    # Whether or not DJL passes the model's batch_size among the start-up properties, the call is empty.
    startup.properties = {"weights_dir": str(tiny_model_dir("gptj")), "dtype": "fp32", "batch_size": "2"}
    assert djl_frontend.call_handler(djl_python, handler_module.handle, startup, {}).code == 204
    requests = [
        djl_frontend.request_input(djl_python, json.dumps({"inputs": text}).encode(), {}, {})
        for text in ("a cat", "a dog")
    ]
    output = djl_frontend.call_handler(
        djl_python, handler_module.handle, djl_frontend.batch_input(djl_python, requests), {}
    )
    bodies = [
        json.loads(djl_frontend.response_body(answer))
        for answer in djl_frontend.split_batch_output(djl_python, output, 2)
    ]
    assert [set(body) for body in bodies] == [{"generated_text"}, {"generated_text"}]


@pytest.mark.bad_input("request")
def test_a_client_that_sets_batch_size_itself_is_answered_as_one_request(service, make_input, read_output):
    """SageMaker's CustomAttributes "batch_size=2" reaches the handler as a property (DJL's RequestParser splits the
    header into properties), on a plain request. LMI's own handlers would try to split it and fail."""
    djl_python = _djl_python()
    request = djl_frontend.request_input(
        djl_python,
        json.dumps({"inputs": "a cat", "parameters": {"max_new_tokens": 2}}).encode(),
        {"X-Amzn-SageMaker-Custom-Attributes": "batch_size=2"},
        {},
    )
    assert request.is_batch()  # what the handler is given
    status, body = read_output(service.inference(request))
    assert (status, body) == _alone(
        service, make_input, read_output, {"inputs": "a cat", "parameters": {"max_new_tokens": 2}}
    )
