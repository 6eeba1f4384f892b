"""Training step overhead: train.py's steady-state steps/s against a bare PyTorch loop on the same tiny GPT-J, data,
batch and optimizer, in the same process, interleaved (train.py, bare, train.py, bare, ...).

train.py runs through its Python entry point (`run(argv, environ)`, as `python train.py` would after parsing) with
the settings that make it comparable: no checkpoints (checkpoint_freq 0), validation only once after the last
step (validation_freq 0), no progress bar, no final model save, activation checkpointing off, a metrics line every
`window` steps. Its steady state is read from its own metrics (samples_per_s of every logging window after the
first, which holds the warm-up). The bare loop does the same arithmetic per step and nothing else: forward with
labels, backward, clip the gradient norm to 1.0 (train.py's default), AdamW step, zero_grad; it is timed over the
same steps after the same warm-up.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Sample, paired_ratios, verdict

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_DIR = REPO_ROOT / "training"
TARGET_RATIO = 1.10
BLOCK_SIZE = 32
BATCH_SIZE = 8
SEED = 7
LEARNING_RATE = 3e-3


@dataclass
class TrainingResult:
    train_py: Sample  # steps/s
    bare: Sample  # steps/s
    ratio: Sample  # bare steps/s / train.py steps/s = train.py time per step / bare time per step
    overhead_ms: Sample  # per step
    loop_ratio: Sample  # train.py's step time / the backend's forward-backward-optimizer time inside the same steps
    loop_overhead_ms: Sample  # per step: train.py's step time minus the backend calls inside it
    steps: int
    window: int
    threads: int
    parameters: int


def load_module(name: str, path: Path) -> Any:
    """An entry-point script loaded as a module under `name` (it is not a package member)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_data(root: Path) -> tuple[Path, Path, Path, Path]:
    """A tokenizer folder, a GPT-J config JSON, and packed train/validation blocks (prepare_data.py's format)."""
    from local.tiny import EOS_TOKEN, build_config, build_tokenizer, sentences

    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(root / "tokenizer")
    (root / "gptj.json").write_text(json.dumps(build_config("gptj", vocab_size=len(tokenizer)).to_dict()))
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    ids = [token for sentence in sentences(3000, seed=1) for token in (*tokenizer(sentence)["input_ids"], eos)]
    blocks = [ids[start : start + BLOCK_SIZE] for start in range(0, len(ids) - BLOCK_SIZE + 1, BLOCK_SIZE)]
    for name, part in (("train", blocks[:-64]), ("validation", blocks[-64:])):
        (root / name).mkdir()
        (root / name / "blocks.jsonl").write_text("".join(json.dumps({"input_ids": block}) + "\n" for block in part))
    return root / "tokenizer", root / "gptj.json", root / "train", root / "validation"


@contextlib.contextmanager
def time_backend_step(durations: list[float]) -> Any:
    """Times the torch backend's forward/backward and optimizer step, summed per training step, while train.py runs:
    what is left of train.py's step time is its own loop (data indexing, schedule, logging, bookkeeping)."""
    from finetune.backends.torch_backend import TorchBackend

    originals = {name: getattr(TorchBackend, name) for name in ("train_micro_step", "optimizer_step")}
    pending = [0.0]

    def timed(name: str) -> Any:
        original = originals[name]

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                pending[0] += time.perf_counter() - started
                if name == "optimizer_step":  # the last call of a training step
                    durations.append(pending[0])
                    pending[0] = 0.0

        return wrapper

    for name in originals:
        setattr(TorchBackend, name, timed(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(TorchBackend, name, original)


def train_py_steps_per_second(module: Any, data: tuple[Path, Path, Path, Path], run_dir: Path, steps: int, window: int):
    tokenizer, config, train, validation = data
    flags = {
        "train_dir": train, "validation_dir": validation, "model_config": config, "tokenizer_dir": tokenizer,
        "model_dir": run_dir / "model", "output_dir": run_dir / "output", "checkpoint_dir": run_dir / "checkpoints",
        "train_batch_size": BATCH_SIZE, "val_batch_size": BATCH_SIZE, "max_steps": steps, "lr": LEARNING_RATE,
        "logging_freq": window, "validation_freq": 0, "validation_batches": 1, "checkpoint_freq": 0,
        "progress_bar": "false", "save_final_model": "false", "activation_checkpointing": "false",
        "resume": "false", "seed": SEED, "backend": "torch",
    }  # fmt: skip
    argv = [item for name, value in flags.items() for item in (f"--{name}", str(value))]
    inner: list[float] = []
    with contextlib.redirect_stdout(io.StringIO()), time_backend_step(inner):
        summary = module.run(argv, {"PATH": "", "HOME": str(run_dir)})
    history = json.loads((run_dir / "output" / "metrics.json").read_text())["train"]
    steady = history[1:]  # the first window holds the warm-up
    if not steady or len(inner) != steps:
        raise RuntimeError(
            f"train.py logged {len(history)} window(s) and {len(inner)} backend steps for max_steps {steps}; "
            f"raise the steps above the window ({window})"
        )
    # Time-weighted: steps over seconds of all steady windows (each window's seconds = its steps / its rate).
    seconds = sum(window / (record["samples_per_s"] / BATCH_SIZE) for record in steady)
    steady_steps = window * len(steady)
    rate = steady_steps / seconds
    return rate, sum(inner[window : steady_steps + window]) / steady_steps, int(summary["parameters"])


def bare_steps_per_second(data: tuple[Path, Path, Path, Path], steps: int, window: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    from local.tiny import build_config

    _, config_file, train, _ = data
    values = json.loads(config_file.read_text())
    config = build_config("gptj", vocab_size=values["vocab_size"])
    config.use_cache = False  # as train.py does
    blocks = torch.tensor(
        [json.loads(line)["input_ids"] for line in (train / "blocks.jsonl").read_text().splitlines()], dtype=torch.long
    )
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    order = list(range(blocks.shape[0]))
    random.Random(SEED).shuffle(order)

    def step(index: int) -> None:
        rows = [order[(index * BATCH_SIZE + offset) % len(order)] for offset in range(BATCH_SIZE)]
        batch = blocks[rows]
        loss = model(input_ids=batch, attention_mask=torch.ones_like(batch), labels=batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for index in range(window):  # the same warm-up train.py's first window gives it
        step(index)
    started = time.perf_counter()
    for index in range(window, steps):
        step(index)
    return (steps - window) / (time.perf_counter() - started)


def run(*, pairs: int = 9, steps: int = 110, window: int = 10, threads: int = 1, log: Any = print) -> TrainingResult:
    import torch

    if steps % window or steps < 2 * window:
        raise ValueError(f"steps={steps} must be a multiple of the logging window ({window}), at least two windows")
    torch.set_num_threads(threads)
    for path in (str(TRAINING_DIR), str(REPO_ROOT)):
        if path not in sys.path:
            sys.path.insert(0, path)  # train.py imports `finetune` as the container does, from its own folder
    train_module = load_module("bench_train_entry", TRAINING_DIR / "train.py")
    train_rates, bare_rates, inner_seconds = [], [], []
    parameters = 0
    with tempfile.TemporaryDirectory(prefix="bench-training-") as scratch:
        root = Path(scratch)
        data = write_data(root)
        for index in range(pairs):
            log(f"training: pair {index + 1}/{pairs} ({steps} steps each of train.py and the bare loop)")
            # Alternate which goes first, so that a drift of the machine favours neither.
            if index % 2:
                bare = bare_steps_per_second(data, steps, window)
            rate, inner, parameters = train_py_steps_per_second(
                train_module, data, root / f"run-{index}", steps, window
            )
            if not index % 2:
                bare = bare_steps_per_second(data, steps, window)
            train_rates.append(rate)
            inner_seconds.append(inner)
            bare_rates.append(bare)
    return TrainingResult(
        train_py=Sample.of(train_rates, "steps/s"),
        bare=Sample.of(bare_rates, "steps/s"),
        ratio=paired_ratios(bare_rates, train_rates),
        overhead_ms=Sample.of([1000 * (1 / t - 1 / b) for t, b in zip(train_rates, bare_rates, strict=True)], "ms"),
        loop_ratio=paired_ratios([1 / rate for rate in train_rates], inner_seconds),
        loop_overhead_ms=Sample.of(
            [1000 * (1 / rate - inner) for rate, inner in zip(train_rates, inner_seconds, strict=True)], "ms"
        ),
        steps=steps,
        window=window,
        threads=threads,
        parameters=parameters,
    )


def markdown(result: TrainingResult) -> str:
    def row(name: str, sample: Sample, unit: str, digits: int = 2) -> str:
        return (
            f"| {name} | {sample.runs} | {sample.median:.{digits}f} {unit} | {sample.low:.{digits}f}-"
            f"{sample.high:.{digits}f} {unit} | {sample.spread_percent:.1f}% |"
        )

    ratio = result.ratio
    lines = [
        "## Training step overhead",
        "",
        f"A tiny random GPT-J ({result.parameters:,} parameters), batch {BATCH_SIZE} x {BLOCK_SIZE} tokens, AdamW, "
        f"fp32 on CPU, torch on {result.threads} thread(s). Each pair runs `training/train.py` "
        f"(`--backend torch`, no checkpoints, validation only after the last step, no progress bar, no final save, "
        f"activation checkpointing off, a metrics line every {result.window} steps) for {result.steps} steps, then a "
        f"bare PyTorch loop (forward, backward, clip to 1.0, AdamW step, zero_grad) for as many. Steady state: "
        f"train.py's own samples_per_s over every logging window but the first; the bare loop timed over the same "
        f"steps after the same {result.window} warm-up steps.",
        "",
        "| figure | runs | median | lowest-highest | spread |",
        "|---|---:|---:|---:|---:|",
        row("train.py", result.train_py, "steps/s"),
        row("bare PyTorch loop", result.bare, "steps/s"),
        row("**ratio time per step, train.py / bare** (per pair)", ratio, "x", 3),
        row("overhead per step, train.py - bare", result.overhead_ms, "ms"),
        row("train.py's step / the backend's step calls inside it (same steps)", result.loop_ratio, "x", 3),
        row("train.py's own loop per step (step time - backend calls)", result.loop_overhead_ms, "ms"),
        "",
        f"Target: at most {TARGET_RATIO}x. Result: **{verdict(ratio.median, TARGET_RATIO)}** ({ratio.median:.3f}x, "
        f"{result.overhead_ms.median:.2f} ms per step). The last two rows time the torch backend's "
        "`train_micro_step` + `optimizer_step` inside train.py's own steps: what remains is train.py's loop "
        f"(data indexing, learning-rate schedule, logging), {result.loop_overhead_ms.median:.2f} ms per step, "
        "measured on the same steps and so free of the run-to-run noise of the side-by-side figure. The rest of "
        "the side-by-side difference is in how the backend does the same arithmetic (AdamW over two parameter "
        "groups, decay and no decay, where the bare loop has one; the loss kept as a float for logging).",
    ]
    return "\n".join(lines) + "\n"
