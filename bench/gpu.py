"""`make bench-gpu`: the figures that need a CUDA GPU, written into the GPU section of BENCHMARKS.md.

    python -m bench.gpu                      # both, on GPU 0
    python -m bench.gpu --only generation    # or: training
    python -m bench.gpu --layers 8           # a shallower GPT-J-shaped model (smaller GPUs)

1. Generation: DeepSpeed kernel-injected generation latency per token against plain Hugging Face generate, for a
   GPT-J-shaped model (GPT-J-6B's config: 28 layers, hidden 4096, 16 heads, rotary 64, vocabulary 50400) with
   random fp16 weights, batch 1, greedy. Per-token latency is (time of N new tokens - time of 1) / (N - 1), which
   leaves the prompt's forward pass out. Both models are measured in alternation when the GPU holds two copies;
   otherwise Hugging Face first, then the same model injected in place. Kernel injection needs DeepSpeed's
   transformer_inference op (prebuilt in the LMI DeepSpeed image; elsewhere it is compiled on first use, which
   needs the CUDA toolkit) and a transformers version DeepSpeed's GPT-J policy knows (the LMI 0.27.0 image's).
2. Training: train.py's steady-state tokens/s on one GPU (torch backend, bf16 where the GPU has it, else fp16,
   activation checkpointing on) for the deepest GPT-J-shaped model whose weights, gradients and AdamW state
   (16 bytes per parameter) fit in 60% of the GPU's free memory, on random token blocks of 1024.

Without a CUDA GPU it says so and changes nothing. Never needed for CI.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.stats import Sample

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "BENCHMARKS.md"
# BENCHMARKS.md keeps the GPU section between these markers; `make bench` carries it over unchanged.
GPU_START, GPU_END = "<!-- bench-gpu:start -->", "<!-- bench-gpu:end -->"
GPTJ = {"n_layer": 28, "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048, "vocab_size": 50400}
PROMPT_TOKENS = 32
NEW_TOKENS = 128
TRAIN_BLOCK = 1024
TRAIN_BATCH = 4


def _gptj_config(layers: int) -> Any:
    import transformers

    config = transformers.GPTJConfig(**{**GPTJ, "n_layer": layers}, bos_token_id=0, eos_token_id=0)
    config.use_cache = True
    return config


def _dtype_argument(dtype: Any) -> dict[str, Any]:
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return {"dtype" if major >= 5 else "torch_dtype": dtype}  # renamed in transformers 5


def _random_model(layers: int, dtype: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(_gptj_config(layers), **_dtype_argument(dtype))
    return model.eval()


def _timed_generate(model: Any, prompt: Any, new_tokens: int) -> tuple[float, Any]:
    import torch

    synchronize = torch.cuda.synchronize if prompt.is_cuda else (lambda: None)
    synchronize()
    started = time.perf_counter()
    output = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,  # random weights may emit EOS early; every run must make the same tokens
        do_sample=False,
        pad_token_id=0,
    )
    synchronize()
    return time.perf_counter() - started, output


def per_token_latency(model: Any, prompt: Any, new_tokens: int) -> tuple[float, Any]:
    """Seconds per generated token, the prompt's forward pass left out: (time of N tokens - time of 1) / (N - 1)."""
    long, output = _timed_generate(model, prompt, new_tokens)
    short, _ = _timed_generate(model, prompt, 1)
    return (long - short) / (new_tokens - 1), output


def generation(*, layers: int, rounds: int, warmup: int) -> str:
    import deepspeed
    import torch

    if rounds < 1:
        raise ValueError(f"--rounds {rounds}: at least 1 measured round is needed")
    hf_model = _random_model(layers, torch.float16)
    weights_bytes = sum(p.numel() * p.element_size() for p in hf_model.parameters())
    free, _ = torch.cuda.mem_get_info()
    interleaved = free > 1.3 * weights_bytes
    ds_source = copy.deepcopy(hf_model) if interleaved else hf_model
    generator = torch.Generator(device="cuda").manual_seed(0)
    prompt = torch.randint(1, GPTJ["vocab_size"], (1, PROMPT_TOKENS), device="cuda", generator=generator)

    hf_per_token: list[float] = []
    ds_per_token: list[float] = []

    if not interleaved:
        for index in range(warmup + rounds):
            value, hf_tokens = per_token_latency(hf_model, prompt, NEW_TOKENS)
            if index >= warmup:
                hf_per_token.append(value)
    engine = deepspeed.init_inference(
        ds_source, tensor_parallel={"tp_size": 1}, dtype=torch.float16, replace_with_kernel_inject=True
    )
    ds_model = engine.module  # what the LMI handler generates with (model_artifacts/deepspeed/lmi_loading.py)
    for index in range(warmup + rounds):
        order = [("hf", hf_model), ("ds", ds_model)] if interleaved else [("ds", ds_model)]
        if index % 2:
            order.reverse()
        for name, model in order:
            value, tokens = per_token_latency(model, prompt, NEW_TOKENS)
            if index < warmup:
                continue
            if name == "hf":
                hf_per_token.append(value)
                hf_tokens = tokens
            else:
                ds_per_token.append(value)
                ds_tokens = tokens
    agreement = float((hf_tokens[0, PROMPT_TOKENS:] == ds_tokens[0, PROMPT_TOKENS:]).float().mean())
    hf, ds = Sample.of(hf_per_token), Sample.of(ds_per_token)
    lines = [
        "### Generation latency per token: DeepSpeed kernel injection against Hugging Face generate",
        "",
        f"GPT-J-shaped model ({layers} layers, {weights_bytes / 1e9:.1f} GB of fp16 weights, random), batch 1, "
        f"prompt {PROMPT_TOKENS} tokens, {NEW_TOKENS} new tokens, greedy; "
        + ("both models on the GPU, measured in alternation" if interleaved else "Hugging Face first, then the "
           "same model injected (the GPU does not hold two copies)")
        + f"; {warmup} warm-up rounds. Per token: (time for {NEW_TOKENS} tokens - time for 1) / {NEW_TOKENS - 1}.",
        "",
        "| figure | runs | median | lowest-highest | spread |",
        "|---|---:|---:|---:|---:|",
        f"| Hugging Face generate | {hf.runs} | {hf.median * 1000:.2f} ms/token | {hf.low * 1000:.2f}-"
        f"{hf.high * 1000:.2f} | {hf.spread_percent:.1f}% |",
        f"| DeepSpeed init_inference, kernel injection | {ds.runs} | {ds.median * 1000:.2f} ms/token | "
        f"{ds.low * 1000:.2f}-{ds.high * 1000:.2f} | {ds.spread_percent:.1f}% |",
        f"| speed-up, Hugging Face / DeepSpeed (medians) | | {hf.median / ds.median:.2f}x | | |",
        "",
        f"Greedy tokens identical at {agreement:.0%} of positions (fused fp16 kernels round differently, so random "
        "weights can make greedy choices diverge).",
    ]  # fmt: skip
    del engine, ds_model, ds_source, hf_model
    torch.cuda.empty_cache()
    return "\n".join(lines) + "\n"


def _training_layers(free_bytes: int) -> int:
    per_layer = 12 * GPTJ["n_embd"] ** 2  # attention 4 h^2 + MLP 8 h^2
    embeddings = 2 * GPTJ["vocab_size"] * GPTJ["n_embd"]  # input embedding + untied LM head
    budget = 0.6 * free_bytes / 16  # fp32 weights, gradients and two AdamW moments
    return max(1, min(GPTJ["n_layer"], int((budget - embeddings) // per_layer)))


def run_train_py(root: Path, flags: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """train.py through its Python entry point (as `python train.py --flag value ...` after parsing), its output
    kept quiet, in `root` (its HOME); returns its summary and its metrics.json (the flags must set output_dir)."""
    from bench.training import load_module

    for path in (str(REPO_ROOT / "training"), str(REPO_ROOT)):
        if path not in sys.path:
            sys.path.insert(0, path)
    module = load_module("bench_gpu_train_entry", REPO_ROOT / "training" / "train.py")
    argv = [item for name, value in flags.items() for item in (f"--{name}", str(value))]
    with contextlib.redirect_stdout(io.StringIO()):
        summary = module.run(argv, {"PATH": os.environ.get("PATH", ""), "HOME": str(root)})
    return summary, json.loads((Path(flags["output_dir"]) / "metrics.json").read_text())


def training(*, layers: int | None, steps: int, window: int) -> str:
    import torch

    from local.tiny import build_tokenizer

    free, _ = torch.cuda.mem_get_info()
    layers = layers or _training_layers(free)
    precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    with tempfile.TemporaryDirectory(prefix="bench-gpu-training-") as scratch:
        root = Path(scratch)
        build_tokenizer().save_pretrained(root / "tokenizer")
        config = _gptj_config(layers).to_dict()
        (root / "gptj.json").write_text(json.dumps(config))
        generator = torch.Generator().manual_seed(0)
        for name, count in (("train", steps * TRAIN_BATCH + TRAIN_BATCH), ("validation", TRAIN_BATCH)):
            (root / name).mkdir()
            blocks = torch.randint(1, GPTJ["vocab_size"], (count, TRAIN_BLOCK), generator=generator).tolist()
            (root / name / "blocks.jsonl").write_text("".join(json.dumps({"input_ids": b}) + "\n" for b in blocks))
        flags = {
            "train_dir": root / "train", "validation_dir": root / "validation", "model_config": root / "gptj.json",
            "tokenizer_dir": root / "tokenizer", "model_dir": root / "model", "output_dir": root / "output",
            "checkpoint_dir": root / "checkpoints", "train_batch_size": TRAIN_BATCH, "val_batch_size": TRAIN_BATCH,
            "max_steps": steps, "logging_freq": window, "validation_freq": 0, "validation_batches": 1,
            "checkpoint_freq": 0, "progress_bar": "false", "save_final_model": "false", "resume": "false",
            "activation_checkpointing": "true", "backend": "torch", precision: "true",
        }  # fmt: skip
        torch.cuda.reset_peak_memory_stats()
        summary, metrics = run_train_py(root, flags)
        history = metrics["train"]
    steady = Sample.of([record["tokens_per_s"] for record in history[1:]], "tokens/s")
    peak = torch.cuda.max_memory_allocated() / 2**30
    lines = [
        "### Training throughput of train.py on one GPU",
        "",
        f"GPT-J-shaped model, {layers} of 28 layers ({int(summary['parameters']) / 1e9:.2f} B parameters), "
        f"{precision} autocast over fp32 weights, activation checkpointing on, batch {TRAIN_BATCH} x {TRAIN_BLOCK} "
        f"tokens, AdamW, `--backend torch`; {steps} steps with a metrics line every {window}; the first window "
        f"(warm-up) left out. Peak GPU memory {peak:.1f} GiB.",
        "",
        "| figure | windows | median | lowest-highest | spread |",
        "|---|---:|---:|---:|---:|",
        f"| train.py tokens/s | {steady.runs} | {steady.median:,.0f} | {steady.low:,.0f}-{steady.high:,.0f} | "
        f"{steady.spread_percent:.1f}% |",
    ]
    return "\n".join(lines) + "\n"


def write_section(body: str, output: Path) -> None:
    import torch

    from bench.machine import describe

    gpu = torch.cuda.get_device_name(0)
    machine = "; ".join(f"{key} {value}" for key, value in describe().items() if key in ("CPU", "torch", "deepspeed"))
    section = f"{GPU_START}\n## GPU\n\nMeasured by `make bench-gpu` on {gpu} ({machine}).\n\n{body}{GPU_END}"
    text = output.read_text() if output.is_file() else "# Benchmarks\n\n"
    if GPU_START in text and GPU_END in text:
        text = text[: text.index(GPU_START)] + section + text[text.index(GPU_END) + len(GPU_END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    output.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("generation", "training"), help="one of the two (default: both)")
    parser.add_argument("--layers", type=int, help="layers of the GPT-J-shaped models (default: 28 / what fits)")
    parser.add_argument("--rounds", type=int, default=5, help="measured generation rounds (default 5)")
    parser.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="default: BENCHMARKS.md")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "make bench-gpu: no CUDA GPU is visible here (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}); nothing was measured and {args.output.name} is unchanged. Run it on a GPU "
            "instance (the LMI DeepSpeed image has the kernels prebuilt).",
            file=sys.stderr,
        )
        return 0
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    parts, failed = [], False
    for name in ("generation", "training"):
        if args.only and args.only != name:
            continue
        try:
            if name == "generation":
                parts.append(generation(layers=args.layers or GPTJ["n_layer"], rounds=args.rounds, warmup=2))
            else:
                parts.append(training(layers=args.layers, steps=args.steps, window=5))
        except Exception as error:  # report what failed (e.g. no kernel injection for this transformers) and go on
            failed = True
            parts.append(f"### {name}\n\nFAILED: {type(error).__name__}: {error}\n\n```\n"
                         f"{traceback.format_exc()[-2500:]}```\n")  # fmt: skip
    write_section("\n".join(parts), args.output)
    print(f"make bench-gpu: wrote the GPU section of {args.output}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
