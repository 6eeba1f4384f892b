"""Inference handler overhead: a request through the local endpoint against model.generate on the same tiny model
and prompt, in the same process, interleaved.

Three ways to get the same greedy continuation, measured in turn on every round (after warm-up rounds; the order
alternates from round to round):
- HTTP: POST /invocations to local.serve's LocalEndpoint (SageMaker's contract: JSON in, handler, JSON out);
- invoke: the same request straight into the handler (LocalEndpoint.invoke, no HTTP);
- generate: model.generate on the already tokenized prompt, nothing else.
HTTP / generate is the figure; invoke splits the overhead between the server and the handler (request parsing and
checks, tokenization, decoding, JSON). The handler's answer must equal the decoded model.generate output, or the
benchmark fails: it compares the same work.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Sample, paired_ratios, verdict

REPO_ROOT = Path(__file__).resolve().parent.parent
HANDLER_DIR = REPO_ROOT / "model_artifacts" / "deepspeed"
PROMPT = "the model likes"
TARGET_RATIO = 1.05


@dataclass
class HandlerResult:
    request_over_inner: Sample  # HTTP request / the generate inside it (the headline: same request, no noise between)
    request_overhead_ms: Sample  # HTTP request - the generate inside it
    handler_overhead_ms: Sample  # handler call (no HTTP) - the generate inside it
    inner_generate: Sample  # generate's own time inside the HTTP requests
    http: Sample
    invoke: Sample
    generate: Sample
    ratio_http: Sample
    ratio_invoke: Sample
    overhead_http_ms: Sample
    overhead_invoke_ms: Sample
    ratio_http_cpu: Sample
    ratio_invoke_cpu: Sample
    new_tokens: int
    max_new_tokens: int
    prompt_tokens: int
    threads: int
    warmup: int


def _post(url: str, body: bytes) -> bytes:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


def _time_generate_inside_handler(endpoint: Any) -> list[float]:
    """Wrap the served model's generate so that each request also reports how long generate took inside it.

    The request and the generate it contains are timed on the same request, so their difference is the handler's
    and the server's own work, free of the round-to-round noise of two separate measurements. The model is found
    through the module LocalEndpoint imported the handler as (private names of local/serve.py and model.py)."""
    module = sys.modules.get(getattr(endpoint, "_module_name", None) or "")
    generator = getattr(getattr(module, "_service", None), "generator", None)
    model = getattr(generator, "model", None)
    if model is None:
        raise RuntimeError(
            "cannot find the served model (local.serve.LocalEndpoint._module_name -> model.py's _service.generator"
            ".model); bench/handler.py must follow the renamed attribute"
        )
    durations: list[float] = []
    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - started)

    model.generate = generate
    return durations


def run(*, rounds: int = 40, warmup: int = 4, max_new_tokens: int = 64, threads: int = 1, log: Any = print):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from local.serve import LocalEndpoint
    from local.tiny import save_tiny_model

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="bench-handler-") as scratch:
        model_dir = save_tiny_model(Path(scratch) / "tiny-gptj", arch="gptj")
        # The baseline loads the same folder the endpoint serves: same weights, fp32 as the endpoint uses on CPU.
        model = AutoModelForCausalLM.from_pretrained(model_dir).float().eval()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        tokenizer.pad_token = tokenizer.eos_token
        encoded = tokenizer([PROMPT], return_tensors="pt")
        body = json.dumps(
            {"inputs": PROMPT, "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False}}
        ).encode()

        def generate() -> Any:  # as a user would call it (generate itself runs under torch.no_grad, as the handler)
            return model.generate(
                input_ids=encoded["input_ids"],
                attention_mask=encoded["attention_mask"],
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )

        with LocalEndpoint(HANDLER_DIR, model_dir, port=0) as endpoint:
            url = endpoint.url + "/invocations"
            inner = _time_generate_inside_handler(endpoint)
            # The timed request asks for no details (they cost log-softmaxes); one request with them gives the counts.
            answer = json.loads(_post(url, body))
            counted = json.loads(
                _post(
                    url,
                    json.dumps(
                        {
                            "inputs": PROMPT,
                            "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False, "details": True},
                        }
                    ).encode(),
                )
            )
            expected = tokenizer.decode(generate()[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            if answer["generated_text"] != expected:
                raise RuntimeError(
                    "the handler's greedy answer differs from model.generate on the same model and prompt: "
                    f"{answer['generated_text']!r} != {expected!r}; the comparison would not be of the same work"
                )
            headers = {"Content-Type": "application/json"}
            ways = {
                "http": lambda: _post(url, body),
                "invoke": lambda: endpoint.invoke(body, headers),
                "generate": generate,
            }
            wall: dict[str, list[float]] = {name: [] for name in (*ways, "http-inner", "invoke-inner")}
            cpu: dict[str, list[float]] = {name: [] for name in ways}
            for index in range(warmup + rounds):
                # Alternate the order every round, so that a drift of the machine favours none of the three.
                order = list(ways.items()) if index % 2 == 0 else list(reversed(ways.items()))
                for name, call in order:
                    # process_time counts every thread of this process (the HTTP server's too), not other processes.
                    cpu_started, started = time.process_time(), time.perf_counter()
                    inner.clear()
                    call()
                    elapsed, cpu_elapsed = time.perf_counter() - started, time.process_time() - cpu_started
                    if index >= warmup:
                        wall[name].append(elapsed)
                        cpu[name].append(cpu_elapsed)
                        if name != "generate":
                            wall[f"{name}-inner"].append(sum(inner))
            log(f"handler: {rounds} rounds of {counted['details']['generated_tokens']} new tokens measured")
    http, invoke, plain = wall["http"], wall["invoke"], wall["generate"]
    http_inner, invoke_inner = wall["http-inner"], wall["invoke-inner"]
    return HandlerResult(
        request_over_inner=paired_ratios(http, http_inner),
        request_overhead_ms=Sample.of([1000 * (a - b) for a, b in zip(http, http_inner, strict=True)], "ms"),
        handler_overhead_ms=Sample.of([1000 * (a - b) for a, b in zip(invoke, invoke_inner, strict=True)], "ms"),
        inner_generate=Sample.of(http_inner),
        http=Sample.of(http),
        invoke=Sample.of(invoke),
        generate=Sample.of(plain),
        ratio_http=paired_ratios(http, plain),
        ratio_invoke=paired_ratios(invoke, plain),
        overhead_http_ms=Sample.of([1000 * (a - b) for a, b in zip(http, plain, strict=True)], "ms"),
        overhead_invoke_ms=Sample.of([1000 * (a - b) for a, b in zip(invoke, plain, strict=True)], "ms"),
        ratio_http_cpu=paired_ratios(cpu["http"], cpu["generate"]),
        ratio_invoke_cpu=paired_ratios(cpu["invoke"], cpu["generate"]),
        new_tokens=int(counted["details"]["generated_tokens"]),
        max_new_tokens=max_new_tokens,
        prompt_tokens=int(counted["details"]["prompt_tokens"]),
        threads=threads,
        warmup=warmup,
    )


def markdown(result: HandlerResult) -> str:
    def row(name: str, sample: Sample, scale: float = 1000.0, unit: str = "ms", digits: int = 1) -> str:
        return (
            f"| {name} | {sample.runs} | {sample.median * scale:.{digits}f} {unit} | "
            f"{sample.low * scale:.{digits}f}-{sample.high * scale:.{digits}f} {unit} | {sample.spread_percent:.1f}% |"
        )

    ratio = result.request_over_inner
    lines = [
        "## Inference handler overhead",
        "",
        f"A tiny random GPT-J (`local/tiny.py`: 2 layers, hidden 64) served by `model_artifacts/deepspeed` through "
        f"`local/serve.py`'s LocalEndpoint; greedy, prompt {PROMPT!r} ({result.prompt_tokens} tokens), "
        f"max_new_tokens={result.max_new_tokens} ({result.new_tokens} generated); torch on {result.threads} "
        f"thread(s). Each round runs three things in turn (the order alternates) after {result.warmup} warm-up "
        "rounds: an HTTP request to /invocations, the same request straight into the handler "
        "(`LocalEndpoint.invoke`, no HTTP), and `model.generate` on the tokenized prompt with a separately loaded "
        "copy of the same weights. The handler's text was checked equal to the decoded `model.generate` output.",
        "",
        "The served model's `generate` is also timed inside each request, so a request and the `model.generate` it "
        "contains are measured side by side on the same call: their ratio and difference are the figure (a separate "
        "`model.generate` round on this shared 2-core machine varies by tens of percent from one round to the next, "
        "which swamps an overhead of a few percent; those side-by-side rounds are listed too).",
        "",
        "| figure | runs | median | lowest-highest | spread |",
        "|---|---:|---:|---:|---:|",
        row("**ratio HTTP request / the model.generate inside it**", ratio, 1.0, "x", 4),
        row("overhead per request: HTTP request - its model.generate", result.request_overhead_ms, 1.0, "ms", 2),
        row("overhead per request: handler call (no HTTP) - its model.generate", result.handler_overhead_ms, 1.0,
            "ms", 2),
        row("model.generate inside the HTTP requests", result.inner_generate),
        row("HTTP request to /invocations", result.http),
        row("the same request into the handler, no HTTP", result.invoke),
        row("separate `model.generate` (same weights, same inputs)", result.generate),
        row("ratio HTTP / separate generate (per round)", result.ratio_http, 1.0, "x", 3),
        row("ratio handler / separate generate (per round)", result.ratio_invoke, 1.0, "x", 3),
        row("ratio HTTP / separate generate, CPU time of this process", result.ratio_http_cpu, 1.0, "x", 3),
        "",
        f"Target: at most {TARGET_RATIO}x. Result: **{verdict(ratio.median, TARGET_RATIO)}** ({ratio.median:.4f}x: "
        f"{result.request_overhead_ms.median:.2f} ms per request on top of generation, of which "
        f"{result.handler_overhead_ms.median:.2f} ms in the handler (request parsing and checks, tokenizing, "
        "decoding, JSON) and the rest in the local HTTP server). On a real model generation takes far longer and "
        "the same few milliseconds are a smaller share.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
