"""Every hyperparameter train.py accepts, in one dataclass: name, default, help, and where SageMaker supplies it.

SageMaker passes hyperparameters as `--name value` flags. The training toolkit JSON-decodes each value and then
`str()`s it, so booleans arrive as `True`/`False` and a JSON null as `None`; the parsers below accept those forms.
The platform also passes flags we do not own (`--mp_parameters '{...}'`): those are tolerated by name, while any
other unknown flag is an error that names the closest valid flag. (The GPT-J reference script used
`parse_known_args` and silently ignored its own misspelled `lr-decay-style`.)

The CDK side imports this module to read names and defaults: see `HYPERPARAMETERS` and `hyperparameter_defaults()`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from .adapters import METHODS, adapter_backend_problem, parse_target_modules
from .errors import ConfigurationError
from .memory import check_memory_flags

# Flags the SageMaker platform adds to the command line; they are read elsewhere (mp_parameters: layout.py).
PLATFORM_FLAGS = ("mp_parameters",)
# The toolkit keeps `sagemaker_*` keys out of the command line, but a hand-written launcher may not.
PLATFORM_FLAG_PREFIXES = ("sagemaker_",)

BACKENDS = ("auto", "torch", "smp_v1", "smp_v2")
LR_DECAY_STYLES = ("constant", "linear", "cosine")
PROGRESS_BAR_CHOICES = ("auto", "true", "false")

_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}
_NONE = {"none", "null", ""}


def parse_bool(text: str) -> bool:
    """true/false/1/0/yes/no in any case: what the toolkit's str(JSON value) and people both write."""
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false/1/0, any case), got {text!r}")


def parse_int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def parse_optional_int(text: str) -> int | None:
    """An integer, or None/null/empty for "not set" (a JSON null arrives as the string `None`)."""
    if str(text).strip().lower() in _NONE:
        return None
    return parse_int(text)


def parse_float(text: str) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def parse_optional_float(text: str) -> float | None:
    """A number, or None/null/empty for "not set"."""
    if str(text).strip().lower() in _NONE:
        return None
    return parse_float(text)


def parse_optional_path(text: str) -> str | None:
    return None if str(text).strip().lower() in _NONE else str(text)


def parse_choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def _hp(default: Any, group: str, help: str, parse: Callable[[str], Any], env: str | None = None) -> Any:
    """A dataclass field carrying what the parser and the README table need."""
    return dataclasses.field(default=default, metadata={"group": group, "help": help, "parse": parse, "env": env})


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """The resolved hyperparameters of one run. Field order is the order of `--help` and of the README table."""

    # --- paths: SageMaker channels and directories (each default comes from the named environment variable) ---
    train_dir: str | None = _hp(
        None,
        "paths",
        "folder of training JSON lines (packed blocks from prepare_data.py)",
        parse_optional_path,
        env="SM_CHANNEL_TRAIN",
    )
    validation_dir: str | None = _hp(
        None, "paths", "folder of validation JSON lines (packed blocks)", parse_optional_path, env="SM_CHANNEL_TEST"
    )
    pretrained_dir: str | None = _hp(
        None,
        "paths",
        "HF model folder (config + safetensors [+ tokenizer]) to fine-tune; staged in S3 as the `model` channel",
        parse_optional_path,
        env="SM_CHANNEL_MODEL",
    )
    model_config: str | None = _hp(
        None,
        "paths",
        "random init instead of pretrained weights: an HF config JSON file, or a folder with "
        "config.json (tests, smoke runs)",
        parse_optional_path,
    )
    tokenizer_dir: str | None = _hp(
        None,
        "paths",
        "tokenizer folder, when it is not inside pretrained_dir / the model_config folder",
        parse_optional_path,
    )
    model_dir: str | None = _hp(
        None,
        "paths",
        "where the final HF model (safetensors + config + tokenizer) is written",
        parse_optional_path,
        env="SM_MODEL_DIR",
    )
    output_dir: str | None = _hp(
        None, "paths", "where metrics.json is written", parse_optional_path, env="SM_OUTPUT_DATA_DIR"
    )
    checkpoint_dir: str = _hp(
        "/opt/ml/checkpoints",
        "paths",
        "checkpoints are written and resumed from here (SageMaker syncs it to S3)",
        str,
    )
    # --- run length and batch ---
    max_steps: int = _hp(100, "batch", "optimizer steps to train for", parse_int)
    train_batch_size: int = _hp(
        4,
        "batch",
        "sequences per data-parallel rank per forward/backward (global batch = this x data-parallel "
        "size x gradient_accumulation)",
        parse_int,
    )
    val_batch_size: int = _hp(4, "batch", "sequences per data-parallel rank per validation forward", parse_int)
    gradient_accumulation: int = _hp(1, "batch", "forward/backward passes per optimizer step", parse_int)
    # --- optimizer and schedule ---
    lr: float = _hp(2e-4, "optimizer", "peak learning rate (AdamW)", parse_float)
    min_lr: float = _hp(1e-5, "optimizer", "learning rate at the end of the decay", parse_float)
    lr_decay_style: str = _hp(
        "linear", "optimizer", f"decay after warmup: {', '.join(LR_DECAY_STYLES)}", parse_choice(LR_DECAY_STYLES)
    )
    lr_decay_iters: int | None = _hp(
        None, "optimizer", "steps over which the learning rate decays (None: max_steps)", parse_optional_int
    )
    warmup: float = _hp(0.01, "optimizer", "fraction of the decay steps spent in linear warmup", parse_float)
    weight_decay: float = _hp(0.01, "optimizer", "AdamW weight decay (not applied to biases and norms)", parse_float)
    beta1: float = _hp(0.9, "optimizer", "AdamW beta1", parse_float)
    beta2: float = _hp(0.95, "optimizer", "AdamW beta2", parse_float)
    adam_epsilon: float = _hp(1e-8, "optimizer", "AdamW epsilon", parse_float)
    grad_clip: float = _hp(1.0, "optimizer", "clip the global gradient norm to this (0: no clipping)", parse_float)
    # --- precision and memory ---
    fp16: bool = _hp(
        False,
        "precision",
        "fp16 mixed precision (SMP v1: also settable as mp_parameters fp16; needs a GPU)",
        parse_bool,
    )
    bf16: bool = _hp(
        False, "precision", "bf16 mixed precision (SMP v1: also settable as mp_parameters bf16)", parse_bool
    )
    activation_checkpointing: bool = _hp(
        True, "precision", "recompute transformer-layer activations in backward to save memory", parse_bool
    )
    activation_strategy: str = _hp(
        "each",
        "precision",
        "SMP v1 checkpointing strategy with tensor parallelism: each, contiguous or group_<n>",
        str,
    )
    # --- evaluation and logging ---
    validation_freq: int = _hp(
        50, "evaluation", "validate every this many steps (0: only at the end; always at the end)", parse_int
    )
    validation_batches: int | None = _hp(
        None,
        "evaluation",
        "validation batches per rank per evaluation (None: all validation data)",
        parse_optional_int,
    )
    logging_freq: int = _hp(10, "evaluation", "print a metrics line every this many steps", parse_int)
    progress_bar: str = _hp(
        "auto",
        "evaluation",
        "tqdm progress bar: auto (only on a terminal outside SageMaker), true, false",
        parse_choice(PROGRESS_BAR_CHOICES),
    )
    # --- checkpoints ---
    checkpoint_freq: int = _hp(50, "checkpoints", "write a checkpoint every this many steps (0: never)", parse_int)
    num_kept_checkpoints: int = _hp(3, "checkpoints", "keep only the newest this many checkpoints", parse_int)
    resume: bool = _hp(
        True,
        "checkpoints",
        "resume from the newest complete checkpoint in checkpoint_dir when one exists",
        parse_bool,
    )
    # --- run ---
    backend: str = _hp(
        "auto",
        "run",
        "torch, smp_v1, smp_v2, or auto (from mp_parameters and the libraries present)",
        parse_choice(BACKENDS),
    )
    seed: int = _hp(12345, "run", "seed for weights init, data order and dropout", parse_int)
    deterministic: bool = _hp(
        False, "run", "torch.use_deterministic_algorithms (bit-exact reruns; slower on GPU)", parse_bool
    )
    save_final_model: bool = _hp(True, "run", "write the final HF model to model_dir", parse_bool)
    # --- adapters (LoRA / QLoRA through PEFT; finetune/adapters.py) ---
    method: str = _hp(
        "full",
        "adapters",
        "full (every weight), lora (PEFT adapters over frozen base weights) or qlora (adapters over 4-bit base "
        "weights; needs a CUDA GPU): lora and qlora write an adapter folder to model_dir",
        parse_choice(METHODS),
    )
    lora_r: int = _hp(16, "adapters", "LoRA rank", parse_int)
    lora_alpha: int = _hp(32, "adapters", "LoRA alpha (the update is scaled by alpha / rank)", parse_int)
    lora_dropout: float = _hp(0.05, "adapters", "dropout on the LoRA input", parse_float)
    lora_target_modules: str = _hp(
        "auto", "adapters", "comma-separated linear layers to adapt, or auto (the architecture's default)", str
    )
    base_model_name: str | None = _hp(
        None, "adapters", "catalog name of the base model, for the record", parse_optional_path
    )
    base_model_id: str | None = _hp(
        None, "adapters", "Hugging Face id of the base model, for the record", parse_optional_path
    )
    base_model_revision: str | None = _hp(
        None, "adapters", "commit of the base model's weights, for the record", parse_optional_path
    )
    # --- memory: synth's estimate for the stage, so that a run's batch is checked before anything loads ---
    memory_fixed_gib: float | None = _hp(
        None,
        "memory",
        "GiB per GPU that do not grow with the batch: weights, gradients, optimizer state, runtime (synth's "
        "estimate; None: no memory check)",
        parse_optional_float,
    )
    memory_per_sequence_gib: float | None = _hp(
        None,
        "memory",
        "GiB per GPU each sequence of --train_batch_size adds: activations and logits (synth's estimate)",
        parse_optional_float,
    )
    memory_usable_gib: float | None = _hp(
        None, "memory", "GiB of each GPU the estimate may fill (synth's)", parse_optional_float
    )


HYPERPARAMETERS: tuple[dataclasses.Field, ...] = dataclasses.fields(Hyperparameters)
HYPERPARAMETER_NAMES: tuple[str, ...] = tuple(field.name for field in HYPERPARAMETERS)


def hyperparameter_defaults() -> dict[str, Any]:
    """Name -> default, as train.py uses it when neither a flag nor the environment variable is given."""
    return {field.name: field.default for field in HYPERPARAMETERS}


def hyperparameter_environment() -> dict[str, str]:
    """Name -> the SageMaker environment variable its default is read from."""
    return {field.name: field.metadata["env"] for field in HYPERPARAMETERS if field.metadata["env"]}


@dataclasses.dataclass(frozen=True)
class PlatformArguments:
    """Flags the platform added to the command line (values as given; parsed where they are used)."""

    mp_parameters: str | None = None


class _RaisingParser(argparse.ArgumentParser):
    """argparse exits the process on errors; we raise so callers and tests see one error type."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigurationError(message)


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _RaisingParser(
        prog="train.py",
        description="Fine-tune a causal LM (GPT-J by default) with SMP v1, SMP v2 or plain PyTorch.",
        # Abbreviations would let `--lr_decay` silently mean `--lr_decay_style`.
        allow_abbrev=False,
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for field in HYPERPARAMETERS:
        meta = field.metadata
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(meta["group"])
        group = groups[meta["group"]]
        default = field.default
        if meta["env"] and environ.get(meta["env"]):
            default = environ[meta["env"]]
        help_text = meta["help"] + (f" (default: ${meta['env']})" if meta["env"] else f" (default: {default})")
        group.add_argument(f"--{field.name}", type=meta["parse"], default=default, help=help_text, metavar="VALUE")
    return parser


def _split_unknown(unknown: Sequence[str]) -> list[tuple[str, str | None]]:
    """argparse's leftovers as (flag name, value) pairs: `--a 1 --b=2 --c` -> [(a, 1), (b, 2), (c, None)]."""
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(unknown):
        token = unknown[index]
        if not token.startswith("--"):
            raise ConfigurationError(f"unexpected argument {token!r}: hyperparameters are given as --name value")
        name, separator, inline_value = token[2:].partition("=")
        value: str | None = inline_value if separator else None
        if not separator and index + 1 < len(unknown) and not unknown[index + 1].startswith("--"):
            value = unknown[index + 1]
            index += 1
        pairs.append((name, value))
        index += 1
    return pairs


def _unknown_flag_message(name: str) -> str:
    candidate = name.replace("-", "_")
    if candidate in HYPERPARAMETER_NAMES:
        return f"unknown hyperparameter --{name}: did you mean --{candidate}? (names use underscores)"
    close = difflib.get_close_matches(candidate, HYPERPARAMETER_NAMES, n=1, cutoff=0.6)
    hint = f"did you mean --{close[0]}?" if close else "run train.py --help for the list"
    return f"unknown hyperparameter --{name}: {hint}"


def parse_hyperparameters(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Hyperparameters, PlatformArguments]:
    """Parse and check the command line; unknown flags other than the platform's are errors."""
    known, unknown = build_parser(environ).parse_known_args(list(argv))
    platform: dict[str, str | None] = {}
    problems = []
    for name, value in _split_unknown(unknown):
        if name in PLATFORM_FLAGS:
            platform[name] = value
        elif not name.startswith(PLATFORM_FLAG_PREFIXES):
            problems.append(_unknown_flag_message(name))
    if problems:
        raise ConfigurationError("; ".join(problems))
    hyperparameters = Hyperparameters(**vars(known))
    check_hyperparameters(hyperparameters)
    return hyperparameters, PlatformArguments(**platform)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigurationError(message)


def check_hyperparameters(hp: Hyperparameters) -> None:
    """Checks that need no data, model or library: ranges and combinations of the flags themselves."""
    for name in ("max_steps", "train_batch_size", "val_batch_size", "gradient_accumulation", "logging_freq"):
        value = getattr(hp, name)
        _require(value >= 1, f"--{name} must be at least 1, got {value}")
    for name in ("validation_freq", "checkpoint_freq"):
        value = getattr(hp, name)
        _require(value >= 0, f"--{name} must be 0 (off) or a positive number of steps, got {value}")
    _require(hp.num_kept_checkpoints >= 1, f"--num_kept_checkpoints must be at least 1, got {hp.num_kept_checkpoints}")
    if hp.validation_batches is not None:
        _require(
            hp.validation_batches >= 1, f"--validation_batches must be at least 1 or None, got {hp.validation_batches}"
        )
    if hp.lr_decay_iters is not None:
        _require(hp.lr_decay_iters >= 1, f"--lr_decay_iters must be at least 1 or None, got {hp.lr_decay_iters}")
    _require(hp.lr > 0, f"--lr must be positive, got {hp.lr}")
    _require(0 <= hp.min_lr <= hp.lr, f"--min_lr must be between 0 and --lr ({hp.lr}), got {hp.min_lr}")
    _require(0 <= hp.warmup < 1, f"--warmup is a fraction of the decay steps in [0, 1), got {hp.warmup}")
    _require(hp.grad_clip >= 0, f"--grad_clip must be 0 (off) or positive, got {hp.grad_clip}")
    _require(hp.weight_decay >= 0, f"--weight_decay must be non-negative, got {hp.weight_decay}")
    for name in ("beta1", "beta2"):
        value = getattr(hp, name)
        _require(0 <= value < 1, f"--{name} must be in [0, 1), got {value}")
    _require(
        not (hp.fp16 and hp.bf16),
        "--fp16 and --bf16 are both true: choose one mixed-precision type (or neither for fp32)",
    )
    _require(
        re.fullmatch(r"each|contiguous|group_[1-9][0-9]*", hp.activation_strategy) is not None,
        f"--activation_strategy must be each, contiguous or group_<n>, got {hp.activation_strategy!r}",
    )
    _require(
        hp.pretrained_dir is None or hp.model_config is None,
        f"both a pretrained model ({hp.pretrained_dir}, --pretrained_dir or the `model` channel) and --model_config "
        f"({hp.model_config}) are given: pass one (pretrained weights, or a config for random init)",
    )
    _check_adapter_hyperparameters(hp)
    check_memory_flags(hp)
    _require(
        hp.pretrained_dir is not None or hp.model_config is not None,
        "no model: pass --pretrained_dir (or provide the `model` channel, SM_CHANNEL_MODEL) to fine-tune "
        "pretrained weights, or --model_config for a randomly initialized model",
    )


def _check_adapter_hyperparameters(hp: Hyperparameters) -> None:
    _require(hp.lora_r >= 1, f"--lora_r must be at least 1, got {hp.lora_r}")
    _require(hp.lora_alpha >= 1, f"--lora_alpha must be at least 1, got {hp.lora_alpha}")
    _require(0 <= hp.lora_dropout < 1, f"--lora_dropout must be in [0, 1), got {hp.lora_dropout}")
    try:
        parse_target_modules(hp.lora_target_modules)
    except ValueError as error:
        raise ConfigurationError(f"--lora_target_modules: {error}") from None
    if hp.backend != "auto":  # auto: checked with the layout, once mp_parameters has chosen the backend
        problem = adapter_backend_problem(hp.method, hp.backend)
        _require(problem is None, str(problem))
    if hp.method == "qlora":
        _require(
            hp.pretrained_dir is not None,
            "--method qlora quantizes pretrained weights to 4 bits: pass --pretrained_dir (or the `model` channel)",
        )
        _require(not hp.fp16, "--method qlora computes in bf16 (its 4-bit recipe): use --bf16, not --fp16")


def hyperparameter_table_markdown() -> str:
    """The README table of every hyperparameter with its default, generated so that it cannot drift."""
    lines = ["| hyperparameter | default | meaning |", "| --- | --- | --- |"]
    for field in HYPERPARAMETERS:
        meta = field.metadata
        default = f"`${meta['env']}`" if meta["env"] else f"`{field.default}`"
        lines.append(f"| `{field.name}` | {default} | {meta['help']} |")
    return "\n".join(lines)
