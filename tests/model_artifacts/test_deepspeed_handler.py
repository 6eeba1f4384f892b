"""The handler end to end on CPU (DeepSpeed without kernel injection): its generations equal model.generate on the
same weights and seed, batches are padded on the left, answers have LMI 0.27.0's shape, and bad requests get a 4xx
without hurting the worker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

ARCHITECTURES = ["gptj", "opt", "bloom"]
PROMPTS = ["the model likes fresh", "a cat", "my friend reads old books every"]

HANDLER_DIR = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"


def _expected(reference_model, arch, prompts, seed=None, **generate_kwargs):
    """What a user gets from plain transformers: left-padded batch, model.generate, new tokens decoded."""
    model, tokenizer = reference_model(arch)
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)
    if seed is not None:
        torch.manual_seed(seed)
    # Only ids and mask: transformers 4.x tokenizers may add token_type_ids, which GPT-J would embed as tokens.
    output = model.generate(
        input_ids=encoded["input_ids"],
        attention_mask=encoded["attention_mask"],
        pad_token_id=tokenizer.pad_token_id,
        **generate_kwargs,
    )
    texts = []
    for row in output[:, encoded["input_ids"].shape[1] :].tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]
        texts.append(tokenizer.decode(row, skip_special_tokens=True))
    return texts


def _generate(loaded_service, make_input, read_output, arch, payload):
    status, body = read_output(loaded_service(arch).inference(make_input(payload)))
    assert status == 200, body
    return body


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_generation_equals_model_generate(arch, loaded_service, reference_model, make_input, read_output):
    body = _generate(
        loaded_service, make_input, read_output, arch, {"inputs": PROMPTS[0], "parameters": {"max_new_tokens": 12}}
    )
    expected = _expected(reference_model, arch, [PROMPTS[0]], max_new_tokens=12, do_sample=False)
    assert body == {"generated_text": expected[0]}  # LMI's shape for a string prompt: one object, no details


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_seeded_sampling_equals_model_generate_with_the_same_seed(
    arch, loaded_service, reference_model, make_input, read_output
):
    parameters = {"max_new_tokens": 12, "do_sample": True, "temperature": 0.8, "top_k": 20, "top_p": 0.95, "seed": 7}
    body = _generate(loaded_service, make_input, read_output, arch, {"inputs": PROMPTS, "parameters": parameters})
    expected = _expected(
        reference_model, arch, PROMPTS, seed=7, max_new_tokens=12, do_sample=True, temperature=0.8, top_k=20, top_p=0.95
    )
    assert [item["generated_text"] for item in body] == expected
    again = _generate(loaded_service, make_input, read_output, arch, {"inputs": PROMPTS, "parameters": parameters})
    assert again == body
    other_seed = {**parameters, "seed": 8}
    different = _generate(loaded_service, make_input, read_output, arch, {"inputs": PROMPTS, "parameters": other_seed})
    assert different != body
    greedy = _expected(reference_model, arch, PROMPTS, max_new_tokens=12, do_sample=False)
    assert expected != greedy


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_batch_is_left_padded_and_matches_each_prompt_alone(
    arch, loaded_service, reference_model, make_input, read_output
):
    parameters = {"max_new_tokens": 10, "repetition_penalty": 1.3, "details": True}
    batch = _generate(loaded_service, make_input, read_output, arch, {"inputs": PROMPTS, "parameters": parameters})
    assert [item["generated_text"] for item in batch] == _expected(
        reference_model, arch, PROMPTS, max_new_tokens=10, do_sample=False, repetition_penalty=1.3
    )
    alone = [
        _generate(loaded_service, make_input, read_output, arch, {"inputs": prompt, "parameters": parameters})
        for prompt in PROMPTS
    ]
    assert [item["generated_text"] for item in batch] == [item["generated_text"] for item in alone]
    _, tokenizer = reference_model(arch)
    prompt_tokens = [len(tokenizer(prompt)["input_ids"]) for prompt in PROMPTS]
    assert [item["details"]["prompt_tokens"] for item in batch] == prompt_tokens


def test_details_count_tokens_and_give_the_finish_reason(loaded_service, make_input, read_output):
    body = _generate(
        loaded_service,
        make_input,
        read_output,
        "gptj",
        {"inputs": ["a cat"], "parameters": {"max_new_tokens": 5, "details": True}},
    )
    (item,) = body
    assert item["details"]["prompt_tokens"] == 2
    assert item["details"]["inputs"] == "a cat"
    assert item["details"]["finish_reason"] in ("length", "eos_token")
    if item["details"]["finish_reason"] == "length":
        assert item["details"]["generated_tokens"] == 5
    assert len(item["details"]["tokens"]) == item["details"]["generated_tokens"]


def test_details_tokens_carry_ids_text_and_the_log_probabilities_of_model_generate(
    loaded_service, reference_model, make_input, read_output
):
    """LMI 0.27.0's Token: {"id": [id], "text", "log_prob"}; log_prob as from generate's own scores."""
    body = _generate(
        loaded_service,
        make_input,
        read_output,
        "opt",
        {"inputs": PROMPTS[1], "parameters": {"max_new_tokens": 6, "details": True, "repetition_penalty": 1.2}},
    )
    model, tokenizer = reference_model("opt")
    encoded = tokenizer([PROMPTS[1]], return_tensors="pt")
    output = model.generate(
        input_ids=encoded["input_ids"],
        attention_mask=encoded["attention_mask"],
        max_new_tokens=6,
        do_sample=False,
        repetition_penalty=1.2,
        pad_token_id=tokenizer.pad_token_id,
        output_scores=True,
        return_dict_in_generate=True,
    )
    new_tokens = output.sequences[0, encoded["input_ids"].shape[1] :].tolist()
    log_probs = [
        torch.log_softmax(scores[0], dim=-1)[token].item()
        for scores, token in zip(output.scores, new_tokens, strict=True)
    ]
    tokens = body["details"]["tokens"]
    assert [token["id"] for token in tokens] == [[token] for token in new_tokens][: len(tokens)]
    assert [token["text"] for token in tokens] == [tokenizer.decode([token]) for token in new_tokens][: len(tokens)]
    assert [token["log_prob"] for token in tokens] == pytest.approx(log_probs[: len(tokens)], abs=1e-4)
    assert all(token["log_prob"] <= 0 for token in tokens)


def test_a_list_of_prompts_gets_a_list_and_a_string_an_object(loaded_service, make_input, read_output):
    """LMI 0.27.0's shapes, and the vLLM variant's for a string: one response shape per request shape."""
    single = _generate(loaded_service, make_input, read_output, "gptj", {"inputs": "a cat"})
    listed = _generate(loaded_service, make_input, read_output, "gptj", {"inputs": ["a cat"]})
    assert isinstance(single, dict) and set(single) == {"generated_text"}
    assert listed == [single]


def test_stop_strings_cut_the_text_and_end_generation(loaded_service, reference_model, make_input, read_output):
    full = _expected(reference_model, "bloom", [PROMPTS[0]], max_new_tokens=12, do_sample=False)[0]
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop and stop in full
    for name in ("stop", "stop_sequences"):  # `stop_sequences` is LMI's name for it
        item = _generate(
            loaded_service,
            make_input,
            read_output,
            "bloom",
            {
                "inputs": PROMPTS[0],
                "parameters": {"max_new_tokens": 12, name: [stop, "never appears"], "details": True},
            },
        )
        assert item["generated_text"] == full[: full.index(stop)]
        assert item["details"]["finish_reason"] == "stop_sequence"
        assert item["details"]["generated_tokens"] < 12


def test_typical_p_is_honoured_as_model_generate_does(loaded_service, reference_model, make_input, read_output):
    parameters = {"max_new_tokens": 10, "typical_p": 0.5, "seed": 3}
    body = _generate(loaded_service, make_input, read_output, "gptj", {"inputs": PROMPTS, "parameters": parameters})
    expected = _expected(reference_model, "gptj", PROMPTS, seed=3, max_new_tokens=10, do_sample=True, typical_p=0.5)
    assert [item["generated_text"] for item in body] == expected  # typical_p alone means sampling, as in TGI
    assert expected != _expected(reference_model, "gptj", PROMPTS, seed=3, max_new_tokens=10, do_sample=True)


def test_truncate_keeps_the_last_tokens_of_each_prompt(loaded_service, reference_model, make_input, read_output):
    model, tokenizer = reference_model("gptj")
    long_prompt = "the model likes fresh bread " * 30  # 150 tokens: above the 127 a prompt may have
    kept = torch.tensor([tokenizer(long_prompt)["input_ids"][-20:]])
    output = model.generate(
        input_ids=kept, attention_mask=torch.ones_like(kept), max_new_tokens=5, do_sample=False, pad_token_id=0
    )
    body = _generate(
        loaded_service,
        make_input,
        read_output,
        "gptj",
        {"inputs": [long_prompt], "parameters": {"max_new_tokens": 5, "truncate": 20, "details": True}},
    )
    assert body[0]["generated_text"] == tokenizer.decode(output[0, 20:], skip_special_tokens=True)
    assert body[0]["details"]["prompt_tokens"] == 20
    assert body[0]["details"]["inputs"] == long_prompt


def test_return_full_text_prepends_the_prompt(loaded_service, make_input, read_output):
    payload = {"inputs": "a cat", "parameters": {"max_new_tokens": 4}}
    plain = _generate(loaded_service, make_input, read_output, "opt", payload)["generated_text"]
    payload["parameters"]["return_full_text"] = True
    full = _generate(loaded_service, make_input, read_output, "opt", payload)["generated_text"]
    assert full == "a cat" + plain


# Each bad request, its status, and a fragment of the message (the full table of parse errors is in
# test_lmi_requests.py; these include the checks that need the tokenizer and the model's context of 128 tokens).
BAD_REQUESTS = [
    (b"not json", 400, "request body is not valid JSON"),
    (b'{"input": "typo"}', 400, "unknown field(s) 'input'"),
    (b'{"parameters": {}}', 400, 'field "inputs" is missing'),
    (b'{"inputs": {"text": "x"}}', 400, "inputs must be a string or a list of strings; got an object"),
    (b'{"inputs": "x", "parameters": {"beams": 4}}', 400, "unknown parameter(s) 'beams'"),
    (b'{"inputs": ""}', 422, "inputs is an empty string"),
    (b'{"inputs": ["a", "b", "c", "d", "e"]}', 413, "inputs has 5 prompts; this endpoint accepts at most 4"),
    (b'{"inputs": "x", "parameters": {"max_new_tokens": 257}}', 413, "above this endpoint's cap of 256"),
    (
        ('{"inputs": "' + "the model likes fresh bread " * 30 + '"}').encode(),
        413,
        "prompts may have at most 127 tokens",
    ),
    (
        ('{"inputs": "' + "the model likes fresh bread " * 7 + '", "parameters": {"max_new_tokens": 120}}').encode(),
        413,
        "above the model's context of 128 tokens",
    ),
    (b'{"inputs": []}', 422, "inputs is an empty list"),
    (b'{"inputs": "x", "parameters": {"max_new_tokens": "5"}}', 400, "parameters.max_new_tokens must be an integer"),
    (b'{"inputs": "x", "parameters": {"do_sample": "yes"}}', 400, "parameters.do_sample must be true or false"),
    (b'{"inputs": "x", "parameters": {"temperature": 0}}', 422, "parameters.temperature=0 is out of range"),
    (b'{"inputs": "x", "parameters": {"top_p": 1.5}}', 422, "parameters.top_p=1.5 is out of range"),
    (b'{"inputs": "x", "parameters": {"seed": -1}}', 422, "parameters.seed=-1 is out of range"),
    (
        ('{"inputs": "x", "parameters": {"stop": ' + json.dumps(["x"] * 17) + "}}").encode(),
        413,
        "parameters.stop and stop_sequences have 17 strings",
    ),
    # Hostile bodies (the whole class is in test_lmi_requests.py): none of these may be a 500.
    (('{"inputs": "a", "parameters": {"max_new_tokens": ' + "9" * 5000 + "}}").encode(), 400, "an integer of 5000"),
    (('{"inputs": ' + "[" * 50_000 + "]" * 50_000 + "}").encode(), 400, "nests lists or objects too deeply"),
    (b'{"inputs": "\\ud800"}', 400, "inputs is not valid Unicode: it has a lone surrogate"),
    (b'{"inputs": ["a", "b\\udfff"], "parameters": {"return_full_text": true}}', 400, "inputs[1] is not valid Unicode"),
    (b'{"inputs": "x", "parameters": {"repetition_penalty": 1e-300}}', 422, "repetition_penalty=1e-300 is out of"),
    (b'{"inputs": "x", "inputs": "y"}', 400, "the key 'inputs' twice"),
]


@pytest.mark.bad_input("request")
@pytest.mark.parametrize(("body", "status", "message"), BAD_REQUESTS)
def test_bad_request_gets_a_4xx_and_the_next_request_is_served(
    body, status, message, loaded_service, make_input, read_output
):
    service = loaded_service("gptj")
    code, error = read_output(service.inference(make_input(body)))
    assert code == status
    assert error["code"] == status
    assert message in error["error"]
    assert error["message"]  # the HTTP reason phrase, e.g. "Bad Request"
    code, good = read_output(service.inference(make_input({"inputs": "a cat", "parameters": {"max_new_tokens": 3}})))
    assert code == 200 and isinstance(good["generated_text"], str)


@pytest.mark.bad_input("request")
def test_temperatures_too_small_for_the_logits_are_sampled_at_a_hundredth(loaded_service, make_input, read_output):
    """Logits divided by 1e-300 are inf, softmax makes NaN and sampling fails (on a GPU: a device-side assert)."""
    payload = {"inputs": PROMPTS, "parameters": {"max_new_tokens": 4, "temperature": 1e-300, "seed": 1}}
    tiny = _generate(loaded_service, make_input, read_output, "gptj", payload)
    payload["parameters"]["temperature"] = 0.01
    assert tiny == _generate(loaded_service, make_input, read_output, "gptj", payload)


def test_sampling_runs_on_float32_scores_whatever_the_models_dtype(
    loaded_service, make_input, read_output, monkeypatch
):
    """transformers 4.39 (the LMI 0.27.0 image) samples in the model's dtype: fp16 logits / temperature overflow into
    inf and NaN there. The handler's first logits processor makes the warpers and softmax work in fp32."""
    generator = loaded_service("gptj").generator
    seen = {}
    original = generator.model.generate

    def generate(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(generator.model, "generate", generate)
    payload = {"inputs": "a cat", "parameters": {"max_new_tokens": 2, "temperature": 0.01, "seed": 1}}
    assert read_output(loaded_service("gptj").inference(make_input(payload)))[0] == 200
    half = torch.full((1, 8), 60000.0, dtype=torch.float16)
    scores = seen["logits_processor"](torch.zeros((1, 1), dtype=torch.long), half)
    assert scores.dtype == torch.float32
    assert torch.isfinite(scores / 0.01).all()  # in fp16 this is inf


@pytest.mark.bad_input("request")
def test_a_prompt_the_tokenizer_cannot_encode_is_a_422_naming_it(loaded_service, make_input, read_output, monkeypatch):
    """Whatever the tokenizer raises on a prompt, even a Rust panic (pyo3's PanicException is a BaseException)."""

    class PanicException(BaseException):
        pass

    generator = loaded_service("gptj").generator
    tokenize = generator.tokenizer.__class__.__call__

    def fussy(tokenizer, texts, *args, **kwargs):
        if any("\x07" in text for text in texts):
            raise PanicException("called `Option::unwrap()` on a `None` value")
        return tokenize(tokenizer, texts, *args, **kwargs)

    monkeypatch.setattr(generator.tokenizer.__class__, "__call__", fussy)
    code, error = read_output(loaded_service("gptj").inference(make_input({"inputs": ["fine", "bell \x07"]})))
    assert code == 422
    assert "inputs[1] cannot be tokenized by this model's tokenizer (PanicException: called `Option" in error["error"]


def test_an_unexpected_failure_is_a_500_and_the_worker_keeps_serving(
    loaded_service, make_input, read_output, monkeypatch
):
    service = loaded_service("gptj")
    monkeypatch.setattr(service.generator.model, "generate", lambda *args, **kwargs: 1 / 0)
    code, error = read_output(service.inference(make_input({"inputs": "a cat"})))
    assert code == 500
    assert "generation failed: ZeroDivisionError" in error["error"]

    class PanicException(BaseException):  # what a Rust panic raises; DJL's engine would die of it
        pass

    def panic(*args, **kwargs):
        raise PanicException("index out of bounds")

    monkeypatch.setattr(service.generator.model, "generate", panic)
    code, error = read_output(service.inference(make_input({"inputs": "a cat"})))
    assert (code, error["error"]) == (500, "generation failed: PanicException: index out of bounds")
    monkeypatch.undo()
    code, _ = read_output(service.inference(make_input({"inputs": "a cat", "parameters": {"max_new_tokens": 2}})))
    assert code == 200


def test_handle_loads_once_on_djls_empty_start_up_call(
    handler_module, tiny_model_dir, make_input, read_output, monkeypatch
):
    from djl_python import Input

    service = handler_module.TextGenerationService()
    monkeypatch.setattr(handler_module, "_service", service)
    startup = Input()
    startup.properties = {"weights_dir": str(tiny_model_dir("gptj")), "dtype": "fp32", "model_dir": "/opt/ml/model"}
    assert handler_module.handle(startup) is None
    generator = service.generator
    assert generator is not None

    code, body = read_output(
        handler_module.handle(make_input({"inputs": "a cat", "parameters": {"max_new_tokens": 2, "details": True}}))
    )
    assert code == 200 and body["details"]["prompt_tokens"] == 2
    assert service.generator is generator  # not reloaded

    code, error = read_output(handler_module.handle(Input()))  # an empty body after start-up is a client error
    assert code == 400 and "request body is empty" in error["error"]


def test_a_tensor_parallel_degree_without_matching_ranks_fails_start_up(handler_module, tiny_model_dir):
    from lmi_config import ConfigError

    service = handler_module.TextGenerationService()
    with pytest.raises(ConfigError, match=r"option\.tensor_parallel_degree=2 but this worker group has WORLD_SIZE=1"):
        service.initialize({"weights_dir": str(tiny_model_dir("gptj")), "tensor_parallel_degree": 2})
    assert not service.initialized


def test_weights_come_from_the_folder_sagemaker_delivered(
    handler_module, tiny_model_dir, make_input, read_output, tmp_path, monkeypatch
):
    # The layout SageMaker makes of an S3Prefix ModelDataSource: the weights at the top of /opt/ml/model, the handler
    # in inference/<sha256>/ beside them; DJL passes the top as model_dir.
    delivered = tmp_path / "model"
    shutil.copytree(tiny_model_dir("opt"), delivered)
    shutil.copytree(HANDLER_DIR, delivered / "inference" / ("0" * 64))
    monkeypatch.delenv("WEIGHTS_S3_URI", raising=False)
    service = handler_module.TextGenerationService()
    service.initialize({"dtype": "fp32", "model_dir": str(delivered)})
    code, body = read_output(service.inference(make_input({"inputs": ["a cat"], "parameters": {"max_new_tokens": 3}})))
    assert code == 200 and len(body) == 1


def test_a_model_built_for_the_handler_to_download_is_refused_with_the_reason(
    handler_module, tiny_model_dir, monkeypatch
):
    from lmi_config import ConfigError

    monkeypatch.setenv("WEIGHTS_S3_URI", "s3://lmi-test-weights/runs/42/model/")
    service = handler_module.TextGenerationService()
    with pytest.raises(ConfigError, match=r"downloads nothing: SageMaker delivers the weights to model_dir"):
        service.initialize({"model_dir": str(tiny_model_dir("opt"))})
    assert not service.initialized


@pytest.mark.bad_input("config")
def test_a_staged_folder_whose_pickle_changed_since_staging_fails_start_up_naming_it(
    handler_module, tiny_model_dir, tmp_path
):
    import hashlib
    import json

    from lmi_config import ConfigError

    folder = tmp_path / "staged"
    shutil.copytree(tiny_model_dir("gptj"), folder)
    (folder / "training_args.bin").write_bytes(b"a pickle, as staged")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = {
        "files": {p.relative_to(folder).as_posix(): p.stat().st_size for p in files},
        "sha256": {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
    }
    (folder / ".staged-sha256.json").write_text(json.dumps(manifest))
    (folder / "training_args.bin").write_bytes(b"a pickle, not staged")  # same size, other bytes
    service = handler_module.TextGenerationService()
    with pytest.raises(
        ConfigError, match=r"training_args\.bin: its sha256 is not the [0-9a-f]{64} recorded when staged"
    ):
        service.initialize({"weights_dir": str(folder), "dtype": "fp32", "model_dir": str(folder)})
    assert not service.initialized
