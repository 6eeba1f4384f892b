"""The units of `make gpu-check` that bench/gpu_check.py runs, each in a process of its own: environment,
inject-<arch> and train-fp16 here, int8-bloom and int8-checkpoint-bloom in gpu_check_int8.py."""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path
from typing import Any

from bench.gpu import per_token_latency, run_train_py
from bench.gpu_check import FAIL, FP16_TOLERANCE, LMI_IMAGE, PASS, UNAVAILABLE, PartResult, log
from bench.gpu_check_handler import (
    CONTEXT,
    SIZES,
    brief,
    build_folder,
    compare_calls,
    guarded,
    handler_model,
    injected_layers,
    load_reference,
    model_config,
    serve,
    use_handler_modules,
)
from bench.stats import Sample

TIMING_PROMPT, TIMING_TOKENS = 32, 64
TRAIN_SIZES = {"layers": 4, "hidden": 512, "heads": 8}
TRAIN_STEPS, TRAIN_WINDOW, TRAIN_LR = 60, 5, 1e-3
LOSS_DROP = 0.8  # the last logged loss at most this fraction of the first


def run(unit: str, scratch: Path) -> list[PartResult]:
    from bench import gpu_check_int8

    use_handler_modules()
    parts: dict[str, Any] = {
        "environment": environment,
        "inject-gptj": lambda scratch: injection("gptj", scratch),
        "inject-opt": lambda scratch: injection("opt", scratch),
        "inject-bloom": lambda scratch: injection("bloom", scratch),
        "int8-bloom": gpu_check_int8.int8_direct,
        "int8-checkpoint-bloom": gpu_check_int8.int8_checkpoint,
        "train-fp16": training,
    }
    return [guarded(unit, lambda: parts[unit](scratch))]


# --- environment ------------------------------------------------------------------------------------------------


def environment(scratch: Path) -> PartResult:
    import platform

    import torch
    import transformers

    numbers: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "transformers": transformers.__version__,
    }
    image_fix = f"or run inside the LMI 0.27.0 image ({LMI_IMAGE}), which has DeepSpeed 0.12.6 with its ops prebuilt"
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
    except Exception as error:
        return PartResult(
            "environment",
            UNAVAILABLE,
            f"DeepSpeed cannot be imported: {brief(error)}",
            numbers,
            fix=f"install it beside this torch (docs/gpu-check.md), {image_fix}",
        )
    numbers.update(deepspeed=deepspeed.__version__, deepspeed_accelerator=get_accelerator().device_name())
    if numbers["deepspeed_accelerator"] != "cuda":
        return PartResult(
            "environment",
            UNAVAILABLE,
            f"DeepSpeed chose the {numbers['deepspeed_accelerator']!r} accelerator",
            numbers,
            fix="run with DS_ACCELERATOR unset or set to cuda",
        )
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder import InferenceBuilder

    prebuilt = bool(installed_ops.get("transformer_inference"))
    log(f"environment: loading DeepSpeed's transformer_inference op ({'prebuilt' if prebuilt else 'JIT compile'})")
    started = time.monotonic()
    try:
        InferenceBuilder().load()
    except BaseException as error:  # the JIT build raises RuntimeError, or exits through sys.exit in some versions
        return PartResult(
            "environment",
            UNAVAILABLE,
            f"DeepSpeed's transformer_inference op cannot be {'loaded' if prebuilt else 'compiled'}: {brief(error)}",
            numbers,
            fix=f"JIT compilation needs nvcc for CUDA {torch.version.cuda} (CUDA_HOME) and ninja; " + image_fix,
        )
    seconds = time.monotonic() - started
    numbers["transformer_inference"] = "prebuilt" if prebuilt else f"JIT-built or cached, {seconds:.0f} s"
    numbers["bloom_kernel_injection"] = bloom_injection(scratch)
    return PartResult(
        "environment",
        PASS,
        f"DeepSpeed {deepspeed.__version__} on {numbers['gpu']} (torch "
        f"{torch.__version__}, CUDA {torch.version.cuda}, transformers {transformers.__version__}); "
        f"transformer_inference {numbers['transformer_inference']}",
        numbers,
    )


def bloom_injection(scratch: Path) -> str:
    """The handler's own answer to BLOOM kernel injection with this transformers: "allowed" or its refusal."""
    import transformers
    from lmi_config import ConfigError, HandlerConfig
    from lmi_loading import plan_loading

    config = HandlerConfig(weights=str(scratch), kernel_injection="true", context_length=CONTEXT)
    try:
        plan_loading(
            config,
            transformers.BloomConfig(),
            str(scratch),
            cuda_available=True,
            transformers_version=transformers.__version__,
        )
    except ConfigError as error:
        return f"the handler refuses it: {error}"
    return "allowed"


# --- inject-<arch> ----------------------------------------------------------------------------------------------


def injection(
    arch: str,
    scratch: Path,
    *,
    device: str = "cuda",
    dtype: str = "fp16",
    kernel_injection: str = "true",
    sizes: dict[str, int] | None = None,
    timing_rounds: int = 3,
) -> PartResult:
    import torch

    sizes = sizes or SIZES[arch]
    name = f"inject-{arch}"
    log(f"{name}: building a random {arch} ({sizes}) and its Hugging Face reference ({dtype}, {device})")
    folder = build_folder(arch, scratch / f"{arch}-model", sizes)
    hf_model, hf_tokenizer = load_reference(folder, dtype, device)
    reference, eos_ids = serve(
        hf_model, hf_tokenizer, context_length=CONTEXT, max_input_length=CONTEXT - 1, scores=True, tolerate=False
    )
    log(f"{name}: lmi_loading.load_model with kernel_injection={kernel_injection}")
    model, tokenizer, plan = handler_model(folder, dtype, kernel_injection, device)
    numbers: dict[str, Any] = {
        "parameters_m": round(sum(p.numel() for p in hf_model.parameters()) / 1e6, 1),
        "kernel_injection": plan.kernel_injection,
        **sizes,
    }
    if kernel_injection == "true":
        numbers["injected_layers"] = injected_layers(model)
        if numbers["injected_layers"] != sizes["layers"]:
            return PartResult(
                name,
                FAIL,
                f"kernel injection replaced {numbers['injected_layers']} of "
                f"{sizes['layers']} transformer layers with DeepSpeed's",
                numbers,
            )
    candidate, _ = serve(
        model,
        tokenizer,
        context_length=plan.context_length,
        max_input_length=plan.max_input_length,
        scores=False,
        tolerate=True,
    )
    passed, summary, agreement = compare_calls(reference, candidate, tolerance=FP16_TOLERANCE, eos_ids=eos_ids)
    numbers["agreement"] = agreement
    if timing_rounds and any(not isinstance(outcome, str) for outcome in candidate):
        log(f"{name}: per-token latency, {timing_rounds} rounds of {TIMING_TOKENS} tokens each")
        prompt = torch.randint(1, len(tokenizer), (1, TIMING_PROMPT), generator=torch.Generator().manual_seed(0))
        try:
            hf, ds = latencies(hf_model, model, prompt.to(device), timing_rounds)
        except Exception as error:
            return PartResult(name, FAIL, f"{summary}; timing failed: {brief(error)}", numbers)
        numbers.update(hf_ms_per_token=round(hf.median * 1e3, 3), handler_ms_per_token=round(ds.median * 1e3, 3))
        if min(hf.median, ds.median) <= 0:  # (time of N tokens - time of 1) drowned in noise
            summary += "; per-token times too noisy to compare"
        else:
            numbers["speedup"] = round(hf.median / ds.median, 2)
            summary += (
                f"; {numbers['speedup']:.2f}x the speed of Hugging Face generate ({numbers['hf_ms_per_token']:.2f} "
                f"-> {numbers['handler_ms_per_token']:.2f} ms/token, batch 1)"
            )
    return PartResult(name, PASS if passed else FAIL, summary, numbers)


def latencies(hf_model: Any, model: Any, prompt: Any, rounds: int) -> tuple[Sample, Sample]:
    """Per-token latency of both, one warm-up each, then measured in alternation (A B, B A, ...)."""
    hf: list[float] = []
    ds: list[float] = []
    per_token_latency(hf_model, prompt, TIMING_TOKENS)
    per_token_latency(model, prompt, TIMING_TOKENS)
    for index in range(rounds):
        order = [(hf, hf_model), (ds, model)]
        for sink, which in order if index % 2 == 0 else reversed(order):
            sink.append(per_token_latency(which, prompt, TIMING_TOKENS)[0])
    return Sample.of(hf), Sample.of(ds)


# --- train-fp16 -------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def watch_loss_scaler(updates: list[tuple[float, float]]):
    """Records (scale before, scale after) at every GradScaler.update() while train.py runs."""
    import torch

    scaler_class = torch.amp.GradScaler if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler  # < 2.3
    original = scaler_class.update

    def update(self: Any, new_scale: Any = None) -> None:
        before = float(self.get_scale())
        original(self, new_scale)
        updates.append((before, float(self.get_scale())))

    scaler_class.update = update
    try:
        yield
    finally:
        scaler_class.update = original


def judge_training(
    losses: list[float], validation: list[float], updates: list[tuple[float, float]], *, steps: int, precision: str
) -> tuple[bool, str, dict[str, Any]]:
    numbers: dict[str, Any] = {
        "steps": steps,
        "precision": precision,
        "losses": [round(x, 4) for x in losses],
        "val_loss": [round(x, 4) for x in validation],
    }
    problems = []
    if not losses or not all(math.isfinite(value) for value in [*losses, *validation]):
        problems.append(f"a loss is missing or not finite: train {numbers['losses']}, validation {numbers['val_loss']}")
    elif not losses[-1] <= LOSS_DROP * losses[0]:
        problems.append(
            f"the loss did not fall: {losses[0]:.3f} -> {losses[-1]:.3f}, expected at most {LOSS_DROP:.0%} of the first"
        )
    if precision == "fp16":
        skipped = sum(1 for before, after in updates if after < before)
        numbers.update(
            scaler_updates=len(updates),
            skipped_steps=skipped,
            scales=[updates[0][0], updates[-1][1]] if updates else [],
        )
        if len(updates) != steps:
            problems.append(f"the fp16 loss scaler stepped {len(updates)} times in {steps} steps")
        elif skipped > steps // 2:
            problems.append(f"{skipped} of {steps} steps were skipped for fp16 overflow")
    text = f"{precision} loss {losses[0]:.3f} -> {losses[-1]:.3f} over {steps} steps" if losses else "no loss logged"
    if precision == "fp16" and updates:
        text += (
            f", the loss scaler updated {len(updates)} times ({numbers['skipped_steps']} steps skipped for overflow, "
            f"scale {updates[0][0]:g} -> {updates[-1][1]:g})"
        )
    return not problems, "; ".join([*problems, text]), numbers


def training(
    scratch: Path,
    *,
    precision: str = "fp16",
    sizes: dict[str, int] | None = None,
    steps: int = TRAIN_STEPS,
    window: int = TRAIN_WINDOW,
    lr: float = TRAIN_LR,
) -> PartResult:
    from bench.training import write_data

    sizes = sizes or TRAIN_SIZES
    root = scratch / f"train-{precision}"
    root.mkdir(parents=True)
    log(f"train-{precision}: train.py --backend torch{'' if precision == 'fp32' else f' --{precision}'}, {steps} steps")
    tokenizer_dir, tiny_config, train_dir, validation_dir = write_data(root)  # learnable sentences, packed
    vocab_size = json.loads(tiny_config.read_text())["vocab_size"]
    config_file = root / "model.json"
    config_file.write_text(json.dumps(model_config("gptj", vocab_size, sizes, init_range=0.02).to_dict()))
    flags = {
        "train_dir": train_dir, "validation_dir": validation_dir, "model_config": config_file,
        "tokenizer_dir": tokenizer_dir, "model_dir": root / "model", "output_dir": root / "output",
        "checkpoint_dir": root / "checkpoints", "train_batch_size": 8, "val_batch_size": 8, "max_steps": steps,
        "lr": lr, "warmup": 0.1, "logging_freq": window, "validation_freq": 0, "validation_batches": 4,
        "checkpoint_freq": 0, "progress_bar": "false", "save_final_model": "false", "resume": "false",
        "activation_checkpointing": "true", "backend": "torch", "seed": 7,
    }  # fmt: skip
    if precision != "fp32":
        flags[precision] = "true"
    updates: list[tuple[float, float]] = []
    with watch_loss_scaler(updates) if precision == "fp16" else contextlib.nullcontext():
        _, metrics = run_train_py(root, flags)
    losses = [record["loss"] for record in metrics["train"]]
    validation = [record["val_loss"] for record in metrics["validation"]]
    passed, summary, numbers = judge_training(losses, validation, updates, steps=steps, precision=precision)
    return PartResult(f"train-{precision}", PASS if passed else FAIL, summary, {**numbers, **sizes})
