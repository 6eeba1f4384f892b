"""A stand-in for deepspeed.init_inference on the GPU-only path (kernel injection, a pre-sharded checkpoint on the
meta device), which cannot run on CPU. It loads nothing, but it refuses what DeepSpeed 0.12.6 (the LMI 0.27.0 image)
refuses, or what it would silently turn into a broken model, where the handler depends on it. Read from
microsoft/DeepSpeed@v0.12.6:

- deepspeed/inference/config.py + runtime/config_utils.py: the config model forbids unknown keys (extra="forbid");
  `mp_size` is a deprecated alias of tensor_parallel.tp_size;
- runtime/state_dict_factory.py, SDLoaderFactory.get_sd_loader_json: a str is opened as JSON, a dict taken as it is;
  `type`, `checkpoints` and `version` are read (KeyError); a type other than BLOOM/ds_model goes to get_sd_loader,
  which asserts "{type} checkpoint type is not supported" (or builds a Megatron loader the injection cannot read);
- inference/engine.py L172: a model on the meta device is to_empty()'d: without a checkpoint every weight would be
  uninitialized memory (DeepSpeed does not refuse it; the stand-in does, as a model that cannot be right);
- module_inject/replace_module.py, replace_transformer_layer: without kernel injection a checkpoint is read as a list
  of files (AutoTP), so a {"tp", "non_tp"} description fails there; with it, the container must support meta tensors
  ("Meta Tensor checkpoint loading not supported in {container} container"), and rank r of N loads, per group of
  ckpt_mp_size files, files sd_offset .. sd_offset + sd_count - 1 (os.path.join(base_dir, name), base_dir from the
  description first);
- module_inject/load_checkpoint.py, load_transformer_layer: int8 shards are neither merged ("Merging of the
  checkpoints are not supported when using INT8 checkpoint!") nor split without extra scales ("We require the
  quantization scales for larger TP-size when loading INT8 checkpoint!"); the description's dtype stands in for the
  tensors' dtype, which the stand-in does not load.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

# DeepSpeedInferenceConfig @ v0.12.6: field names and aliases (inference/config.py L131-L288).
CONFIG_KEYS = {
    "replace_with_kernel_inject", "kernel_inject", "dtype", "tensor_parallel", "tp", "enable_cuda_graph",
    "use_triton", "triton_autotune", "zero", "triangular_masking", "tm", "moe", "quant", "checkpoint", "base_dir",
    "set_empty_params", "save_mp_checkpoint_path", "checkpoint_config", "ckpt_config", "return_tuple",
    "training_mp_size", "replace_method", "injection_policy", "injection_dict", "injection_policy_tuple", "config",
    "args", "max_out_tokens", "max_tokens", "min_out_tokens", "min_tokens", "transposed_mode", "mp_size", "mpu",
    "ep_size", "ep_group", "expert_group", "ep_mp_group", "expert_mp_group", "moe_experts", "moe_type",
}  # fmt: skip
# Containers with MetaTensorContainer (module_inject/containers/*.py), by Hugging Face model_type.
META_CONTAINERS = {"bloom", "gptj", "gpt_neo", "gpt_neox", "opt", "llama"}


class StandInInferenceEngine(SimpleNamespace):
    """What init_inference returns: `.module` is the model (left on the meta device: nothing is loaded)."""


def init_inference(model, config=None, **kwargs):
    settings = {**(config or {}), **kwargs}
    unknown = sorted(set(settings) - CONFIG_KEYS)
    if unknown:
        raise ValueError(f"DeepSpeedInferenceConfig: extra fields not permitted: {unknown}")
    tensor_parallel = settings.get("tensor_parallel", settings.get("tp", {}))
    if "mp_size" in settings and tensor_parallel:
        raise AssertionError("mp_size is deprecated; set only tensor_parallel.tp_size (config_utils.py)")
    tp_size = int(tensor_parallel.get("tp_size", settings.get("mp_size", 1)))
    kernel_inject = bool(settings.get("replace_with_kernel_inject", settings.get("kernel_inject", False)))
    base_dir = settings.get("base_dir", "")
    description = _sd_loader_json(settings.get("checkpoint"))
    on_meta = getattr(getattr(model, "device", None), "type", None) == "meta"

    if on_meta and description is None:
        raise RuntimeError(
            "a model on the meta device without a checkpoint: DeepSpeed 0.12.6 would to_empty() it and serve "
            "uninitialized weights (inference/engine.py L172)"
        )
    if description is not None and not kernel_inject and not isinstance(description["checkpoints"], list):
        raise KeyError(0)  # replace_module.py L329-L332: checkpoint[i] of a dict
    if description is not None and kernel_inject:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type not in META_CONTAINERS:
            raise AssertionError(f"Meta Tensor checkpoint loading not supported in {model_type} container")
        for rank in range(tp_size):
            for path in _files_loaded_by(rank, tp_size, description, base_dir):
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}' (torch.load, rank {rank})")
    return StandInInferenceEngine(module=model, settings=settings, tp_size=tp_size)


def _sd_loader_json(checkpoint):
    if checkpoint is None:
        return None
    if isinstance(checkpoint, str):
        with open(checkpoint) as handle:
            data = json.load(handle)
    else:
        assert isinstance(checkpoint, dict)
        data = checkpoint
    sd_type, _, _ = data["type"], data["checkpoints"], data["version"]
    if sd_type.lower() in ("bloom", "ds_model"):
        return data
    if sd_type == "Megatron":
        raise TypeError("'MegatronSDLoader' object is not subscriptable (replace_transformer_layer reads a dict)")
    raise AssertionError(f"{sd_type} checkpoint type is not supported")


def _files_loaded_by(rank: int, world_size: int, description: dict, base_dir: str) -> list[str]:
    """replace_module.py L352-L420 @ v0.12.6, for one rank."""
    checkpoint = description["checkpoints"]
    ckpt_list = checkpoint["tp"] if isinstance(checkpoint, dict) else checkpoint
    ckpt_type = description.get("parallelization", "pp")
    ckpt_mp_size = description.get("mp_size", description.get("tp_size", len(ckpt_list)))
    base_dir1 = description.get("base_dir", base_dir)

    def where(name: str) -> str:
        return os.path.join(base_dir1, name) if base_dir1 else name

    if ckpt_type == "pp" and isinstance(checkpoint, list):
        return [os.path.join(base_dir1, name) for name in checkpoint]
    num_checkpoints = len(ckpt_list) // ckpt_mp_size
    tp_split_size = world_size / ckpt_mp_size
    sd_offset = int(rank / tp_split_size)
    sd_count = int((rank + max(1, tp_split_size)) / tp_split_size) - sd_offset
    if description.get("dtype") == "int8" and sd_count > 1:
        raise AssertionError(
            "Merging of the checkpoints are not supported when using INT8 checkpoint! Please use a as many GPUs as "
            "TP-size for the checkpoint"
        )
    if description.get("dtype") == "int8" and tp_split_size > 1:
        raise AssertionError(
            "ERROR: We require the quantization scales for larger TP-size when loading INT8 checkpoint! Please use "
            "the FP16 checkpoint to generate INT8 checkpoint with the sharding parameters!"
        )
    files = []
    for i in range(num_checkpoints):
        index = i * ckpt_mp_size + sd_offset
        files += [where(ckpt_list[index + j]) for j in range(sd_count)]  # IndexError, as in DeepSpeed
    if isinstance(checkpoint, dict):
        files += [where(name) for name in checkpoint.get("non_tp", [])]
    return files
