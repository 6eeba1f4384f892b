"""Helpers for the training tests (imported by conftest.py and the test modules; fixtures live in conftest.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINING_DIR = REPO_ROOT / "training"
# As in the container, where train.py runs from the source dir and imports `finetune` as a top-level package.
for path in (str(TRAINING_DIR), str(REPO_ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

# Small enough for a few hundred steps in seconds on 2 cores, and still GPT-J's code path.
BLOCK_SIZE = 32
# What a LoRA run writes to SM_MODEL_DIR, whichever backend trained it (base_model.json: finetune/adapters.py).
ADAPTER_FOLDER_FILES = [
    "adapter.tar.gz",
    "adapter_config.json",
    "adapter_model.safetensors",
    "base_model.json",
    "tokenizer.json",
    "tokenizer_config.json",
]
# transformers 4.x (the images' 4.21 and 4.46.3) also writes special_tokens_map.json; 5.x folds it into
# tokenizer_config.json.
TOKENIZER_4X_FILES = {"special_tokens_map.json"}
# Attention and MLP projections of Llama, Mistral and Qwen2, by name (PEFT matches the last name part).
LLAMA_LIKE_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# What adapter_config.json holds for the tiny LoRA runs of the DDP and FSDP tests (their flags: r 8, alpha 16,
# dropout 0.1, base "tiny-base"), beside PEFT's defaults for everything else.
TINY_LORA_ADAPTER_CONFIG = {
    "peft_type": "LORA",
    "task_type": "CAUSAL_LM",
    "r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.1,
    "bias": "none",
    "target_modules": LLAMA_LIKE_TARGETS,
    "base_model_name_or_path": "example/tiny-base",
}


def adapter_folder_files(folder: Path) -> list[str]:
    """The names in a LoRA run's model folder, without the tokenizer files only some transformers lines write."""
    return sorted(path.name for path in folder.iterdir() if path.name not in TOKENIZER_4X_FILES)


def assert_adapter_config(folder: Path, **asked: object) -> None:
    """adapter_config.json as a whole: every field is this PEFT's default (LoraConfig()) except those in `asked`,
    which hold exactly what the run asked for, so a LoRA setting lost on its way to PEFT (dropout, bias, task type,
    targets) fails here, whichever field it is. Targets compare as sets: PEFT stores them as one."""
    import json

    import peft

    saved = json.loads((folder / "adapter_config.json").read_text())
    defaults = json.loads(json.dumps(peft.LoraConfig().to_dict(), default=sorted))
    # save_pretrained writes the config for loading the adapter to run it, not to train it.
    expected = {**defaults, **asked, "inference_mode": True}
    for config in (saved, expected):
        config["target_modules"] = sorted(config["target_modules"] or [])
    differing = {key: (saved.get(key), expected.get(key)) for key in saved.keys() | expected.keys()}
    differing = {key: values for key, values in differing.items() if values[0] != values[1]}
    assert not differing, f"adapter_config.json fields as (written, asked for or PEFT's default): {differing}"


def load_saved_model(folder: Path):
    """The causal LM of a model folder a job wrote (config.json, safetensors), loaded the way this transformers line
    can: from_pretrained where it reads safetensors, else (4.21, the SMP v1 image, has no safetensors support) the
    evaluation step's own loader, finetune.modeling.load_hf_model."""
    import transformers.utils
    from finetune.modeling import load_hf_model

    if hasattr(transformers.utils, "SAFE_WEIGHTS_NAME"):
        return transformers.AutoModelForCausalLM.from_pretrained(folder)
    return load_hf_model(str(folder))


def load_module(name: str, path: Path) -> ModuleType:
    """A module loaded from a file under a unique name (the stand-ins, the entry-point scripts)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_script(script: str, args: list[str], env: dict[str, str] | None = None, timeout: int = 120):
    """Run one of the training entry points as the container does: `python <script> ...` in the training folder."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("SM_", "WORLD_SIZE"))}
    environment.update({"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})})
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=TRAINING_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def train_arguments(
    assets: dict[str, Path], data: dict[str, Path], run_dir: Path, *, dropout: bool = False, **overrides: object
) -> list[str]:
    """train.py flags for a tiny run writing everything under run_dir; overrides replace or add flags."""
    flags: dict[str, object] = {
        "train_dir": data["train"],
        "validation_dir": data["validation"],
        "model_config": assets["config_dropout" if dropout else "config"],
        "tokenizer_dir": assets["tokenizer"],
        "model_dir": run_dir / "model",
        "output_dir": run_dir / "output",
        "checkpoint_dir": run_dir / "checkpoints",
        "train_batch_size": 8,
        "val_batch_size": 8,
        "max_steps": 50,
        "lr": 3e-3,
        "min_lr": 1e-4,
        "warmup": 0.1,
        "logging_freq": 1,
        "validation_freq": 25,
        "checkpoint_freq": 0,
        "activation_checkpointing": "false",
        "seed": 7,
    }
    flags.update(overrides)
    return [item for name, value in flags.items() for item in (f"--{name}", str(value))]


def read_log_records(stdout: str, prefix: str = "step=") -> list[dict[str, str]]:
    """The `name=value` metric lines of a train.py log, as dicts of strings."""
    records = []
    for line in stdout.splitlines():
        if line.startswith(prefix):
            records.append(dict(item.split("=", 1) for item in line.split()))
    return records


def assert_training_loss_falls(log: str, steps: int, window: int) -> None:
    """A run's log has one loss per step, the last `window` steps' mean clearly below the first's, and a lower
    validation loss at the end than at the first evaluation."""
    losses = [float(record["loss"]) for record in read_log_records(log) if "loss" in record]
    assert len(losses) == steps
    assert sum(losses[-window:]) / window < sum(losses[:window]) / window - 0.15, losses
    validation = [float(record["val_loss"]) for record in read_log_records(log) if "val_loss" in record]
    assert validation[-1] < validation[0]


def run_train_py_until_killed(arguments: list[str], *, when: str) -> None:
    """Run train.py as its own process and SIGKILL it (a spot interruption does not ask) at the first output line
    starting with `when`."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("SM_")}
    environment.update({"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"})
    process = subprocess.Popen(
        [sys.executable, "train.py", *arguments],
        cwd=TRAINING_DIR,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(when):
            os.kill(process.pid, signal.SIGKILL)
            break
    process.stdout.close()
    assert process.wait(timeout=60) == -signal.SIGKILL, f"train.py never printed a line starting with {when!r}"
