"""What a stage's training job is told, and train.py's own start-up checks run against it at synth.

The pipeline passes train.py its hyperparameters as flags and the SMP layout as `mp_parameters`. Both are built
here, once, for the definition; and the same values go through train.py's own parser and layout checks when the
config loads, so a combination the job would reject a few minutes (and a p4d bill) into its run fails synth instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from core.catalog.images import training_framework
from training.finetune.errors import ConfigurationError
from training.finetune.hyperparameters import parse_hyperparameters
from training.finetune.layout import check_layout, check_model_for_layout, check_smp_v1_tensor_parallelism, parse_layout

if TYPE_CHECKING:
    from core.config import TrainingConfig

# What the training and processing jobs install at start (sagemaker_submit_directory's requirements.txt): the hashed
# lock scripts/lock_training_requirements.py generates from training/requirements.in.
TRAINING_REQUIREMENTS = Path(__file__).resolve().parents[1] / "training" / "requirements.txt"

# Where SageMaker puts a training job's channels and outputs (what train.py reads from SM_* by default).
CONTAINER_PATHS = {
    "train_dir": "/opt/ml/input/data/train",
    "validation_dir": "/opt/ml/input/data/test",
    "pretrained_dir": "/opt/ml/input/data/model",
    "model_dir": "/opt/ml/model",
    "output_dir": "/opt/ml/output/data",
}


def smp_parameters(training: TrainingConfig) -> dict[str, Any]:
    """The `smdistributed.modelparallel.parameters` of the estimator's distribution (SMP v1 or v2 keys)."""
    smp = training.smp
    if smp.version == 2:
        # The SMP v2 reference's keys: without tensor_parallel_degree the job runs without the tensor parallelism
        # the config was sized and checked for (SMP's default is 1).
        return {
            "tensor_parallel_degree": smp.tensor_parallel_degree,
            "hybrid_shard_degree": smp.hybrid_shard_degree,
            "sm_activation_offloading": smp.offload_activations,
            "activation_loading_horizon": smp.activation_loading_horizon,
        }
    return {
        "tensor_parallel_degree": smp.tensor_parallel_degree,
        # `partitions` is the pipeline parallel degree; the SDK and transformers both require the key.
        "partitions": smp.pipeline_parallel_degree,
        "microbatches": smp.microbatches,
        "pipeline": smp.pipeline,
        "ddp": smp.ddp,
        "fp16": training.precision == "fp16",
        "bf16": training.precision == "bf16",
        "shard_optimizer_state": smp.shard_optimizer_state,
        "sharded_data_parallel_degree": smp.sharded_data_parallel_degree,
        "offload_activations": smp.offload_activations,
        "activation_loading_horizon": smp.activation_loading_horizon,
        "auto_partition": smp.auto_partition,
        "default_partition": 0,
        "optimize": smp.optimize,
        "placement_strategy": smp.placement_strategy,
        "prescaled_batch": smp.prescaled_batch,
        "delayed_parameter_initialization": smp.delayed_parameter_initialization,
    }


def hyperparameters(
    training: TrainingConfig,
    *,
    max_steps: Any,
    learning_rate: Any,
    train_batch_size: Any,
    base_revision: Any = None,
    with_memory: bool = True,
) -> dict:
    """train.py's flags (names from training/finetune/hyperparameters.py). The three run parameters, and the base
    model's commit an adapter records, may be pipeline variables; at synth they are checked with the config's
    defaults. `with_memory` False leaves out the memory figures, which need a config whose layout checks passed."""
    flags = {
        "max_steps": max_steps,
        "lr": learning_rate,
        "train_batch_size": train_batch_size,
        "val_batch_size": training.val_batch_size,
        "gradient_accumulation": training.gradient_accumulation,
        "fp16": training.precision == "fp16",
        "bf16": training.precision == "bf16",
        "activation_checkpointing": training.activation_checkpointing,
        "lr_decay_style": training.lr_decay_style,
        "warmup": training.warmup,
        "validation_freq": training.validation_freq,
        "checkpoint_freq": training.checkpoint_freq,
        "num_kept_checkpoints": training.num_kept_checkpoints,
        "seed": training.seed,
        "backend": backend_name(training),
        # train.py checks the run's train_batch_size against these before it loads anything (finetune/memory.py).
        **(memory_hyperparameters(training) if with_memory else {}),
    }
    if training.method != "full":
        lora = training.lora
        flags.update(
            {
                "method": training.method,
                "lora_r": lora.r,
                "lora_alpha": lora.alpha,
                "lora_dropout": lora.dropout,
                "lora_target_modules": lora.target_modules_flag,
                "base_model_name": training.model,
                "base_model_id": training.staged_weights.hf_id,
                "base_model_revision": base_revision,
            }
        )
    return flags


def memory_hyperparameters(training: TrainingConfig) -> dict[str, float]:
    """The stage's memory estimate as train.py's rule takes it (training/finetune/memory.py): what does not grow with
    the batch, what each sequence of it adds, and the usable memory per GPU. The estimate is linear in the batch
    (activations and logits per sequence; SMP v1 splits a batch into equal microbatches), so two batches give both
    figures exactly."""
    step = training.smp.microbatches if training.method == "full" else 1
    one, two = (training.model_copy(update={"train_batch_size": n * step}).fit() for n in (1, 2))
    per_sequence = (two.total_gib - one.total_gib) / step
    return {
        "memory_fixed_gib": one.total_gib - per_sequence * step,
        "memory_per_sequence_gib": per_sequence,
        "memory_usable_gib": one.capacity_gib,
    }


def backend_name(training: TrainingConfig) -> str:
    """train.py's --backend: SMP for full fine-tuning and for adapters over a sharded base, plain PyTorch (DDP) under
    the other adapters."""
    return "torch" if training.method != "full" and not training.shards_base else f"smp_v{training.smp.version}"


def check_with_train_py(training: TrainingConfig) -> None:
    """Run train.py's start-up checks on what the job will receive, with the transformers version that
    training/requirements.txt pins for the job's Python; ValueError with train.py's message if it would refuse to
    start."""

    flags = hyperparameters(
        training,
        max_steps=training.max_steps,
        learning_rate=training.learning_rate,
        train_batch_size=training.train_batch_size,
        base_revision=training.pretrained.revision,
    )
    argv = [item for name, value in {**flags, **CONTAINER_PATHS}.items() for item in (f"--{name}", str(value))]
    backend = backend_name(training)
    try:
        hp, _ = parse_hyperparameters(argv, environ={})
        layout = parse_layout(smp_parameters(training) if backend != "torch" else {})
        check_layout(hp, layout, backend, training.world_size)
        check_model_for_layout(training.catalog_model.architecture, layout, backend)
        python = _python_version(training_framework(training.smp.version)[1])
        check_smp_v1_tensor_parallelism(
            training.catalog_model.architecture,
            pinned_version(TRAINING_REQUIREMENTS, "transformers", python),
            layout,
            backend,
            f"pinned in training/requirements.txt for the training image's Python {python}",
        )
    except ConfigurationError as error:
        raise ValueError(f"train.py would refuse to start: {error}") from None


def training_readers(training: TrainingConfig) -> dict[str, str]:
    """The transformers and tokenizers a training job, and its prepare and evaluate steps, read model folders with:
    the jobs' lock's pins for the training image's Python."""

    python = _python_version(training_framework(training.smp.version)[1])
    return {
        library: pinned_version(TRAINING_REQUIREMENTS, library, python) for library in ("transformers", "tokenizers")
    }


def _python_version(py_version: str) -> str:
    """'py39' -> '3.9' (the DLC tag's form to PEP 508's python_version)."""
    return f"{py_version[2]}.{py_version[3:]}"


def pinned_version(requirements: Path, package: str, python_version: str) -> str:
    """The exact version requirements.txt pins for `package` where python_version is `python_version` (environment
    markers evaluated as pip would in the training images); ValueError if there is no single exact pin."""

    pins = []
    for line in read_requirements(requirements):
        requirement = line.requirement
        if canonicalize_name(requirement.name) != canonicalize_name(package) or not line.applies_to(python_version):
            continue
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==":
            raise ValueError(
                f"{requirements}:{line.number}: {package} must be pinned exactly ({package}==<version>), "
                f"got {str(requirement)!r}"
            )
        pins.append(specifiers[0].version)
    if len(pins) != 1:
        raise ValueError(
            f"{requirements} must pin {package} exactly once for Python {python_version}, found {pins or 'none'}"
        )
    return pins[0]


@dataclass(frozen=True)
class RequirementLine:
    """One requirement of a pip requirements file, with the hashes pip would check it against."""

    path: Path
    number: int  # the line it starts on
    requirement: Requirement
    hashes: tuple[str, ...]  # "sha256:<hex>", as pip writes them

    def applies_to(self, python_version: str) -> bool:
        """Whether pip installs this line in a training or processing image with Python `python_version` (CPython
        on x86_64 Linux, any patch release)."""
        marker = self.requirement.marker
        if marker is None:
            return True
        # uv's universal locks write python_full_version markers; the images' patch releases are not fixed here.
        results = {marker.evaluate(_image_environment(f"{python_version}.{patch}")) for patch in (0, 99)}
        if len(results) != 1:
            raise ValueError(
                f"{self.path}:{self.number}: the marker {str(marker)!r} tells Python {python_version} patch "
                "releases apart; lock per minor version"
            )
        return results.pop()


def read_requirements(path: Path) -> list[RequirementLine]:
    """The requirements of a pip requirements file, as pip reads them: comments dropped, backslash continuations
    joined, option lines (--require-hashes, --only-binary ...) skipped, `--hash` options collected."""

    lines = []
    for number, text in _logical_lines(path):
        tokens = text.split()
        if tokens[0].startswith("-"):
            continue  # an option for the whole file, not a requirement
        split = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
        try:
            requirement = Requirement(" ".join(tokens[:split]))
        except InvalidRequirement as error:
            raise ValueError(f"{path}:{number}: {error}") from None
        hashes = []
        options = iter(tokens[split:])
        for option in options:
            if option.startswith("--hash="):
                hashes.append(option.removeprefix("--hash="))
            elif option == "--hash":
                hashes.append(next(options, ""))
            else:
                raise ValueError(f"{path}:{number}: unexpected option {option!r} (only --hash is read here)")
        lines.append(RequirementLine(path, number, requirement, tuple(hashes)))
    return lines


def check_hash_locked(path: Path) -> None:
    """ValueError unless pip, given only `-r path` (as the training toolkit runs it), installs every requirement by
    an exact pin and its sha256 hashes, from wheels: the jobs install it with write access to the stage's data."""
    fix = "edit training/requirements.in and run python3 scripts/lock_training_requirements.py"
    options = {" ".join(text.replace("=", " ", 1).split()): n for n, text in _logical_lines(path) if text[0] == "-"}
    for option, number in options.items():
        if option.split()[0] in ("-r", "--requirement", "-c", "--constraint", "-e", "--editable"):
            raise ValueError(f"{path}:{number}: {option!r} brings in requirements this check cannot see; {fix}")
    for needed in ("--require-hashes", "--only-binary :all:"):
        if needed not in options:
            raise ValueError(
                f"{path} lacks the line `{needed}`: the training toolkit passes pip no options, so the file itself "
                f"must ask for hash checking and wheels only; {fix}"
            )
    for line in read_requirements(path):
        specifiers = list(line.requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==" or not line.hashes:
            raise ValueError(
                f"{path}:{line.number}: {line.requirement} is not locked (an exact ==<version> with --hash=sha256:"
                f" options); pip would refuse to install the file; {fix}"
            )
        if not all(re.fullmatch(r"sha256:[0-9a-f]{64}", digest) for digest in line.hashes):
            raise ValueError(f"{path}:{line.number}: {line.requirement}: hashes must be sha256:<64 hex digits>")


def _logical_lines(path: Path) -> list[tuple[int, str]]:
    """A requirements file's lines as pip sees them: comments dropped, backslash continuations joined; each with
    the number of the line it starts on."""
    logical: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        start, joined = pending or (number, "")
        if text.endswith("\\"):
            pending = (start, joined + text[:-1] + " ")
            continue
        pending = None
        if (joined + text).strip():
            logical.append((start, (joined + text).strip()))
    if pending and pending[1].strip():
        logical.append((pending[0], pending[1].strip()))
    return logical


def _image_environment(python_full_version: str) -> dict[str, str]:
    """PEP 508 marker values in the training and processing images (CPython on x86_64 Linux)."""
    return {
        "implementation_name": "cpython",
        "implementation_version": python_full_version,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": python_full_version,
        "python_version": ".".join(python_full_version.split(".")[:2]),
        "sys_platform": "linux",
    }
