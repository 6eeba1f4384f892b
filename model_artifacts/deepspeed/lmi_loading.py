"""Decide how to load a model folder (plan_loading) and load it behind deepspeed.init_inference (load_model).

Targets: the LMI 0.27.0 DeepSpeed image (deepspeed 0.12.6, torch 2.1.2, a transformers 4.3x) and current releases
(deepspeed 0.19.x, transformers 5.x). Only APIs present in both are used:
- init_inference(model, tensor_parallel={"tp_size": n}, dtype=..., replace_with_kernel_inject=..., max_out_tokens=...)
  (the config-dict form exists since deepspeed 0.7.6; `mp_size` is deprecated);
- AutoModelForCausalLM.from_pretrained(dir, low_cpu_mem_usage=True): 4.x builds the model on the meta device and
  fills it from the checkpoint (no random init of a full copy first), 5.x always does and ignores the flag.
Where they differ, the code branches on the installed version explicitly: the dtype argument (torch_dtype in 4.x,
dtype in 5.x) and BLOOM kernel injection (below).

Kernel injection: only on CUDA and only for architectures with a DeepSpeed injection policy. A folder holding a
DeepSpeed inference checkpoint description (ds_inference_config.json, as microsoft/bloom-deepspeed-inference-int8)
is built on the meta device and each rank loads only its shards, so no rank materializes the full model. DeepSpeed
0.12.6 checks such a description late (after minutes of loading) or not at all, so read_ds_checkpoint checks it at
start-up the way deepspeed/module_inject/replace_module.py (replace_transformer_layer) and load_checkpoint.py will
read it: type, version, the shards each rank loads, the tensor-parallel split and the dtype. The description is
handed to init_inference as a dict whose base_dir is the weights folder (a base_dir in the file, as DeepSpeed's
writer leaves it, would otherwise win over ours and point at the machine that wrote the shards).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmi_config import ConfigError, HandlerConfig

log = logging.getLogger(__name__)

# The architecture records of core/catalog/architectures.py, where each fact has its source. This folder runs in the
# LMI container and cannot import core/: `python -m generators.architectures --write` (make docs) writes this copy.
_RECORDS = json.loads((Path(__file__).parent / "architectures.json").read_text())["architectures"]
# model_type values with a kernel-injection policy that fits (deepspeed_kernels).
INJECTION_ARCHITECTURES = tuple(name for name, record in _RECORDS.items() if record["deepspeed_kernels"])
# The last transformers release with which DeepSpeed injects kernels into a model_type, where one is known
# (deepspeed_kernels_max_transformers: BLOOM's modules changed after 4.43.4).
_LAST_TRANSFORMERS_FOR_INJECTION = {
    name: tuple(int(part) for part in record["deepspeed_kernels_max_transformers"].split("."))
    for name, record in _RECORDS.items()
    if record["deepspeed_kernels_max_transformers"]
}
DS_CHECKPOINT_DESCRIPTION = "ds_inference_config.json"
# Kernel-injection containers that load a checkpoint into a meta model (deepspeed_meta_checkpoint).
META_CHECKPOINT_ARCHITECTURES = tuple(name for name, record in _RECORDS.items() if record["deepspeed_meta_checkpoint"])
# get_sd_loader_json (deepspeed/runtime/state_dict_factory.py) returns these descriptions as they are; any other type
# becomes a Megatron loader, which the kernel-injection path cannot read.
DS_CHECKPOINT_TYPES = ("bloom", "ds_model")
# The option.dtype values that can serve a checkpoint stored in each dtype (the description's torch names): int8
# shards are loaded as they are, with their scales; fp16 shards may also be quantized to int8 while loading
# (load_checkpoint.py, load_parameters: weight_quantizer.quantize for non-int8 tensors).
_CHECKPOINT_DTYPES = {"int8": ("int8",), "float16": ("fp16", "int8"), "bfloat16": ("bf16",), "float32": ("fp32",)}
# Config attributes that state a model's context window, in the order they are trusted.
_CONTEXT_ATTRIBUTES = ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "n_ctx")
# Tokenizers without a real limit report a huge sentinel (int(1e30)); anything above this is not a context length.
_IMPLAUSIBLE_CONTEXT = 1_000_000

_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "int8": "float16"}
_DEEPSPEED_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "int8": "int8"}


@dataclass(frozen=True)
class LoadPlan:
    model_type: str
    kernel_injection: bool
    torch_dtype: str  # what the weights are loaded as (torch attribute name)
    deepspeed_dtype: str  # what init_inference runs in; int8 quantizes fp16 weights
    meta_checkpoint: str | None  # ds_inference_config.json to load shards from, model built on meta
    context_length: int  # prompt + new tokens
    max_input_length: int  # prompt tokens
    checkpoint: dict | None = None  # the description init_inference gets, base_dir set to the weights folder


def plan_loading(
    config: HandlerConfig,
    model_config: Any,
    weights_dir: str,
    *,
    cuda_available: bool,
    transformers_version: str,
    tokenizer_max_length: int | None = None,
) -> LoadPlan:
    """Every loading decision, made up front and without touching a GPU, so a bad combination fails at start-up."""
    model_type = str(getattr(model_config, "model_type", ""))
    kernel_injection = _kernel_injection(config, model_type, cuda_available, transformers_version)
    if config.dtype == "int8" and not kernel_injection:
        raise ConfigError(
            f"option.dtype='int8' needs DeepSpeed kernel injection, which is off here (model_type={model_type!r}, "
            f"CUDA available: {cuda_available}, option.kernel_injection={config.kernel_injection!r}); "
            "use fp16 or bf16"
        )
    meta_checkpoint = checkpoint = None
    description = os.path.join(weights_dir, DS_CHECKPOINT_DESCRIPTION)
    if os.path.isfile(description):
        if not kernel_injection:
            raise ConfigError(
                f"{description} describes a DeepSpeed inference checkpoint, which only loads with kernel injection; "
                f"it is off here (model_type={model_type!r}, CUDA available: {cuda_available}, "
                f"option.kernel_injection={config.kernel_injection!r})"
            )
        checkpoint = read_ds_checkpoint(description, weights_dir, config=config, model_type=model_type)
        meta_checkpoint = description
    if config.dtype == "int8" and checkpoint is None:
        # DeepSpeed quantizes only while it loads checkpoint shards (load_checkpoint.py, weight_quantizer.quantize);
        # from a Hugging Face model it copies fp16 weights into int8 parameters without scales, because
        # apply_weight_quantization is disabled ("TODO(cmikeh2): Re-enable this once verified",
        # module_inject/containers/base.py @ v0.12.6 and later): the endpoint would start and answer garbage.
        raise ConfigError(
            f"option.dtype='int8' needs a pre-sharded DeepSpeed checkpoint ({DS_CHECKPOINT_DESCRIPTION} with its "
            f"shards) in {weights_dir}: DeepSpeed quantizes only while loading such shards, and would cast this "
            "folder's weights to int8 without scales; serve an int8 or fp16 DeepSpeed checkpoint, or use "
            "option.dtype=fp16 or bf16"
        )
    context_length = _context_length(config, model_config, model_type, tokenizer_max_length)
    max_input_length = config.max_input_length if config.max_input_length is not None else context_length - 1
    if max_input_length >= context_length:
        raise ConfigError(
            f"option.max_input_length={max_input_length} leaves no room for new tokens in the context of "
            f"{context_length} tokens; expected a value below {context_length}"
        )
    return LoadPlan(
        model_type=model_type,
        kernel_injection=kernel_injection,
        torch_dtype=_TORCH_DTYPES[config.dtype],
        deepspeed_dtype=_DEEPSPEED_DTYPES[config.dtype],
        meta_checkpoint=meta_checkpoint,
        context_length=context_length,
        max_input_length=max_input_length,
        checkpoint=checkpoint,
    )


def read_ds_checkpoint(path: str, weights_dir: str, *, config: HandlerConfig, model_type: str) -> dict:
    """The checkpoint description for init_inference, once it is known to load on this endpoint (ConfigError if not).

    Read as DeepSpeed 0.12.6 reads it in replace_transformer_layer: a dict of checkpoints (or parallelization "tp")
    is tensor-parallel, its "tp" files split into groups of mp_size / tp_size (else the file count) shards; rank r of
    N loads shard r * tp_size // N of each group (merging several when N < tp_size, splitting one when N > tp_size),
    then every "non_tp" file. Otherwise every rank loads every listed file in turn.
    """
    tp = config.tensor_parallel_degree
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} is not readable JSON ({error}); expected DeepSpeed's description") from None
    missing = [key for key in ("type", "checkpoints", "version") if not isinstance(data, dict) or key not in data]
    if missing:
        raise ConfigError(
            f"{path} has no {', '.join(missing)}; DeepSpeed's get_sd_loader_json needs type, checkpoints and version"
        )
    if str(data["type"]).lower() not in DS_CHECKPOINT_TYPES:
        raise ConfigError(
            f"{path} has type={data['type']!r}; DeepSpeed loads pre-sharded inference checkpoints of type BLOOM or "
            "ds_model (any other type goes to its Megatron loader)"
        )
    if model_type not in META_CHECKPOINT_ARCHITECTURES:
        raise ConfigError(
            f"{path} needs a model built on the meta device, which DeepSpeed's kernel injection loads only for "
            f"{', '.join(META_CHECKPOINT_ARCHITECTURES)}, not model_type={model_type!r}; serve the Hugging Face weights"
        )
    listed = data["checkpoints"]
    if isinstance(listed, dict) or data.get("parallelization", "pp") == "tp":
        shards = listed.get("tp") if isinstance(listed, dict) else listed
        non_tp = listed.get("non_tp", []) if isinstance(listed, dict) else []
        if not isinstance(shards, list) or not shards or not isinstance(non_tp, list):
            raise ConfigError(f"{path} lists no tensor-parallel shards (checkpoints.tp must be a list of files)")
        split = data.get("mp_size", data.get("tp_size", len(shards)))
        if not isinstance(split, int) or split < 1 or len(shards) % split:
            raise ConfigError(
                f"{path}: its {len(shards)} checkpoints.tp files do not form groups of tp_size={split!r}; DeepSpeed "
                "would skip or misplace shards"
            )
        if data.get("dtype") == "int8" and split != tp:
            raise ConfigError(
                f"{path} is an int8 checkpoint sharded for tensor parallelism {split}, but this endpoint runs "
                f'option.tensor_parallel_degree={tp}. DeepSpeed cannot merge or split int8 shards ("Merging of the '
                'checkpoints are not supported when using INT8 checkpoint", module_inject/load_checkpoint.py): '
                f"serve it with tensor_parallel_degree={split} on an instance with at least {split} GPUs, or use a "
                f"checkpoint sharded for {tp}"
            )
        if split % tp and tp % split:
            raise ConfigError(
                f"{path} is sharded for tensor parallelism {split}, which option.tensor_parallel_degree={tp} neither "
                f"divides nor is a multiple of; use tensor_parallel_degree={split} or a checkpoint sharded for {tp}"
            )
        files = shards + non_tp
    elif isinstance(listed, list) and listed:
        files = listed
    else:
        raise ConfigError(f"{path} lists no checkpoint files (checkpoints is {listed!r})")
    stored = data.get("dtype")
    if stored is not None and stored not in _CHECKPOINT_DTYPES:
        raise ConfigError(f"{path} has dtype={stored!r}; expected one of {', '.join(_CHECKPOINT_DTYPES)}")
    if stored is not None and config.dtype not in _CHECKPOINT_DTYPES[stored]:
        raise ConfigError(
            f"{path} holds {stored} weights, which option.dtype={config.dtype!r} cannot serve; "
            f"use option.dtype={' or '.join(_CHECKPOINT_DTYPES[stored])}"
        )
    absent = [name for name in files if not os.path.isfile(os.path.join(weights_dir, name))]
    if absent:
        shown = ", ".join(absent[:5]) + (", ..." if len(absent) > 5 else "")
        raise ConfigError(f"{path} lists {len(absent)} file(s) missing from {weights_dir}: {shown}")
    return {**data, "base_dir": weights_dir}


def load_model(weights_dir: str, config: HandlerConfig, *, use_cuda: bool, local_rank: int = 0):
    """Load tokenizer and model, wrap the model with deepspeed.init_inference; return (model, tokenizer, plan)."""
    import deepspeed
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model_config = AutoConfig.from_pretrained(weights_dir)
    tokenizer = AutoTokenizer.from_pretrained(weights_dir)
    plan = plan_loading(
        config,
        model_config,
        weights_dir,
        cuda_available=use_cuda,
        transformers_version=transformers.__version__,
        tokenizer_max_length=getattr(tokenizer, "model_max_length", None),
    )
    log.info("loading %s: %s", weights_dir, plan)
    torch_dtype = getattr(torch, plan.torch_dtype)
    # transformers 5 renamed torch_dtype to dtype (the old name still works there, with a deprecation warning).
    dtype_argument = {"dtype" if _version_tuple(transformers.__version__) >= (5,) else "torch_dtype": torch_dtype}
    if plan.meta_checkpoint:
        with deepspeed.OnDevice(dtype=torch_dtype, device="meta"):
            model = AutoModelForCausalLM.from_config(model_config, **dtype_argument)
    else:
        model = AutoModelForCausalLM.from_pretrained(weights_dir, low_cpu_mem_usage=True, **dtype_argument)
    model.eval()

    inference_kwargs: dict[str, Any] = {
        "tensor_parallel": {"tp_size": config.tensor_parallel_degree},
        "dtype": getattr(torch, plan.deepspeed_dtype),
        "replace_with_kernel_inject": plan.kernel_injection,
    }
    if plan.kernel_injection:
        # The fused kernels preallocate a KV workspace of max_out_tokens (default 1024) and fail on longer sequences.
        inference_kwargs["max_out_tokens"] = plan.context_length
    if plan.checkpoint:
        inference_kwargs["checkpoint"] = plan.checkpoint
        inference_kwargs["base_dir"] = weights_dir
    if use_cuda:
        torch.cuda.set_device(local_rank)
    engine = deepspeed.init_inference(model, **inference_kwargs)
    model = engine.module
    model.eval()
    return model, tokenizer, plan


def _kernel_injection(config: HandlerConfig, model_type: str, cuda_available: bool, transformers_version: str) -> bool:
    has_policy = model_type in INJECTION_ARCHITECTURES
    last_release = _LAST_TRANSFORMERS_FOR_INJECTION.get(model_type)
    too_new = last_release is not None and _version_tuple(transformers_version) > last_release
    if config.kernel_injection == "false":
        return False
    if config.kernel_injection == "auto":
        return cuda_available and has_policy and not too_new
    # "true": the operator asked for it, so every reason it cannot happen is an error.
    if not cuda_available:
        raise ConfigError("option.kernel_injection='true' needs a CUDA GPU, and none is visible; use auto or false")
    if not has_policy:
        raise ConfigError(
            f"option.kernel_injection='true' but DeepSpeed has no injection policy for model_type={model_type!r}; "
            f"policies exist for {', '.join(INJECTION_ARCHITECTURES)}; use auto or false"
        )
    if too_new:
        last = ".".join(str(part) for part in last_release)
        raise ConfigError(
            f"option.kernel_injection='true' but DeepSpeed refuses {model_type.upper()} kernel injection with "
            f"transformers {transformers_version} (> {last}); use the LMI 0.27.0 image's transformers, or auto/false"
        )
    return True


def _context_length(config: HandlerConfig, model_config: Any, model_type: str, tokenizer_max_length: int | None) -> int:
    if config.context_length is not None:
        return config.context_length
    for attribute in _CONTEXT_ATTRIBUTES:
        value = getattr(model_config, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and 1 < value < _IMPLAUSIBLE_CONTEXT:
            return value
    if isinstance(tokenizer_max_length, int) and 1 < tokenizer_max_length < _IMPLAUSIBLE_CONTEXT:
        return tokenizer_max_length
    raise ConfigError(
        f"cannot tell the context length of model_type={model_type!r}: its config.json has none of "
        f"{', '.join(_CONTEXT_ATTRIBUTES)} and the tokenizer states no limit; set option.context_length"
    )


def _version_tuple(version: str) -> tuple[int, ...]:
    # Leading digits of each part: "5.0.0rc1" -> (5, 0, 0), "4.43.4.dev0" -> (4, 43, 4).
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.split(".")[:3])
