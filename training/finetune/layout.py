"""The parallel layout: read `mp_parameters`, choose the backend, and check the layout before anything starts.

The pipeline sets the SMP configuration once, in the estimator's `distribution`; SageMaker hands it to the job as
the JSON hyperparameter `mp_parameters` (env `SM_HP_MP_PARAMETERS`, and the `--mp_parameters` flag). This script
reads it to learn the layout instead of duplicating those keys as its own flags.

SMP v1 keys (sagemaker-python-sdk `smd_model_parallel_general.rst`, v2.199.0): `tensor_parallel_degree`,
`partitions` / `pipeline_parallel_degree`, `microbatches`, `pipeline`, `ddp`, `fp16`, `bf16`,
`shard_optimizer_state`, `sharded_data_parallel_degree`, `offload_activations`, `auto_partition`,
`default_partition`, `optimize`, `placement_strategy`, `prescaled_batch`, `delayed_parameter_initialization`,
`activation_loading_horizon`, ... SMP v2 keys (AWS "SMP v2 reference"): `hybrid_shard_degree`,
`sm_activation_offloading`, `activation_loading_horizon`, `tensor_parallel_degree`, ...
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Mapping
from typing import Any, Callable

from .adapters import adapter_backend_problem
from .architecture_records import model_types_where
from .errors import ConfigurationError
from .hyperparameters import Hyperparameters, PlatformArguments
from .memory import check_memory

SMP_V1_MODULE = "smdistributed.modelparallel.torch"
SMP_V2_MODULE = "torch.sagemaker"

# Keys only SMP v1 understands, and keys only SMP v2 understands; tensor_parallel_degree and
# activation_loading_horizon belong to both.
SMP_V1_ONLY_KEYS = frozenset(
    {
        "partitions",
        "pipeline_parallel_degree",
        "microbatches",
        "pipeline",
        "ddp",
        "fp16",
        "fp16_params",
        "bf16",
        "shard_optimizer_state",
        "sharded_data_parallel_degree",
        "offload_activations",
        "auto_partition",
        "default_partition",
        "optimize",
        "placement_strategy",
        "prescaled_batch",
        "delayed_parameter_initialization",
        "active_microbatches",
        "skip_tracing",
        "memory_weight",
    }
)
SMP_V2_ONLY_KEYS = frozenset(
    {
        "hybrid_shard_degree",
        "sm_activation_offloading",
        "fsdp_cache_flush_warnings",
        "allow_empty_shards",
        "context_parallel_degree",
        "expert_parallel_degree",
        "random_seed",
    }
)
# HF model types SMP v2 can tensor-parallelize: core/catalog/architectures.py (smp_v2_tensor_parallel), with its source.
SMP_V2_TENSOR_PARALLEL_MODEL_TYPES = model_types_where("smp_v2_tensor_parallel")

# SMP v1's own rules between its keys, as smp.init enforces them: setting a key to a non-default value requires the
# other keys to have the given values (`requires` in smdistributed/modelparallel/backend/config.yaml and its checker
# in backend/config.py; public copy of SMP 1.12.1, tkazusa/smdistributed_modelparallel@b5e06a8). Only the rules that
# hold through SMP 1.15 (1.13 lifted "sharded data parallelism requires tensor_parallel_degree 1"). Checked at the
# job's start and, through core/training_job.py, at synth: a config smp.init would refuse never reaches a p4d.
# key: (its default, {other key: (the value it must have, that key's default)})
SMP_V1_REQUIRES: dict[str, tuple[Any, dict[str, tuple[Any, Any]]]] = {
    "tensor_parallel_degree": (1, {"ddp": (True, False)}),
    "prescaled_batch": (False, {"optimize": ("speed", "speed")}),
    "bf16": (False, {"fp16": (False, False), "fp16_params": (False, False)}),
}

# The transformers versions for which SMP v1 swaps a Hugging Face model for its own tensor-parallel module. SMP
# compares transformers.__version__ against this exact list when it is imported; with any other version it only logs
# a warning and trains every layer whole on every GPU ("HuggingFace modules will not be automatically distributed").
# Source: SMP's own `smdistributed/modelparallel/torch/nn/predefined_hooks.py`, `_SUPPORTED_HF_VERSIONS` (SMP 1.12.1;
# SMP 1.7.0 had ["4.16.2"]); the release notes (sagemaker-python-sdk v2.199.0) add 4.17.0 in SMP 1.8.0 and 4.21 in
# 1.10.1 and name no later version; AWS's GPT-J tensor-parallel examples pin transformers==4.21.0 up to SMP 1.15.
# The one home of this list: train.py checks the installed version against it, the CDK side the pinned one.
SMP_V1_TENSOR_PARALLEL_TRANSFORMERS = ("4.17.0", "4.20.1", "4.21.0")
# HF model types whose SMP v1 tensor-parallel module this pipeline translates back to HF names for the final model:
# core/catalog/architectures.py (smp_v1_tensor_parallel), with its source.
SMP_V1_TENSOR_PARALLEL_MODEL_TYPES = model_types_where("smp_v1_tensor_parallel")


@dataclasses.dataclass(frozen=True)
class ParallelLayout:
    """What mp_parameters says, with the defaults the libraries apply."""

    smp_version: str | None = None  # "v1", "v2", or None when mp_parameters is absent or holds only shared keys
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    tensor_parallel_degree: int = 1
    pipeline_parallel_degree: int = 1
    microbatches: int = 1
    sharded_data_parallel_degree: int = 1
    hybrid_shard_degree: int = 0
    ddp: bool = False
    fp16: bool | None = None  # None: not given in mp_parameters
    bf16: bool | None = None
    prescaled_batch: bool = False
    activation_offloading: bool = False


def _integer(parameters: Mapping[str, Any], key: str, default: int) -> int:
    value = parameters.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"mp_parameters {key} must be a non-negative integer, got {value!r}")
    return value


def _flag(parameters: Mapping[str, Any], key: str) -> bool | None:
    value = parameters.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ConfigurationError(f"mp_parameters {key} must be true or false, got {value!r}")


def read_mp_parameters(environ: Mapping[str, str], platform: PlatformArguments) -> dict[str, Any]:
    """The JSON object from SM_HP_MP_PARAMETERS (set by the toolkit), else from the --mp_parameters flag."""
    text = environ.get("SM_HP_MP_PARAMETERS") or platform.mp_parameters
    if not text:
        return {}
    try:
        parameters = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"mp_parameters is not valid JSON ({error}): {text!r}") from None
    if not isinstance(parameters, dict):
        raise ConfigurationError(f"mp_parameters must be a JSON object, got {text!r}")
    return parameters


def parse_layout(parameters: Mapping[str, Any]) -> ParallelLayout:
    keys = set(parameters)
    v1_keys, v2_keys = keys & SMP_V1_ONLY_KEYS, keys & SMP_V2_ONLY_KEYS
    if v1_keys and v2_keys:
        raise ConfigurationError(
            f"mp_parameters mixes SMP v1 keys ({', '.join(sorted(v1_keys))}) and SMP v2 keys "
            f"({', '.join(sorted(v2_keys))}); use the keys of one library version"
        )
    version = "v1" if v1_keys else "v2" if v2_keys else None
    pipeline = _integer(parameters, "partitions", _integer(parameters, "pipeline_parallel_degree", 1))
    return ParallelLayout(
        smp_version=version,
        parameters=dict(parameters),
        tensor_parallel_degree=max(1, _integer(parameters, "tensor_parallel_degree", 1)),
        pipeline_parallel_degree=max(1, pipeline),
        microbatches=max(1, _integer(parameters, "microbatches", 1)),
        sharded_data_parallel_degree=max(1, _integer(parameters, "sharded_data_parallel_degree", 1)),
        hybrid_shard_degree=_integer(parameters, "hybrid_shard_degree", 0),
        ddp=bool(_flag(parameters, "ddp")),
        fp16=_flag(parameters, "fp16"),
        bf16=_flag(parameters, "bf16"),
        prescaled_batch=bool(_flag(parameters, "prescaled_batch")),
        activation_offloading=bool(_flag(parameters, "sm_activation_offloading")),
    )


def world_size_from_environment(environ: Mapping[str, str]) -> int:
    """Processes in the job: torchrun sets WORLD_SIZE, Open MPI (the SMP v1 launcher) OMPI_COMM_WORLD_SIZE."""
    for key in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if environ.get(key):
            return int(environ[key])
    return 1


def library_importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def resolve_backend(
    requested: str, layout: ParallelLayout, importable: Callable[[str], bool] = library_importable
) -> tuple[str, str | None]:
    """The backend to run and, when auto falls back to plain PyTorch despite mp_parameters, a note saying why.

    An explicit backend is returned as asked; its library is imported (and its absence reported) when it starts.
    """
    if requested != "auto":
        return requested, None
    if layout.smp_version in ("v1", None) and layout.parameters and importable(SMP_V1_MODULE):
        return "smp_v1", None
    if layout.smp_version in ("v2", None) and layout.parameters and importable(SMP_V2_MODULE):
        return "smp_v2", None
    if layout.parameters:
        module = SMP_V2_MODULE if layout.smp_version == "v2" else SMP_V1_MODULE
        return "torch", (
            f"mp_parameters is set but {module} is not importable here: running plain PyTorch "
            "(the SMP layout is ignored). Use the SMP container, or --backend to insist."
        )
    return "torch", None


def resolve_precision(hp: Hyperparameters, layout: ParallelLayout, backend: str) -> str:
    """fp32, fp16 or bf16. Under SMP v1 the flags and mp_parameters fp16/bf16 must agree where both are given."""
    fp16, bf16 = hp.fp16, hp.bf16
    if backend == "smp_v1":
        for name, flag, smp_value in (("fp16", hp.fp16, layout.fp16), ("bf16", hp.bf16, layout.bf16)):
            if flag and smp_value is False:
                raise ConfigurationError(
                    f"--{name} is true but mp_parameters sets {name}=false; SMP reads precision from mp_parameters, "
                    f"so set {name} in one place"
                )
        fp16, bf16 = fp16 or bool(layout.fp16), bf16 or bool(layout.bf16)
    if fp16 and bf16:
        raise ConfigurationError(
            "fp16 and bf16 are both enabled (flags or mp_parameters): choose one mixed-precision type"
        )
    return "fp16" if fp16 else "bf16" if bf16 else "fp32"


def check_layout(hp: Hyperparameters, layout: ParallelLayout, backend: str, world_size: int) -> None:
    """Layout problems that would otherwise surface minutes into the job, or as a hang."""
    adapter_problem = adapter_backend_problem(hp.method, backend, layout.tensor_parallel_degree)
    if adapter_problem:
        raise ConfigurationError(adapter_problem)
    if backend == "smp_v1":
        tp, pp = layout.tensor_parallel_degree, layout.pipeline_parallel_degree
        if world_size % (tp * pp):
            raise ConfigurationError(
                f"tensor_parallel_degree ({tp}) x pipeline_parallel_degree ({pp}) = {tp * pp} does not divide the "
                f"world size {world_size} (processes); choose mp_parameters degrees whose product divides "
                f"{world_size}"
            )
        check_smp_v1_requires(layout.parameters)
        for name in ("train_batch_size", "val_batch_size"):
            batch = getattr(hp, name)
            if batch % layout.microbatches:
                raise ConfigurationError(
                    f"--{name} ({batch}) is not divisible by mp_parameters microbatches ({layout.microbatches}); "
                    f"use a multiple of {layout.microbatches}"
                )
        if hp.pretrained_dir and layout.parameters.get("delayed_parameter_initialization"):
            raise ConfigurationError(
                "mp_parameters delayed_parameter_initialization is true while fine-tuning --pretrained_dir: SMP then "
                "initializes the weights after partitioning, over the loaded ones. Remove it when fine-tuning (the "
                "GPT-J tensor-parallel reference loads pretrained weights without it)"
            )
        if layout.sharded_data_parallel_degree > 1:
            raise ConfigurationError(
                f"mp_parameters sharded_data_parallel_degree is {layout.sharded_data_parallel_degree}: SMP v1 "
                "cannot save a full model under sharded data parallelism (it writes partial shards only), and this "
                "pipeline needs the final model in HF format. Use tensor_parallel_degree / shard_optimizer_state, "
                "or SMP v2 hybrid sharding"
            )
    elif backend == "smp_v2":
        tp = layout.tensor_parallel_degree
        if world_size % tp:
            raise ConfigurationError(
                f"mp_parameters tensor_parallel_degree ({tp}) does not divide the world size {world_size}"
            )
        # SMP v2 shards over the data-parallel ranks that tensor parallelism leaves (the SMP v2 reference).
        data_parallel = world_size // tp
        if layout.hybrid_shard_degree and data_parallel % layout.hybrid_shard_degree:
            raise ConfigurationError(
                f"mp_parameters hybrid_shard_degree ({layout.hybrid_shard_degree}) does not divide the {data_parallel} "
                f"data-parallel ranks (world size {world_size} / tensor_parallel_degree {tp})"
            )
        if hp.fp16:
            raise ConfigurationError("--fp16 is not supported with SMP v2 (FSDP): use --bf16")
    # Last: the batch against synth's memory figures, once the layout says how a batch is split into microbatches.
    check_memory(hp, layout.microbatches)


def check_smp_v1_requires(parameters: Mapping[str, Any]) -> None:
    """Refuse what smp.init refuses: a key set away from its default while a key it requires has another value."""
    for key, (default, required) in SMP_V1_REQUIRES.items():
        value = parameters.get(key, default)
        if value == default:
            continue
        for other, (needed, other_default) in required.items():
            found = parameters.get(other, other_default)
            if found != needed:
                raise ConfigurationError(
                    f"mp_parameters {key}={json.dumps(value)} requires {other}={json.dumps(needed)}, but {other} is "
                    f"{json.dumps(found)}: SMP v1's smp.init refuses this (its config rules); set {other} to "
                    f"{json.dumps(needed)} or {key} back to {json.dumps(default)}"
                )


def check_model_for_layout(model_type: str, layout: ParallelLayout, backend: str) -> None:
    tensor_parallel = backend == "smp_v2" and layout.tensor_parallel_degree > 1
    if tensor_parallel and model_type not in SMP_V2_TENSOR_PARALLEL_MODEL_TYPES:
        raise ConfigurationError(
            f"SMP v2 has no tensor parallelism for model type {model_type!r} (mp_parameters "
            f"tensor_parallel_degree={layout.tensor_parallel_degree}); it supports "
            f"{', '.join(sorted(SMP_V2_TENSOR_PARALLEL_MODEL_TYPES))}. Set tensor_parallel_degree to 1 and "
            "shard with hybrid_shard_degree, or use SMP v1 for GPT-J tensor parallelism"
        )


def check_smp_v1_tensor_parallelism(
    model_type: str, transformers_version: str, layout: ParallelLayout, backend: str, version_source: str
) -> None:
    """SMP v1 tensor parallelism applies only where SMP replaces the model; elsewhere it is silently skipped, and a
    model that needed it runs out of GPU memory (or trains slowly) instead of failing. `version_source` says where
    `transformers_version` comes from (installed here, or pinned in requirements.txt)."""
    tp = layout.tensor_parallel_degree
    if backend != "smp_v1" or tp <= 1:
        return
    if model_type not in SMP_V1_TENSOR_PARALLEL_MODEL_TYPES:
        raise ConfigurationError(
            f"mp_parameters tensor_parallel_degree is {tp} but this pipeline runs SMP v1 tensor parallelism only for "
            f"model type {', '.join(sorted(SMP_V1_TENSOR_PARALLEL_MODEL_TYPES))}, not {model_type!r} (SMP v1 would "
            "train it without tensor parallelism, or cannot translate it back to a Hugging Face model). Set "
            "tensor_parallel_degree to 1 and use pipeline parallelism, or SMP v2 (tensor parallelism for "
            f"{', '.join(sorted(SMP_V2_TENSOR_PARALLEL_MODEL_TYPES))}, hybrid sharding for the rest)"
        )
    if transformers_version not in SMP_V1_TENSOR_PARALLEL_TRANSFORMERS:
        raise ConfigurationError(
            f"mp_parameters tensor_parallel_degree is {tp} but transformers is {transformers_version} "
            f"({version_source}): SMP v1 replaces Hugging Face models with its tensor-parallel modules only for "
            f"transformers {', '.join(SMP_V1_TENSOR_PARALLEL_TRANSFORMERS)}, and with any other version it silently "
            "trains every layer whole on every GPU. Pin transformers==4.21.0 for the SMP v1 image (python_version < "
            '"3.10") in training/requirements.in and regenerate the hashed lock '
            "(scripts/lock_training_requirements.py), or set tensor_parallel_degree to 1"
        )
    if layout.parameters.get("optimize", "speed") != "speed":
        raise ConfigurationError(
            f"mp_parameters tensor_parallel_degree is {tp} with optimize={layout.parameters['optimize']!r}: SMP v1's "
            "GPT-J state-dict translation (pretrained weights in, the final Hugging Face model out) supports only "
            'optimize="speed"; set optimize to "speed"'
        )
