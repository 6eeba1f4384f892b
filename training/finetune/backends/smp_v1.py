"""SageMaker model parallelism v1 (`smdistributed.modelparallel.torch`), as in the GPT-J tensor-parallel reference.

Thin on purpose: the library exists only in the SMP v1 containers (PyTorch 1.13.1 DLC, SMP 1.15, Python 3.9), so
this file follows the documented API (sagemaker-python-sdk v2.199.0 `smd_model_parallel_pytorch.rst` and
`smd_model_parallel_common_api.rst`) and the order the reference script uses:

    smp.init(config) -> model built inside smp.model_creation(tensor_parallelism=tp > 1, dtype)
    -> smp.DistributedModel(model) -> optimizer over model.get_module() -> smp.set_activation_checkpointing
    -> smp.DistributedOptimizer(optimizer, ...) -> @smp.step steps calling model.backward(loss)
    -> smp.save_checkpoint / smp.resume_from_checkpoint (partial) -> full gathered model saved on rank 0.

Under tensor parallelism SMP does not keep the Hugging Face model: smp.DistributedModel replaces a GPTJForCausalLM
created inside model_creation(tensor_parallelism=True), as a whole, with a freshly initialized
DistributedTransformerLMHead whose parameters have SMP's names (smdistributed torch/model.py
`_replace_tp_counterparts`, torch/tp_registry.py `distribute`), and only with the transformers versions SMP supports
(layout.SMP_V1_TENSOR_PARALLEL_TRANSFORMERS). So the model is built without its pretrained weights, which are loaded
afterwards through DistributedModel.load_state_dict (SMP translates a full HF state dict to its names and loads each
rank's slice after partitioning, as AWS's last GPT-J example does with resume_from_checkpoint(partial=False)); and
the final model is gathered with DistributedModel.state_dict() on the rdp_rank 0 ranks (rank 0 holds it, AWS
"Support for Hugging Face Transformer Models"), translated with SMP's own translate_state_dict_to_hf_gptj, and
written as an HF folder from the config: no HF module exists to call save_pretrained on.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ..errors import ConfigurationError
from ..layout import SMP_V1_MODULE, SMP_V1_TENSOR_PARALLEL_TRANSFORMERS
from ..modeling import find_transformer_layers, max_positions
from .base import ModelBuilder, OptimizerFactory, TrainingBackend, WeightsReader

# SMP's function that turns its distributed module's state dict into the HF model's, per model type
# (smdistributed.modelparallel.torch.nn.huggingface.<module>.<function>; layout.SMP_V1_TENSOR_PARALLEL_MODEL_TYPES).
TO_HF_TRANSLATIONS = {"gptj": ("gptj", "translate_state_dict_to_hf_gptj")}
# Per-layer constants SMP's GPT-J translation adds for the transformers versions that kept the causal mask as a
# buffer (attn.bias: a max_seq_len^2 uint8 mask, attn.masked_bias: -1e9). GPT-J rebuilds them from its config, 4.21
# lists them in _keys_to_ignore_on_load_missing, and later versions have no such buffers: they are not weights.
TRANSLATION_CONSTANTS = (".attn.bias", ".attn.masked_bias")


def _make_steps(smp: Any, gradient_accumulation: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The @smp.step functions. SMP runs them once per microbatch; calls to the DistributedModel and its backward
    are only allowed inside them, and backward must be model.backward, not loss.backward."""

    @smp.step
    def train_step(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]
        model.backward(loss / gradient_accumulation if gradient_accumulation > 1 else loss)
        return loss

    @smp.step
    def eval_step(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)["loss"]

    return train_step, eval_step


class SmpV1Backend(TrainingBackend):
    name = "smp_v1"
    requires_full_batches = True

    def setup(self) -> None:
        try:
            self.smp = importlib.import_module(SMP_V1_MODULE)
        except ImportError as error:
            raise ConfigurationError(
                f"--backend smp_v1 needs {SMP_V1_MODULE} ({error}); it ships in the SMP v1 containers "
                "(PyTorch 1.13.1 DLC with SMP 1.15). Use --backend torch elsewhere"
            ) from None
        smp = self.smp
        self.replaced = False  # whether SMP replaced the HF model with its own module (set by prepare)
        config = dict(self.layout.parameters)
        # Our precision flags reach SMP through its config (resolve_precision checked they agree).
        if self.precision in ("fp16", "bf16"):
            config[self.precision] = True
        smp.init(config)
        self.rank, self.world_size = smp.rank(), smp.size()
        self.local_rank, self.local_world_size = smp.local_rank(), smp.local_size()
        # With prescaled_batch the tensor-parallel group shares one batch, so data is sharded over the reduced
        # data-parallel group (as the reference does).
        if self.layout.prescaled_batch:
            self.data_rank, self.data_size = smp.rdp_rank(), smp.rdp_size()
        else:
            self.data_rank, self.data_size = smp.dp_rank(), smp.dp_size()
        if torch.cuda.is_available():
            torch.cuda.set_device(smp.local_rank())
            self.device = torch.device("cuda", smp.local_rank())
        self._train_step, self._eval_step = _make_steps(smp, self.hp.gradient_accumulation)

    def create_model(self, build: ModelBuilder) -> nn.Module:
        tensor_parallelism = self.smp.tp_size() > 1
        with self.smp.model_creation(tensor_parallelism=tensor_parallelism, dtype=self.dtype):
            # Weights loaded now would be discarded when SMP replaces the model; load_pretrained puts them in.
            return build(self.dtype, load_weights=not tensor_parallelism)

    def prepare(self, model: nn.Module, make_optimizer: OptimizerFactory) -> tuple[Any, Any]:
        from transformers import PreTrainedModel

        smp = self.smp
        self._config = model.config
        num_layers = int(model.config.num_hidden_layers)
        # Different tensor-parallel ranks must not initialize their weight slices identically (reference).
        torch.manual_seed(self.hp.seed + smp.tp_rank())
        trace_device = "gpu" if self.device.type == "cuda" else "cpu"
        model = smp.DistributedModel(
            model, trace_device=trace_device, backward_passes_per_step=self.hp.gradient_accumulation
        )
        module = model.get_module()
        self.replaced = not isinstance(module, PreTrainedModel)
        if smp.tp_size() > 1 and not self.replaced:
            import transformers

            raise ConfigurationError(
                f"SMP v1 kept the Hugging Face {type(module).__name__} whole although tensor_parallel_degree is "
                f"{smp.tp_size()}: it distributes Hugging Face models only with transformers "
                f"{', '.join(SMP_V1_TENSOR_PARALLEL_TRANSFORMERS)} (this job has {transformers.__version__}) and only "
                "the model classes it supports. Training on would hold every layer whole on every GPU; pin "
                "transformers==4.21.0 in training/requirements.in (then scripts/lock_training_requirements.py), or set "
                "tensor_parallel_degree to 1"
            )
        optimizer = make_optimizer(module)
        if self.hp.activation_checkpointing:
            layers = find_transformer_layers(module, num_layers)
            if smp.tp_size() > 1:
                # The distributed transformer's layer container is checkpointed as a whole, by strategy.
                smp.set_activation_checkpointing(layers, strategy=self.hp.activation_strategy)
            else:
                for layer in layers.children():
                    smp.set_activation_checkpointing(layer)
        optimizer = smp.DistributedOptimizer(
            optimizer,
            static_loss_scale=None,
            dynamic_loss_scale=True,
            dynamic_loss_args={"scale_window": 1000, "min_scale": 1, "delayed_shift": 2},
        )
        self._require_master_map(optimizer)
        return model, optimizer

    def _require_master_map(self, optimizer: Any) -> None:
        """bf16 clipping needs Bit16_Optimizer's master_is_distributed to count each tensor-parallel slice once;
        fail at setup, not at the first step, if this SMP lacks it."""
        if self.precision == "bf16" and not isinstance(getattr(optimizer, "master_is_distributed", None), dict):
            raise ConfigurationError(
                f"mp_parameters bf16 is true, but smp.DistributedOptimizer returned a {type(optimizer).__name__} "
                "without SMP's master_is_distributed (Bit16_Optimizer), so the fp32 master gradients it steps from "
                "cannot be clipped. Use the SMP v1.15 image (training.smp.version 1), or train in fp16"
            )

    def load_pretrained(self, model: Any, read_weights: WeightsReader) -> None:
        if self.replaced:
            # A full HF state dict (no `_smp_is_partial` key): SMP translates it with the translation it
            # registered when it replaced the model, and loads each rank's slice at the first step.
            model.load_state_dict(read_weights())

    def hf_module(self, model: Any) -> nn.Module | None:
        # None always, so one writer serves every layout: under tensor parallelism there is no HF module, and
        # inside an SMP >= 1.10 job transformers 4.21's save_pretrained runs any state dict it is given through
        # SMP's registered to-HF translations again (modeling_utils.py, IS_SAGEMAKER_MP_POST_1_10).
        return None

    def train_micro_step(self, model: Any, input_ids: torch.Tensor, last_micro_step: bool) -> torch.Tensor:
        inputs = self._inputs(input_ids)
        # The step returns a StepOutput holding one loss per microbatch.
        return self._train_step(model, inputs["input_ids"], inputs["attention_mask"]).reduce_mean().detach().float()

    def _stepped_parameters(self, model: Any, optimizer: Any) -> list[Any]:
        """The parameters whose .grad the optimizer steps from. Under bf16, Bit16_Optimizer's fp32 masters (its
        param_groups): SMP copies the model's bf16 .grad into them at the end of each @smp.step
        (update_master_grads), so clipping the model's .grad afterwards would change nothing the step reads. In fp32,
        the model's own."""
        if self.precision == "bf16":
            return [parameter for group in optimizer.param_groups for parameter in group["params"]]
        return list(model.local_parameters())

    def _counts_on_this_rank(self, model: Any, optimizer: Any, parameter: Any) -> bool:
        """A tensor-parallel slice counts on every rank, a replicated parameter only on tp_rank 0 (SMP's
        clip_grad_norm_fp32). A master is not the model's parameter: Bit16_Optimizer's master_is_distributed says;
        a parameter the model already held in fp32 is stepped as it is."""
        masters = getattr(optimizer, "master_is_distributed", {})
        if parameter in masters:
            return bool(masters[parameter]) or self.smp.tp_rank() == 0
        return model.is_distributed_parameter(parameter) or self.smp.tp_rank() == 0

    def _norm_group(self) -> tuple[Any, int]:
        """Where the squares are summed, and its size, as SMP's clip_grad_norm_fp32 does for the masters: with
        shard_optimizer_state each data-parallel rank holds the masters of its own shard, so over the world; else
        over the model-parallel group, each of whose ranks holds one partition."""
        smp = self.smp
        if self.precision == "bf16" and self.layout.parameters.get("shard_optimizer_state"):
            return smp.get_world_process_group(), smp.size()
        return smp.get_mp_process_group(), smp.mp_size()

    def _clip_stepped_grads(self, model: Any, optimizer: Any) -> float:
        """Clips the gradients the optimizer steps from to hp.grad_clip, by their norm over the whole model."""
        parameters = [
            parameter for parameter in self._stepped_parameters(model, optimizer) if parameter.grad is not None
        ]
        total = torch.zeros((), device=self.device)
        for parameter in parameters:
            if self._counts_on_this_rank(model, optimizer, parameter):
                total += parameter.grad.detach().float().pow(2).sum()
        group, size = self._norm_group()
        if size > 1:
            dist.all_reduce(total, group=group)
        norm = float(total.sqrt())
        if self.hp.grad_clip > 0 and norm > self.hp.grad_clip:
            for parameter in parameters:
                parameter.grad.mul_(self.hp.grad_clip / (norm + 1e-6))
        return norm

    def optimizer_step(self, model: Any, optimizer: Any) -> tuple[float | None, bool]:
        norm: float | None = None
        if self.precision == "fp16":
            # The fp16 optimizer holds fp32 master gradients; SMP clips those (reference).
            if self.hp.grad_clip > 0:
                returned = optimizer.clip_master_grads(self.hp.grad_clip)
                norm = float(returned) if isinstance(returned, (int, float, torch.Tensor)) else None
            optimizer.step()
            stepped = not bool(getattr(optimizer, "overflow", False))
        else:
            # Not clip_master_grads under bf16: SMP 1.12.1's DistributedOptimizer wrapper returns without clipping
            # unless fp16 (torch/optimizers/optimizer.py clip_master_grads).
            norm = self._clip_stepped_grads(model, optimizer)
            optimizer.step()
            stepped = True
        optimizer.zero_grad(set_to_none=True)
        return norm, stepped

    def eval_mean_loss(self, model: Any, input_ids: torch.Tensor) -> torch.Tensor:
        inputs = self._inputs(input_ids)
        return self._eval_step(model, inputs["input_ids"], inputs["attention_mask"]).reduce_mean().float()

    def _data_group(self) -> Any:
        smp = self.smp
        return smp.get_rdp_process_group() if self.layout.prescaled_batch else smp.get_dp_process_group()

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.data_size > 1:
            dist.all_reduce(tensor, group=self._data_group())
        return tensor

    def reduce_group_size(self) -> int:
        return self.data_size

    def barrier(self) -> None:
        self.smp.barrier()

    def broadcast_object(self, value: Any) -> Any:
        smp = self.smp
        if smp.size() == 1:
            return value
        if smp.rank() == 0:
            smp.broadcast(value, smp.CommGroup.WORLD)
            return value
        return smp.recv_from(0, smp.RankType.WORLD_RANK)

    def save_state(self, directory: Path, model: Any, optimizer: Any, trainer_state: dict[str, Any]) -> None:
        # Partial checkpoint: each model-parallel rank writes its own partition (`<tag>_partial/`).
        self.smp.save_checkpoint(
            str(directory),
            tag=_tag(directory),
            partial=True,
            model=model,
            optimizer=optimizer,
            user_content=trainer_state,
        )

    def load_state(self, directory: Path, model: Any, optimizer: Any) -> None:
        # Loading is deferred by SMP until the first @smp.step call, after partitioning.
        self.smp.resume_from_checkpoint(str(directory), tag=directory.name, partial=True)

    def full_state_dict(self, model: Any, scratch_dir: Path) -> dict[str, torch.Tensor] | None:
        smp = self.smp
        # A collective over the rdp_rank 0 ranks (every model partition once); rank 0 receives the whole model.
        state_dict = model.state_dict() if smp.rdp_rank() == 0 else None
        smp.barrier()
        if not self.is_main:
            return None
        assert state_dict is not None
        if self.replaced:
            state_dict = self._to_hf(state_dict)
        return state_dict

    def _to_hf(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        model_type = str(self._config.model_type)
        module_name, function = TO_HF_TRANSLATIONS[model_type]
        translate = getattr(importlib.import_module(f"{SMP_V1_MODULE}.nn.huggingface.{module_name}"), function)
        translated = translate(state_dict, max_seq_len=max_positions(self._config))
        return {name: tensor for name, tensor in translated.items() if not name.endswith(TRANSLATION_CONSTANTS)}


def _tag(directory: Path) -> str:
    """The tag is the checkpoint's final name, also while it is written under its temporary name."""
    name = directory.name
    return name.split("-", 1)[1] if name.startswith(".tmp-") else name
