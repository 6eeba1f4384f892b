"""`"stream": true` on the DeepSpeed handler: LMI 0.27.0's JSON lines, token by token, whose texts add up to exactly
the non-streamed answer; refused inside a DJL batch; a failure mid-stream ends it with an error line.

The stream is read as DJL's Python engine sends it (local/djl_streaming.stream_chunks, Output.send at v0.27.0)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import lmi_streaming
import pytest
from lmi_generation import PreparedRequest, TextGenerator
from lmi_requests import GenerationParameters, GenerationRequest

from local import djl_frontend, djl_streaming


@pytest.fixture
def service(loaded_service):
    return loaded_service("gptj")


def _stream(service, make_input, payload) -> tuple[object, list[dict]]:
    output = service.inference(make_input({**payload, "stream": True}))
    chunks = list(djl_streaming.stream_chunks(output)) if djl_streaming.is_streamed(output) else []
    return output, [json.loads(line) for line in b"".join(chunks).decode().splitlines()]


@pytest.mark.parametrize(
    "parameters",
    [
        {"max_new_tokens": 24},
        {"max_new_tokens": 24, "details": True},
        {"max_new_tokens": 40, "stop": ["e", "th"]},
        {"max_new_tokens": 24, "do_sample": True, "temperature": 0.8, "seed": 11},
        {"max_new_tokens": 16, "return_full_text": True, "repetition_penalty": 1.3},
    ],
    ids=["greedy", "details", "stop", "sampled", "full-text"],
)
@pytest.mark.parametrize("prompt", ["the model", "a small dog reads"])
def test_the_streamed_tokens_add_up_to_the_non_streamed_answer(service, make_input, read_output, prompt, parameters):
    status, plain = read_output(service.inference(make_input({"inputs": prompt, "parameters": parameters})))
    assert status == 200
    output, lines = _stream(service, make_input, {"inputs": prompt, "parameters": parameters})
    assert (output.code, output.properties["content-type"]) == (200, "application/jsonlines")
    assert output.content.is_empty()  # a streamed Output carries no content of its own
    assert all(set(line["token"]) == {"id", "text"} and len(line["token"]["id"]) == 1 for line in lines)
    assert all("generated_text" not in line for line in lines[:-1])
    streamed = "".join(line["token"]["text"] for line in lines)
    assert lines[-1]["generated_text"] == plain["generated_text"]
    full = parameters.get("return_full_text", False)
    assert (prompt + streamed if full else streamed) == plain["generated_text"]
    if parameters.get("details"):
        assert lines[-1]["details"] == {
            key: plain["details"][key] for key in ("finish_reason", "generated_tokens", "inputs", "prompt_tokens")
        }
        assert len(lines) == plain["details"]["generated_tokens"]
    else:
        assert "details" not in lines[-1]


def test_a_stream_request_inside_a_djl_batch_is_refused_and_the_others_answered(service):
    djl_python = __import__("djl_python")
    payloads = [{"inputs": "the model", "stream": True}, {"inputs": "the model"}]
    requests = [
        djl_frontend.request_input(djl_python, json.dumps(p).encode(), {"Content-Type": "application/json"}, {})
        for p in payloads
    ]
    output = service.inference(djl_frontend.batch_input(djl_python, requests))
    streamed, plain = djl_frontend.split_batch_output(djl_python, output, 2)
    refusal = json.loads(djl_frontend.response_body(streamed))
    assert refusal["code"] == 400 and "DJL dynamic batch" in refusal["error"]
    assert "generated_text" in json.loads(djl_frontend.response_body(plain))


def test_a_failure_mid_stream_ends_the_stream_with_an_error_line(service, make_input, monkeypatch):
    def generate(streamer, **kwargs):
        streamer.put(kwargs["input_ids"])  # the prompt, as model.generate hands it over first
        streamer.put(kwargs["input_ids"][:, -1])
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(service.generator.model, "generate", generate)
    _, lines = _stream(service, make_input, {"inputs": "the model"})
    assert len(lines) == 2 and "token" in lines[0]
    assert lines[-1] == {
        "code": 500,
        "message": "Internal Server Error",
        "error": "generation failed: RuntimeError: CUDA error: an illegal memory access was encountered",
    }


class _ScriptedModel:
    """model.generate that streams a fixed list of tokens (what a real model would choose)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.device = "cpu"
        self.generation_config = SimpleNamespace(eos_token_id=0)

    def generate(self, streamer, **kwargs):
        import torch

        streamer.put(kwargs["input_ids"])
        for token in self.tokens:
            streamer.put(torch.tensor([token]))
        streamer.end()


def _scripted_stream(tiny_model_dir, text: str, stop: tuple[str, ...] = ()) -> tuple[str, str]:
    """(the streamed text, the non-streamed answer) for a model that generates exactly `text`, with a tokenizer
    whose decode cleans up spaces before punctuation, as GPT-J's and OPT's do in the LMI 0.27.0 image
    (transformers 4.39: clean_up_tokenization_spaces defaults to true; transformers 5 skips it for BPE)."""
    import threading

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir("gptj"))
    plain_decode = tokenizer.decode
    tokenizer.decode = lambda *args, **kwargs: tokenizer.clean_up_tokenization(plain_decode(*args, **kwargs))
    tokens = tokenizer(text)["input_ids"]
    generator = TextGenerator(_ScriptedModel(tokens), tokenizer, context_length=128, max_input_length=64)
    request = GenerationRequest(("x",), GenerationParameters(max_new_tokens=len(tokens), stop=stop), single=True)
    prepared = PreparedRequest(request, ((tokenizer("x")["input_ids"][0],),))
    lines = [
        json.loads(line) for line in lmi_streaming.token_stream(generator, prepared, seed=None, lock=threading.Lock())
    ]
    return "".join(line["token"]["text"] for line in lines), lines[-1]["generated_text"]


@pytest.mark.parametrize(
    ("text", "stop"),
    [
        ("I do n't know , he said .", ()),
        ("it is 'n ' ok ?", ()),
        ("two words END more", ("END",)),
        ("café and naïve", ()),
    ],
)
def test_text_a_later_token_can_still_change_is_held_back(tiny_model_dir, text, stop):
    streamed, answer = _scripted_stream(tiny_model_dir, text, stop)
    assert streamed == answer


def test_without_holding_text_back_the_clean_up_of_spaces_breaks_the_stream(tiny_model_dir, monkeypatch):
    """The control for the test above: emitting every token's text at once streams text the answer does not have."""
    monkeypatch.setattr(lmi_streaming, "_UNSETTLED_CHARACTERS", 0)
    streamed, answer = _scripted_stream(tiny_model_dir, "I do n't know , he said .")
    assert streamed != answer


def test_a_stream_that_is_not_a_prefix_of_the_answer_is_logged_without_its_text(tiny_model_dir, monkeypatch, caplog):
    """The endpoint's log group keeps what the handler logs: a decode that is not prefix-stable is reported by
    lengths and counts, never by the generated text (issue 26, finding 5)."""
    monkeypatch.setattr(lmi_streaming, "_UNSETTLED_CHARACTERS", 0)
    with caplog.at_level("DEBUG", logger="lmi_handler"):
        streamed, answer = _scripted_stream(tiny_model_dir, "I do n't know , he said .")
    assert streamed != answer
    (warning,) = [r for r in caplog.records if "not a prefix" in r.getMessage()]
    assert warning.levelname == "WARNING"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    words = {w for text in (streamed, answer) for w in text.split() if len(w) > 2}  # "know", "said", "n't", ...
    assert words and not any(w in logged for w in words), logged
    assert streamed[-10:] not in logged and answer[-10:] not in logged
    assert f"{len(streamed)} characters streamed, {len(answer)} in the answer" in warning.getMessage()


def test_the_common_prefix():
    assert [lmi_streaming._common_prefix(a, b) for a, b in [("abc", "abd"), ("ab", "abc"), ("", "x"), ("x", "y")]] == [
        2,
        2,
        0,
        0,
    ]


@pytest.mark.parametrize(
    ("text", "stops", "settled"),
    [
        ("hello world", (), "hello wo"),
        ("hello wor\ufffd", (), "hello "),
        ("hello wo", ("world",), "hello"),  # "wo" may start the stop string, and the three last may still change
        ("hello world and more", ("world",), "hello "),
        ("ab", (), ""),
    ],
)
def test_what_is_settled(text, stops, settled):
    assert lmi_streaming._settled(text, stops) == settled
