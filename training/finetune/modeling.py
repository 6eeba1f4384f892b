"""Hugging Face model plumbing that works the same for GPT-J, OPT, BLOOM, GPT-NeoX and GPT-2, and for the
transformers versions the jobs run: 4.21.0 in the SMP v1 image (the last version SMP v1 tensor-parallelizes), 4.46.3
in the SMP v2 images, and the current 5.x.

APIs used are the ones every line shares: AutoConfig.from_pretrained / for_model, AutoTokenizer.from_pretrained,
AutoModelForCausalLM.from_config, <causal LM class>.from_pretrained(None, config=..., state_dict=...) (documented in
4.21 for "both a configuration and a state dictionary"), config/tokenizer save_pretrained and, for the torch and SMP
v2 backends, model.save_pretrained(state_dict=...). Where the lines differ the code asks the object instead of the
version: transformers 4.21 has no safetensors support at all (no SAFE_WEIGHTS_NAME, no `safe_serialization`), so
weights are read with the `safetensors` package here and a final model is written there with huggingface_hub's
save_torch_state_dict; `gradient_checkpointing_kwargs` arrived after 4.21; 5.x renamed `torch_dtype` to `dtype`.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .compatibility import REMEDY, check_readable, file_problems, folder_problems, installed_readers
from .errors import ConfigurationError
from .staged import describe as describe_staged
from .staged import folder_problems as staged_problems

# Files that make a folder a tokenizer (fast tokenizers, or the vocabularies slow ones are built from). Without any,
# transformers 5.x returns an empty tokenizer instead of failing.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.txt",
)
# JSON files in a model or tokenizer folder; checked here so that a broken one is named, whatever the library says.
JSON_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclasses.dataclass
class ModelSource:
    config: Any  # transformers.PretrainedConfig
    tokenizer: Any
    pretrained_dir: str | None  # None: random init from config

    @property
    def model_type(self) -> str:
        return str(getattr(self.config, "model_type", "unknown"))


def _json_problem(folder: Path) -> str | None:
    for name in JSON_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            value = json.loads(path.read_bytes())
        except (ValueError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return f"{path} is not readable JSON ({error})"
        if not isinstance(value, dict):
            return f"{path} holds a JSON {type(value).__name__}, not an object"
    return None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _load_tokenizer(candidates: list[str]) -> Any:
    from transformers import AutoTokenizer

    problems = []
    for name in candidates:
        folder = Path(name)
        if not folder.is_dir():
            problems.append(f"{folder} is not a folder")
            continue
        if not any((folder / file).is_file() for file in TOKENIZER_FILES):
            problems.append(f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)})")
            continue
        problem = _json_problem(folder)
        if problem:
            problems.append(problem)
            continue
        unreadable = folder_problems(folder, installed_readers())
        if unreadable:
            problems.append(f"{'; '.join(unreadable)}; {REMEDY}")
            continue
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{folder}: {_first_line(error)}")
            continue
        except Exception as error:
            # The tokenizers library (Rust) raises a plain Exception for a tokenizer.json it cannot parse; any
            # other type is a bug and propagates.
            if type(error) is not Exception:
                raise
            problems.append(f"{folder}/tokenizer.json: {_first_line(error)}")
            continue
        if len(tokenizer) <= 1:
            problems.append(f"{folder}: the tokenizer loaded from it has no vocabulary ({len(tokenizer)} token)")
            continue
        return tokenizer
    where = "; ".join(problems) or "no folder to look in"
    raise ConfigurationError(
        f"cannot load a tokenizer ({where}): pass --tokenizer_dir with a Hugging Face tokenizer folder "
        "(tokenizer.json and tokenizer_config.json), or put the tokenizer files in the model folder"
    )


def _config_from_folder(folder: Path, what: str) -> Any:
    from transformers import AutoConfig

    problem = _json_problem(folder)
    if problem:
        raise ConfigurationError(f"{what} {folder}: {problem}; stage a complete Hugging Face model folder")
    check_readable(folder, what)
    try:
        return AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError) as error:
        raise ConfigurationError(
            f"{what} {folder}: its config.json cannot be loaded ({_first_line(error)}); it must be a Hugging Face "
            'config with a model_type (e.g. "gptj") this transformers version knows'
        ) from None


def _config_from_path(path: str) -> Any:
    from transformers import AutoConfig

    target = Path(path)
    if target.is_dir():
        if not (target / "config.json").is_file():
            raise ConfigurationError(f"--model_config folder {path} has no config.json")
        return _config_from_folder(target, "--model_config folder")
    if not target.is_file():
        raise ConfigurationError(f"--model_config {path} is neither a JSON file nor a folder with config.json")
    try:
        values = json.loads(target.read_bytes())
        model_type = values.pop("model_type")
    except (ValueError, KeyError, AttributeError, TypeError):
        raise ConfigurationError(
            f'--model_config {path} must be an HF config JSON object with a model_type (e.g. "gptj")'
        ) from None
    problems = file_problems(target, "config.json", installed_readers())
    if problems:
        raise ConfigurationError(f"--model_config {path} cannot be read here: {'; '.join(problems)}; {REMEDY}")
    try:
        return AutoConfig.for_model(model_type, **values)
    except (ValueError, KeyError) as error:
        raise ConfigurationError(f"--model_config {path}: {_first_line(error)}") from None


def load_model_source(pretrained_dir: str | None, model_config: str | None, tokenizer_dir: str | None) -> ModelSource:
    """Config and tokenizer now (cheap, and enough to check the data); weights later, inside the backend's context."""
    if pretrained_dir:
        if not Path(pretrained_dir, "config.json").is_file():
            raise ConfigurationError(
                f"pretrained model folder {pretrained_dir} has no config.json (stage an HF model folder as the "
                "`model` channel, or pass --pretrained_dir)"
            )
        config = _config_from_folder(Path(pretrained_dir), "pretrained model folder")
        tokenizer_folders = [tokenizer_dir] if tokenizer_dir else [pretrained_dir]
    else:
        assert model_config is not None  # checked with the hyperparameters
        config = _config_from_path(model_config)
        tokenizer_folders = [tokenizer_dir] if tokenizer_dir else [model_config] if Path(model_config).is_dir() else []
    # Training never reuses past key/values; some models warn or break with the cache on under checkpointing.
    config.use_cache = False
    return ModelSource(config=config, tokenizer=_load_tokenizer(tokenizer_folders), pretrained_dir=pretrained_dir)


def max_positions(config: Any) -> int | None:
    """The longest sequence the model accepts, or None for position-free models (BLOOM's ALiBi)."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_data_fits_model(config: Any, block_size: int, max_token_id: int) -> None:
    limit = max_positions(config)
    if limit is not None and block_size > limit:
        raise ConfigurationError(
            f"the data blocks have {block_size} tokens but the model takes at most {limit} positions; "
            f"re-run prepare_data.py with --block_size {limit} or less"
        )
    vocab_size = int(config.vocab_size)
    if max_token_id >= vocab_size:
        raise ConfigurationError(
            f"the data contains token id {max_token_id} but the model's vocab_size is {vocab_size}: the data was "
            "tokenized with a different tokenizer than the model's"
        )


def _weight_files(folder: Path) -> list[Path]:
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return [path]
        try:
            shards = sorted(set(json.loads(path.read_bytes())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigurationError(f"{path} is not a weights index (a JSON object with a weight_map)") from None
        missing = [shard for shard in shards if not (folder / shard).is_file()]
        if missing:
            raise ConfigurationError(f"{path} lists shards that are not in {folder}: {', '.join(missing)}")
        return [folder / shard for shard in shards]
    raise ConfigurationError(
        f"pretrained model folder {folder} has no weights ({' or '.join(WEIGHT_FILES)}); stage the model again"
    )


def check_staged(folder: str) -> None:
    """Refuse a staged folder whose weights are not the ones staged (finetune/staged.py): before any pickle is read."""
    try:
        problems = staged_problems(Path(folder))
    except ValueError as error:
        raise ConfigurationError(str(error)) from None
    if problems:
        raise ConfigurationError(describe_staged(Path(folder), problems))


def read_hf_weights(folder: str) -> dict[str, torch.Tensor]:
    """The state dict of an HF model folder (safetensors or PyTorch .bin, one file or sharded), read here rather than
    by transformers: 4.21 cannot read safetensors. A staged folder's files are checked against its manifest first."""
    import safetensors
    from safetensors.torch import load_file

    check_staged(folder)
    state_dict: dict[str, torch.Tensor] = {}
    for path in _weight_files(Path(folder)):
        try:
            if path.suffix == ".safetensors":
                state_dict.update(load_file(str(path)))
            else:
                state_dict.update(torch.load(str(path), map_location="cpu", weights_only=True))
        except (safetensors.SafetensorError, OSError, RuntimeError) as error:
            raise ConfigurationError(
                f"cannot read the weights file {path} ({_first_line(error)}); stage it again"
            ) from None
    return state_dict


def _from_state_dict(config: Any, state_dict: dict[str, torch.Tensor], where: str) -> nn.Module:
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        raise ConfigurationError(f"{where}: model type {config.model_type!r} has no causal LM class") from None
    model, info = model_class.from_pretrained(None, config=config, state_dict=state_dict, output_loading_info=True)
    missing = sorted(info["missing_keys"])
    if missing:
        raise ConfigurationError(
            f"the weights in {where} lack {len(missing)} of the model's tensors (e.g. {', '.join(missing[:3])}), "
            "which would start from random values: stage the model folder again"
        )
    return model


def _load_in_dtype(
    source: ModelSource, dtype: torch.dtype, quantization_config: Any, device: torch.device, device_map: Any = None
) -> Any:
    """from_pretrained on the folder, straight into `dtype` (one copy in host memory, not an fp32 model plus the
    state dict), or 4-bit on `device` with a quantization config: what the LoRA backends load frozen base weights
    with; spread over devices by accelerate with a `device_map` (finetune/placement.py). Needs a transformers that
    reads safetensors (not 4.21, which the adapter methods never run with)."""
    import transformers
    from transformers import AutoModelForCausalLM

    check_staged(source.pretrained_dir)
    major = int(transformers.__version__.split(".")[0])
    # 5.x renamed torch_dtype to dtype and always loads without a full extra copy (low_cpu_mem_usage is gone).
    options: dict[str, Any] = {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype, "low_cpu_mem_usage": True}
    if quantization_config is not None:
        # bitsandbytes quantizes each weight as it moves to the GPU; the whole model never sits there unquantized.
        options.update(quantization_config=quantization_config, device_map={"": device})
    elif device_map is not None:  # each weight goes straight from its checkpoint shard to its device
        options.update(device_map=device_map)
    model, info = AutoModelForCausalLM.from_pretrained(
        source.pretrained_dir, config=source.config, output_loading_info=True, **options
    )
    missing = sorted(info["missing_keys"])
    if missing:
        raise ConfigurationError(
            f"the weights in {source.pretrained_dir} lack {len(missing)} of the model's tensors (e.g. "
            f"{', '.join(missing[:3])}), which would start from random values: stage the model folder again"
        )
    return model


def build_model(
    source: ModelSource,
    dtype: torch.dtype | None,
    load_weights: bool = True,
    *,
    direct: bool = False,
    quantization_config: Any = None,
    device: torch.device | None = None,
    device_map: Any = None,
) -> nn.Module:
    """The HF model in `dtype` (fp32 when None: AMP and SMP's fp16 optimizer keep fp32 masters), with the pretrained
    weights when there are any and `load_weights`; else initialized from the config. `direct` (the LoRA backends):
    load the weights with from_pretrained in `dtype`, 4-bit with `quantization_config` on `device`, or over the
    devices of `device_map`."""
    from transformers import AutoModelForCausalLM

    if source.pretrained_dir and load_weights and (direct or quantization_config is not None):
        return _load_in_dtype(
            source, dtype or torch.float32, quantization_config, device or torch.device("cpu"), device_map
        )
    if direct:  # built in `dtype` as from_pretrained builds it: buffers such as RoPE's inv_freq keep their own dtype
        import transformers

        keyword = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        return AutoModelForCausalLM.from_config(source.config, **{keyword: dtype or torch.float32})
    if source.pretrained_dir and load_weights:
        model = _from_state_dict(source.config, read_hf_weights(source.pretrained_dir), source.pretrained_dir)
    else:
        model = AutoModelForCausalLM.from_config(source.config)
    return model.to(dtype or torch.float32)


def load_hf_model(folder: str) -> nn.Module:
    """The model of an HF folder, in the dtype its weights are stored in, on every transformers line (4.21 cannot
    read safetensors itself): what the evaluation step loads."""
    state_dict = read_hf_weights(folder)
    model = _from_state_dict(_config_from_folder(Path(folder), "model folder"), state_dict, folder)
    stored = next((tensor.dtype for tensor in state_dict.values() if tensor.is_floating_point()), torch.float32)
    return model.to(stored)


def count_parameters(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in {id(p): p for p in model.parameters()}.values())


def find_transformer_layers(model: nn.Module, num_layers: int) -> nn.Module:
    """The container of the transformer blocks, found by shape rather than by attribute name so that every causal
    LM works: SMP's distributed transformer calls it `seq_layers`; HF models use a ModuleList of num_layers blocks
    (`transformer.h` in GPT-J/GPT-2/BLOOM, `model.decoder.layers` in OPT, `gpt_neox.layers`)."""
    for name, module in model.named_modules():
        if name.split(".")[-1] == "seq_layers":
            return module
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            return module
    raise ConfigurationError(
        f"could not find the {num_layers} transformer layers in {type(model).__name__}: no ModuleList of that length"
    )


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no weight decay for biases and normalization weights (LayerNorm, RMSNorm, ...)."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen = set()
    for module in model.modules():
        is_norm = "norm" in type(module).__name__.lower()
        for name, parameter in module.named_parameters(recurse=False):
            if parameter is None or id(parameter) in seen or not parameter.requires_grad:
                continue
            seen.add(id(parameter))
            (no_decay if is_norm or name == "bias" else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def enable_hf_gradient_checkpointing(model: nn.Module) -> None:
    """HF activation checkpointing, non-reentrant where the transformers version lets us ask (it works with DDP).
    transformers 5.x renamed the method (activation_checkpointing_enable); 4.21 has only the old name, without
    gradient_checkpointing_kwargs (reentrant checkpointing)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        return
    enable = model.gradient_checkpointing_enable
    if "gradient_checkpointing_kwargs" in inspect.signature(enable).parameters:
        enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        enable()


def _strip_wrapper_prefixes(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Wrappers (DDP, SMP's DistributedModel) prefix parameter names with `module.`; no HF causal LM has a
    top-level `module` attribute, so a prefix shared by every name is a wrapper's."""
    result = state_dict
    while result and all(name.startswith("module.") for name in result):
        result = {name[len("module.") :]: tensor for name, tensor in result.items()}
    return result


def save_hf_model(
    model: nn.Module, tokenizer: Any, state_dict: dict[str, torch.Tensor], model_dir: str
) -> tuple[Path, list[str]]:
    """Write the final model in HF format (config + weights + tokenizer) with the model's save_pretrained, as
    safetensors on every transformers line: 4.21 (the SMP v1 image) writes only pickles (pytorch_model.bin), so
    there the folder is written by write_hf_folder instead."""
    if "safe_serialization" not in inspect.signature(model.save_pretrained).parameters:
        return write_hf_folder(model.config, tokenizer, state_dict, model_dir)
    target = Path(model_dir)
    target.mkdir(parents=True, exist_ok=True)
    state_dict = _strip_wrapper_prefixes(state_dict)
    model.config.use_cache = True  # inference wants the cache back
    tensors = {name: tensor.detach().cpu() for name, tensor in state_dict.items()}
    # Later 4.x: opt in; 5.x always writes safetensors.
    model.save_pretrained(str(target), state_dict=tensors, safe_serialization=True)
    tokenizer.save_pretrained(str(target))
    return target, sorted(path.name for path in target.iterdir())


def write_hf_folder(
    config: Any, tokenizer: Any, state_dict: dict[str, torch.Tensor], model_dir: str
) -> tuple[Path, list[str]]:
    """Write an HF folder (config.json, safetensors shards with their index when large, tokenizer files) from the
    config and an HF-named state dict, without a model instance: for backends whose module is not an HF model.
    Tensors sharing memory (tied embeddings) are written once."""
    from huggingface_hub import save_torch_state_dict

    target = Path(model_dir)
    target.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.detach().cpu() for name, tensor in _strip_wrapper_prefixes(state_dict).items()}
    config = copy.deepcopy(config)
    config.use_cache = True  # inference wants the cache back
    floating = [tensor.dtype for tensor in tensors.values() if tensor.is_floating_point()]
    if floating:  # what save_pretrained records: the dtype the weights are stored in (5.x calls it `dtype`)
        setattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", str(floating[0]).split(".")[-1])
    config.save_pretrained(str(target))
    # Of tied tensors keep the input embedding: from_pretrained ties the output projection (lm_head, in every tied
    # causal LM here) to it, and transformers 4.21 tolerates only a missing lm_head.
    save_torch_state_dict(tensors, str(target), shared_tensors_to_discard=["lm_head.weight"])
    tokenizer.save_pretrained(str(target))
    return target, sorted(path.name for path in target.iterdir())
