"""What a stage's training job is told, and train.py's own start-up checks run against it at synth.

The pipeline passes train.py its hyperparameters as flags and the SMP layout as `mp_parameters`. Both are built
here, once, for the definition; and the same values go through train.py's own parser and layout checks when the
config loads, so a combination the job would reject a few minutes (and a p4d bill) into its run fails synth instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stacks.config import TrainingConfig

# What the training, prepare and evaluate jobs install at start (sagemaker_submit_directory's requirements.txt).
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
        return {
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


def hyperparameters(training: TrainingConfig, *, max_steps: Any, learning_rate: Any, train_batch_size: Any) -> dict:
    """train.py's flags (names from training/finetune/hyperparameters.py). The three run parameters may be
    pipeline variables; at synth they are checked with the config's defaults."""
    return {
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
        "backend": f"smp_v{training.smp.version}",
    }


def check_with_train_py(training: TrainingConfig) -> None:
    """Run train.py's start-up checks on what the job will receive, with the transformers version that
    training/requirements.txt pins for the job's Python; ValueError with train.py's message if it would refuse to
    start."""
    from stacks.catalog.images import training_framework
    from training.finetune.errors import ConfigurationError
    from training.finetune.hyperparameters import parse_hyperparameters
    from training.finetune.layout import (
        check_layout,
        check_model_for_layout,
        check_smp_v1_tensor_parallelism,
        parse_layout,
    )

    flags = hyperparameters(
        training,
        max_steps=training.max_steps,
        learning_rate=training.learning_rate,
        train_batch_size=training.train_batch_size,
    )
    argv = [item for name, value in {**flags, **CONTAINER_PATHS}.items() for item in (f"--{name}", str(value))]
    backend = f"smp_v{training.smp.version}"
    try:
        hp, _ = parse_hyperparameters(argv, environ={})
        layout = parse_layout(smp_parameters(training))
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


def _python_version(py_version: str) -> str:
    """'py39' -> '3.9' (the DLC tag's form to PEP 508's python_version)."""
    return f"{py_version[2]}.{py_version[3:]}"


def pinned_version(requirements: Path, package: str, python_version: str) -> str:
    """The exact version requirements.txt pins for `package` where python_version is `python_version` (environment
    markers evaluated as pip would); ValueError if there is no single exact pin."""
    from packaging.requirements import InvalidRequirement, Requirement

    pins = []
    for number, line in enumerate(requirements.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement as error:
            raise ValueError(f"{requirements}:{number}: {error}") from None
        if requirement.name.lower() != package or (
            requirement.marker and not requirement.marker.evaluate({"python_version": python_version})
        ):
            continue
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==":
            raise ValueError(
                f"{requirements}:{number}: {package} must be pinned exactly ({package}==<version>), got {text!r}"
            )
        pins.append(specifiers[0].version)
    if len(pins) != 1:
        raise ValueError(
            f"{requirements} must pin {package} exactly once for Python {python_version}, found {pins or 'none'}"
        )
    return pins[0]
