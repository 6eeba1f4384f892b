"""LoRA and QLoRA adapters (PEFT) trained with plain PyTorch: one process, or DistributedDataParallel under torchrun.

The base model's weights are loaded frozen in the training precision (bf16/fp16; fp32 without mixed precision), or
in 4-bit NormalFloat through bitsandbytes for QLoRA; PEFT adds the low-rank matrices, kept in fp32, to the linear
layers named by --lora_target_modules (the architecture's attention and MLP projections by default). Only those
matrices train, so only they (and their optimizer state) go into checkpoints, and the final model is an adapter
folder: PEFT's adapter_config.json and adapter_model.safetensors, the tokenizer, and base_model.json naming the
base model and commit it adapts.

DDP replicates the frozen base on every GPU, so the base must fit one GPU (with 4-bit weights for QLoRA); the config
refuses at synth what does not. LoRA over a base that FSDP shards over the GPUs (SMP v2) is lora_fsdp.py.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..adapters import (
    BASE_RECORD_FILE,
    QLORA_MIN_COMPUTE_CAPABILITY,
    QLORA_QUANTIZATION,
    parse_target_modules,
    resolve_target_modules,
    write_adapter_archive,
)
from ..errors import ConfigurationError
from .base import ModelBuilder
from .torch_backend import TorchBackend

ADAPTER_STATE_FILE = "adapter.pt"
# base_model.json's precision -> the dtype the base is held in (the training backends' precision names).
TRAINED_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _import(module: str, why: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ConfigurationError(
            f"{why} needs {module} ({error}); it is in training/requirements.txt, which the SageMaker jobs install"
        ) from None


def qlora_device_problem(device: torch.device) -> str | None:
    """Why bitsandbytes' 4-bit layers cannot run on `device`, or None."""
    if device.type != "cuda":
        return (
            "--method qlora needs a CUDA GPU: bitsandbytes' 4-bit base weights do not run on CPU; use --method lora "
            "(or run on a GPU instance)"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < QLORA_MIN_COMPUTE_CAPABILITY:
        found, needed = ".".join(map(str, capability)), ".".join(map(str, QLORA_MIN_COMPUTE_CAPABILITY))
        return (
            f"--method qlora: {torch.cuda.get_device_name(device)} has compute capability {found}; QLoRA's bf16 "
            f"compute over bitsandbytes' 4-bit weights needs {needed} or newer; use --method lora or a newer GPU"
        )
    return None


def quantization_config() -> Any:
    """transformers' BitsAndBytesConfig with QLoRA's recipe (finetune/adapters.py)."""
    from transformers import BitsAndBytesConfig

    options = dict(QLORA_QUANTIZATION)
    options["bnb_4bit_compute_dtype"] = getattr(torch, options["bnb_4bit_compute_dtype"])
    return BitsAndBytesConfig(**options)


def linear_layer_names(model: nn.Module) -> list[str]:
    """The last name part of every linear layer (what PEFT's target_modules match), in the order first seen."""
    names: dict[str, None] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) or type(module).__name__ in ("Linear4bit", "Conv1D"):
            names.setdefault(name.split(".")[-1], None)
    return list(names)


def add_adapters(model: nn.Module, model_type: str, hp: Any) -> nn.Module:
    """Wrap `model` in a PeftModel with LoRA on the requested (or default) linear layers; the base is frozen."""
    peft = _import("peft", f"--method {hp.method}")
    try:
        targets = resolve_target_modules(model_type, parse_target_modules(hp.lora_target_modules))
    except ValueError as error:
        raise ConfigurationError(f"--lora_target_modules: {error}") from None
    present = linear_layer_names(model)
    absent = [name for name in targets if name not in present]
    if absent:
        raise ConfigurationError(
            f"--lora_target_modules: {type(model).__name__} has no linear layer named {', '.join(absent)}; its "
            f"linear layers are {', '.join(present)}"
        )
    config = peft.LoraConfig(
        r=hp.lora_r,
        lora_alpha=hp.lora_alpha,
        lora_dropout=hp.lora_dropout,
        target_modules=list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    # autocast_adapter_dtype (the default) keeps the adapter matrices in fp32 over a bf16/fp16 base.
    return peft.get_peft_model(model, config)


def base_record(hp: Any, model_type: str, precision: str) -> dict[str, Any]:
    """base_model.json: the base the adapter adapts, and how it was trained over it (`precision`: the dtype the
    frozen base was held in, in which evaluation holds it again)."""
    return {
        "name": hp.base_model_name,
        "hf_id": hp.base_model_id,
        "revision": hp.base_model_revision,
        "model_type": model_type,
        "method": hp.method,
        "precision": precision,
        "lora": {
            "r": hp.lora_r,
            "alpha": hp.lora_alpha,
            "dropout": hp.lora_dropout,
            "target_modules": hp.lora_target_modules,
        },
    }


def save_adapter(
    model: nn.Module,
    tokenizer: Any,
    model_dir: str,
    record: dict[str, Any],
    state_dict: dict[str, torch.Tensor] | None = None,
) -> tuple[Path, list[str]]:
    """The adapter folder: PEFT's adapter_config.json and adapter_model.safetensors, the tokenizer, and the record
    of the base model (BASE_RECORD_FILE). `state_dict`: the adapter weights under the PeftModel's parameter names,
    where the model's own parameters are not whole (FSDP shards them: backends/lora_fsdp.py)."""
    target = Path(model_dir)
    target.mkdir(parents=True, exist_ok=True)
    for config in model.peft_config.values():
        # PEFT records the folder the base was loaded from (/opt/ml/input/data/model in a job); name the model.
        config.base_model_name_or_path = record["hf_id"] or config.base_model_name_or_path
        config.revision = record["revision"]
    options: dict[str, Any] = {} if state_dict is None else {"state_dict": state_dict}
    model.save_pretrained(str(target), safe_serialization=True, save_embedding_layers=False, **options)
    # PEFT's model card is an empty template naming the folder the base was read from; base_model.json says it.
    (target / "README.md").unlink(missing_ok=True)
    tokenizer.save_pretrained(str(target))
    (target / BASE_RECORD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    write_adapter_archive(target)  # what an endpoint's adapter component loads (its ArtifactUrl)
    return target, sorted(path.name for path in target.iterdir())


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().cpu() for name, parameter in module.named_parameters() if parameter.requires_grad}


class LoraBackend(TorchBackend):
    name = "lora"

    def setup(self) -> None:
        super().setup()
        _import("peft", f"--method {self.hp.method}")
        if self.hp.method == "qlora":
            problem = qlora_device_problem(self.device)
            if problem:
                raise ConfigurationError(problem)
            _import("bitsandbytes", "--method qlora")

    def create_model(self, build: ModelBuilder) -> nn.Module:
        qlora = self.hp.method == "qlora"
        # The base never changes, so it needs no fp32 master copy: it is held in the training precision.
        base = build(
            self.dtype, direct=True, quantization_config=quantization_config() if qlora else None, device=self.device
        )
        if qlora:
            peft = _import("peft", "--method qlora")
            # Casts norms and the output layer to fp32 for stable training over 4-bit weights (PEFT's QLoRA recipe).
            base = peft.prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
        else:
            base = base.to(self.device)
        model_type = str(getattr(base.config, "model_type", "unknown"))
        return add_adapters(base, model_type, self.hp)

    def save_state(self, directory: Path, model: Any, optimizer: Any, trainer_state: dict[str, Any]) -> None:
        # Only the adapters change: the base is read again from the pretrained folder on resume.
        if self.is_main:
            torch.save(trainable_state(self.hf_module(model)), directory / ADAPTER_STATE_FILE)
            torch.save(optimizer.state_dict(), directory / "optimizer.pt")
            if self._scaler is not None:
                torch.save(self._scaler.state_dict(), directory / "grad_scaler.pt")

    def load_state(self, directory: Path, model: Any, optimizer: Any) -> None:
        saved = torch.load(directory / ADAPTER_STATE_FILE, map_location="cpu")
        parameters = {
            name: parameter for name, parameter in self.hf_module(model).named_parameters() if parameter.requires_grad
        }
        if saved.keys() != parameters.keys() or any(saved[n].shape != p.shape for n, p in parameters.items()):
            raise ConfigurationError(
                f"checkpoint {directory.name} holds adapters for other LoRA settings (target modules or rank) than "
                "this run's: resume with the same --lora_* flags, or use a new --checkpoint_dir"
            )
        with torch.no_grad():
            for name, parameter in parameters.items():
                parameter.copy_(saved[name])
        optimizer.load_state_dict(torch.load(directory / "optimizer.pt", map_location="cpu"))
        if self._scaler is not None and (directory / "grad_scaler.pt").is_file():
            self._scaler.load_state_dict(torch.load(directory / "grad_scaler.pt", map_location="cpu"))

    def full_state_dict(self, model: Any, scratch_dir: Path) -> dict[str, torch.Tensor] | None:
        return trainable_state(self.hf_module(model)) if self.is_main else None


def load_adapter_model(
    adapter_dir: Path, base_model_dir: str | None, device: torch.device, memory: dict[Any, int] | None = None
) -> nn.Module:
    """The base model in `base_model_dir` with the adapter in `adapter_dir` applied through PEFT: in the dtype the
    base was held in while the adapter trained (base_model.json's precision; the stored dtype for records without
    one), or 4-bit on `device` when the adapter was trained with QLoRA, since the adapter learned to correct those
    weights (GPT-J's checkpoint is fp32: its adapter, trained over a bf16 or fp16 base, is evaluated over that).
    Given the `memory` of the machine's devices (finetune/placement.py), a base that does not fit the first is
    spread over them (PEFT adds each adapter matrix on
    its layer's device); the caller leaves such a model where it is."""
    from ..modeling import ModelSource, _config_from_folder, build_model

    peft = _import("peft", "evaluating an adapter")
    record_path = adapter_dir / BASE_RECORD_FILE
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if not base_model_dir or not Path(base_model_dir, "config.json").is_file():
        raise ConfigurationError(
            f"{adapter_dir} holds an adapter, which needs its base model: pass --base_model_dir with the base's HF "
            f"folder ({record.get('hf_id') or 'see ' + BASE_RECORD_FILE}), got {base_model_dir!r}"
        )
    config = _config_from_folder(Path(base_model_dir), "base model folder")
    source = ModelSource(config=config, tokenizer=None, pretrained_dir=base_model_dir)
    placement = None
    if record.get("method") == "qlora":
        problem = qlora_device_problem(device)
        if problem:
            raise ConfigurationError(f"evaluating a QLoRA adapter over its 4-bit base: {problem}")
        base = build_model(source, torch.bfloat16, quantization_config=quantization_config(), device=device)
    else:
        # Straight into that dtype: one copy in host memory (an 8B base in bf16 fits a g5.2xlarge's 32 GiB; an fp32
        # model built first and then converted would not).
        stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        dtype = TRAINED_DTYPES.get(record.get("precision")) or stored
        dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype), torch.float32)
        dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
        if memory is not None:
            from accelerate import init_empty_weights

            from ..placement import device_map

            with init_empty_weights():  # the model's shapes and sizes, without memory for its weights
                skeleton = build_model(ModelSource(config, None, None), dtype, direct=True)
            placement = device_map(skeleton, memory)
        base = build_model(source, dtype, direct=True, device_map=placement)
    expected = record.get("model_type")
    if expected and base.config.model_type != expected:
        raise ConfigurationError(
            f"the adapter in {adapter_dir} was trained on a {expected} model, but {base_model_dir} holds a "
            f"{base.config.model_type} model: pass the base it was trained on"
        )
    options: dict[str, Any] = {}
    if placement and {"cpu", "disk"} & set(placement.values()):
        # PEFT takes the hooks off a model with offloaded weights and dispatches it again with the adapter
        # (peft_model.py load_adapter), so it is given the same budgets; a model spread over GPUs keeps its hooks.
        options["max_memory"] = {name: budget for name, budget in (memory or {}).items() if name != "disk"}
    return peft.PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=False, **options)
