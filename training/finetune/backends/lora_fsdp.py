"""LoRA adapters (PEFT) over a frozen base that FSDP shards over the GPUs: SMP v2 (`torch.sagemaker`), launched like
an SMP v2 full fine-tuning job (torch_distributed, mp_parameters {"hybrid_shard_degree": N}), for bases that no one
GPU holds (Llama 3.1 70B, Qwen2.5 72B: 140+ GiB of bf16 weights).

Loading follows AWS's SMP v2 fine-tuning recipe (SageMaker developer guide, "Fine-tuning",
model-parallel-core-features-v2-fine-tuning): global rank 0 alone reads the pretrained weights, straight into the
training dtype (from_pretrained, low_cpu_mem_usage); every other rank builds the same model on the meta device
(accelerate's init_empty_weights), and FSDP materializes it unit by unit (torch.sagemaker.delayed_param
.DelayedParamIniter, param_init_fn) and copies rank 0's values into it (sync_module_states=True). So host memory holds
one copy of the base, on the first instance, instead of one per GPU.

PEFT adds the LoRA matrices on every rank (fp32, PEFT's default) before the wrap. FSDP1 flattens each wrapped unit's
parameters into one tensor, which must have one dtype, so the trainable fp32 LoRA matrices cannot share a unit with
the frozen bf16 base: PEFT's FSDP policy (peft.utils.other.fsdp_auto_wrap_policy, as accelerate uses it) wraps every
trainable leaf module as its own unit, besides the model's transformer layers. The base stays in the training dtype;
mixed precision computes in bf16, activation checkpointing per transformer layer and gradient clipping through
torch.sagemaker.grad_norm, as in the full fine-tuning backend (smp_v2.py); the optimizer holds only the adapters.

Checkpoints and the final adapter never gather the base: only the adapter units are gathered, to rank 0 (see
save_state).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ConfigurationError
from ..layout import SMP_V2_MODULE
from .base import ModelBuilder
from .lora import ADAPTER_STATE_FILE, _import, add_adapters
from .smp_v2 import SmpV2Backend

# Module names that FSDP and the activation-checkpointing wrappers insert between a model's own names.
_WRAPPER_NAMES = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module"})


def clean_name(name: str) -> str:
    """A parameter or module name as the unwrapped PeftModel names it."""
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_NAMES)


class LoraFsdpBackend(SmpV2Backend):
    name = "lora_fsdp"

    def setup(self) -> None:
        super().setup()
        _import("peft", "--method lora")
        self._delayed_param = importlib.import_module(f"{SMP_V2_MODULE}.delayed_param")

    # --- the model: rank 0 reads the weights, the other ranks build on the meta device ---
    def create_model(self, build: ModelBuilder) -> nn.Module:
        from accelerate import init_empty_weights

        dtype = self.dtype or torch.float32
        # Every rank first builds the model without weights (cheap: nothing is allocated), to check it shards.
        with init_empty_weights():
            empty = build(dtype, load_weights=False, direct=True)
        if getattr(empty.config, "tie_word_embeddings", False) or _shares_parameters(empty):
            raise ConfigurationError(
                f"--method lora with SMP v2: {type(empty).__name__} ties its input and output embeddings "
                "(tie_word_embeddings in its config.json), and the ranks that build it on the meta device would hold "
                "the two as separate tensors, so FSDP's shards would differ between ranks. Models with tied "
                "embeddings are small: train them with --method lora without SMP (plain PyTorch DDP, no mp_parameters)"
            )
        model_type = str(getattr(empty.config, "model_type", "unknown"))
        self._skeleton: nn.Module | None = None
        if self.rank == 0:
            # The recipe's from_pretrained(low_cpu_mem_usage) on rank 0 only: one copy of the base in host memory.
            # Its empty twin, with the same adapters, is what writes the adapter folder (hf_module).
            with init_empty_weights():
                self._skeleton = add_adapters(empty, model_type, self.hp)
            base = build(dtype, direct=True)
        else:
            base = empty
        model = add_adapters(base, model_type, self.hp)
        from peft.tuners.tuners_utils import BaseTunerLayer

        for module in model.modules():
            if isinstance(module, BaseTunerLayer):
                # PEFT casts a LoRA layer's input to the dtype of its A matrix as seen from outside that matrix's FSDP
                # unit: the fp32 shard in the forward pass, the bf16 gathered copy when activation checkpointing
                # recomputes it, which then refuses the mismatch. FSDP's mixed precision already gives the matrices
                # the input's dtype (PEFT's disable_input_dtype_casting, made permanent).
                module.cast_input_dtype_enabled = False
        return model

    def hf_module(self, model: Any) -> nn.Module | None:
        """The PeftModel without FSDP's wrappers, on the meta device (rank 0): PEFT's save_pretrained finds the
        adapter weights in the state dict it is given by the names of the model's own LoRA layers, and inside FSDP
        those names carry the wrappers' parts."""
        return self._skeleton

    def _wrap_policy(self, model: nn.Module, layer_class: type) -> Any:
        from peft.utils.other import fsdp_auto_wrap_policy

        return fsdp_auto_wrap_policy(model)

    def _sharding_strategy(self, strategies: Any) -> Any:
        # hybrid_shard_degree equal to the world size shards over every GPU: FULL_SHARD, which needs no node groups.
        if self.layout.hybrid_shard_degree >= self.world_size:
            return strategies.FULL_SHARD
        return super()._sharding_strategy(strategies)

    def _mixed_precision_options(self) -> dict[str, Any]:
        return {
            # Buffers keep the dtype the model gives them (RoPE's inv_freq in fp32), as in the single-GPU LoRA run and
            # in evaluation, so the adapter meets the same rotary angles there.
            "buffer_dtype": None,
        }

    def _fsdp_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"sync_module_states": True}
        if self.rank != 0:
            device = self.device

            def materialize(module: nn.Module) -> None:
                # The values do not matter: sync_module_states overwrites them with rank 0's.
                module.to_empty(device=device, recurse=False)

            initer = self._delayed_param.DelayedParamIniter(self._hf_model, init_method_using_config=materialize)
            options["param_init_fn"] = initer.get_param_init_fn()
        return options

    def prepare(self, model: nn.Module, make_optimizer: Any) -> tuple[Any, Any]:
        self._adapter_shapes = {name: p.shape for name, p in model.named_parameters() if p.requires_grad}
        wrapped, optimizer = super().prepare(model, make_optimizer)
        self._adapter_units = self._find_adapter_units()
        return wrapped, optimizer

    def _find_adapter_units(self) -> list[tuple[str, Any]]:
        """(PeftModel name prefix, FSDP unit) of each unit holding trainable parameters, in the same order on every
        rank (each gather below is a collective). PEFT's wrap policy gives each adapter matrix its own leaf unit; a
        trainable parameter anywhere else would make a gather pull a transformer layer or the whole root."""
        from torch.distributed.fsdp import FullyShardedDataParallel

        units, covered = [], set()
        for name, module in self._fsdp.named_modules():
            if not isinstance(module, FullyShardedDataParallel) or module is self._fsdp:
                continue
            if any(isinstance(inner, FullyShardedDataParallel) for inner in module.module.modules()):
                continue  # a transformer layer's unit, around the adapter units
            parameters = list(module.parameters())
            if any(parameter.requires_grad for parameter in parameters):
                units.append((clean_name(name), module))
                covered.update(id(parameter) for parameter in parameters)
        outside = [n for n, p in self._fsdp.named_parameters() if p.requires_grad and id(p) not in covered]
        if outside:
            raise RuntimeError(f"trainable parameters outside the adapter units: {', '.join(outside[:3])}")
        return units

    # --- checkpoints: the adapters and their optimizer state, never the base ---
    def _gather_adapters(self) -> dict[str, torch.Tensor]:
        """The adapter weights under the PeftModel's names, whole, on rank 0 (empty elsewhere)."""
        from torch.distributed.fsdp import FullyShardedDataParallel

        state: dict[str, torch.Tensor] = {}
        for prefix, unit in self._adapter_units:
            # Each unit is one small matrix, gathered whole on rank 0's device and copied to host memory here.
            with FullyShardedDataParallel.summon_full_params(unit, writeback=False, rank0_only=True):
                if self.is_main:
                    for name, parameter in unit.named_parameters():
                        state[f"{prefix}.{clean_name(name)}"] = parameter.detach().cpu().clone()
        return state

    def save_state(self, directory: Path, model: Any, optimizer: Any, trainer_state: dict[str, Any]) -> None:
        # Gathered to rank 0 rather than saved as per-rank shards: the adapters are a fraction of a percent of the
        # model, and gathered they are the same file, under the same names, as the single-GPU LoRA run writes,
        # readable whatever the layout. FSDP's optimizer state dict covers the optimizer's parameters only.
        from torch.distributed.fsdp import FullyShardedDataParallel

        adapters = self._gather_adapters()
        # Offloading copies to host memory only from a GPU: FSDP gathers each moment into one reused buffer, which it
        # clones when not offloading, so on a CPU-only rank "offloaded" moments would all alias the last one.
        with self._full_state_context(rank0_only=True, offload_to_cpu=self.device.type == "cuda"):
            optimizer_state = FullyShardedDataParallel.optim_state_dict(self._fsdp, optimizer)
        if self.is_main:
            torch.save(adapters, directory / ADAPTER_STATE_FILE)
            torch.save(optimizer_state, directory / "optimizer.pt")

    def load_state(self, directory: Path, model: Any, optimizer: Any) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp._runtime_utils import _lazy_init

        saved = torch.load(directory / ADAPTER_STATE_FILE, map_location="cpu")
        shapes = self._adapter_shapes
        if saved.keys() != shapes.keys() or any(saved[name].shape != shape for name, shape in shapes.items()):
            raise ConfigurationError(
                f"checkpoint {directory.name} holds adapters for other LoRA settings (target modules or rank) than "
                "this run's: resume with the same --lora_* flags, or use a new --checkpoint_dir"
            )
        # Before the first forward pass FSDP has not set up the root yet; a unit gathered first would take itself for
        # the root. (No public call does only this in torch 2.4's FSDP1.)
        _lazy_init(self._fsdp, self._fsdp)
        for prefix, unit in self._adapter_units:
            with FullyShardedDataParallel.summon_full_params(unit, writeback=True), torch.no_grad():
                for name, parameter in unit.named_parameters():
                    parameter.copy_(saved[f"{prefix}.{clean_name(name)}"])
        with self._full_state_context(rank0_only=False):
            optimizer.load_state_dict(
                FullyShardedDataParallel.optim_state_dict_to_load(
                    model=self._fsdp,
                    optim=optimizer,
                    optim_state_dict=torch.load(directory / "optimizer.pt", map_location="cpu"),
                )
            )

    def full_state_dict(self, model: Any, scratch_dir: Path) -> dict[str, torch.Tensor] | None:
        state = self._gather_adapters()
        return state if self.is_main else None


def _shares_parameters(model: nn.Module) -> bool:
    """Whether one parameter appears under two names (tied weights)."""
    return len(list(model.named_parameters(remove_duplicate=False))) != len(list(model.parameters()))
