"""Hugging Face model plumbing that works the same for GPT-J, OPT, BLOOM, GPT-NeoX and GPT-2, and for the
transformers versions in the SMP v1 containers (4.2x) and the current one (5.x).

APIs used are the ones both lines share: AutoConfig.from_pretrained / for_model, AutoModelForCausalLM.from_pretrained
/ from_config, AutoTokenizer.from_pretrained, save_pretrained(state_dict=...). Where the two lines differ (the
`safe_serialization` and `gradient_checkpointing_kwargs` parameters) the code asks the signature instead of the
version.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import ConfigurationError


@dataclasses.dataclass
class ModelSource:
    config: Any  # transformers.PretrainedConfig
    tokenizer: Any
    pretrained_dir: str | None  # None: random init from config

    @property
    def model_type(self) -> str:
        return str(getattr(self.config, "model_type", "unknown"))


def _load_tokenizer(candidates: list[str]) -> Any:
    from transformers import AutoTokenizer

    errors = []
    for folder in candidates:
        try:
            return AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as error:
            errors.append(f"{folder}: {str(error).splitlines()[0]}")
    where = "; ".join(errors) or "no folder to look in"
    raise ConfigurationError(
        f"no tokenizer found ({where}): pass --tokenizer_dir, or put the tokenizer files in the model folder"
    )


def _config_from_path(path: str) -> Any:
    from transformers import AutoConfig

    target = Path(path)
    if target.is_dir():
        if not (target / "config.json").is_file():
            raise ConfigurationError(f"--model_config folder {path} has no config.json")
        return AutoConfig.from_pretrained(str(target))
    if not target.is_file():
        raise ConfigurationError(f"--model_config {path} is neither a JSON file nor a folder with config.json")
    try:
        values = json.loads(target.read_text())
        model_type = values.pop("model_type")
    except (json.JSONDecodeError, KeyError, AttributeError):
        raise ConfigurationError(
            f'--model_config {path} must be an HF config JSON object with a model_type (e.g. "gptj")'
        ) from None
    return AutoConfig.for_model(model_type, **values)


def load_model_source(pretrained_dir: str | None, model_config: str | None, tokenizer_dir: str | None) -> ModelSource:
    """Config and tokenizer now (cheap, and enough to check the data); weights later, inside the backend's context."""
    if pretrained_dir:
        if not Path(pretrained_dir, "config.json").is_file():
            raise ConfigurationError(
                f"pretrained model folder {pretrained_dir} has no config.json (stage an HF model folder as the "
                "`model` channel, or pass --pretrained_dir)"
            )
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(pretrained_dir)
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


def build_model(source: ModelSource, dtype: torch.dtype | None) -> nn.Module:
    from transformers import AutoModelForCausalLM

    if source.pretrained_dir:
        model = AutoModelForCausalLM.from_pretrained(source.pretrained_dir, config=source.config)
    else:
        model = AutoModelForCausalLM.from_config(source.config)
    if dtype is not None:
        model = model.to(dtype)
    return model


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
    transformers 5.x renamed the method (activation_checkpointing_enable); 4.2x only has the old name."""
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
    """Write the final model in HF format (safetensors + config + tokenizer), loadable with from_pretrained."""
    target = Path(model_dir)
    target.mkdir(parents=True, exist_ok=True)
    state_dict = _strip_wrapper_prefixes(state_dict)
    model.config.use_cache = True  # inference wants the cache back
    options: dict[str, Any] = {"state_dict": {name: tensor.detach().cpu() for name, tensor in state_dict.items()}}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        options["safe_serialization"] = True  # transformers 4.2x: opt in; 5.x always writes safetensors
    model.save_pretrained(str(target), **options)
    tokenizer.save_pretrained(str(target))
    return target, sorted(path.name for path in target.iterdir())
