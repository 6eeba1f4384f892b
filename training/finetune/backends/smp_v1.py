"""SageMaker model parallelism v1 (`smdistributed.modelparallel.torch`), as in the GPT-J tensor-parallel reference.

Thin on purpose: the library exists only in the SMP v1 containers (PyTorch 1.13.1 DLC, SMP 1.15, Python 3.9), so
this file follows the documented API (sagemaker-python-sdk v2.199.0 `smd_model_parallel_pytorch.rst` and
`smd_model_parallel_common_api.rst`) and the order the reference script uses:

    smp.init(config) -> model built inside smp.model_creation(tensor_parallelism=tp > 1, dtype)
    -> smp.DistributedModel(model) -> optimizer over model.get_module() -> smp.set_activation_checkpointing
    -> smp.DistributedOptimizer(optimizer, ...) -> @smp.step steps calling model.backward(loss)
    -> smp.save_checkpoint / smp.resume_from_checkpoint (partial) -> full gathered model saved on rank 0.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ..errors import ConfigurationError
from ..layout import SMP_V1_MODULE
from ..modeling import find_transformer_layers
from .base import ModelBuilder, OptimizerFactory, TrainingBackend

FULL_MODEL_TAG = "fullmodel.pt"


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
        with self.smp.model_creation(tensor_parallelism=self.smp.tp_size() > 1, dtype=self.dtype):
            return build(self.dtype)

    def prepare(self, model: nn.Module, make_optimizer: OptimizerFactory) -> tuple[Any, Any]:
        smp = self.smp
        num_layers = int(model.config.num_hidden_layers)
        # Different tensor-parallel ranks must not initialize their weight slices identically (reference).
        torch.manual_seed(self.hp.seed + smp.tp_rank())
        trace_device = "gpu" if self.device.type == "cuda" else "cpu"
        model = smp.DistributedModel(
            model, trace_device=trace_device, backward_passes_per_step=self.hp.gradient_accumulation
        )
        module = model.get_module()
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
        return model, optimizer

    def hf_module(self, model: Any) -> nn.Module:
        return model.get_module()

    def train_micro_step(self, model: Any, input_ids: torch.Tensor, last_micro_step: bool) -> torch.Tensor:
        inputs = self._inputs(input_ids)
        # The step returns a StepOutput holding one loss per microbatch.
        return self._train_step(model, inputs["input_ids"], inputs["attention_mask"]).reduce_mean().detach().float()

    def _global_grad_norm(self, model: Any) -> torch.Tensor:
        """The gradient norm over the whole model: each rank sums squares of its own partition (a tensor-parallel
        slice counts on every rank, a replicated parameter only on tp_rank 0), summed over the model-parallel group."""
        smp = self.smp
        total = torch.zeros((), device=self.device)
        for parameter in model.local_parameters():
            if parameter.grad is None:
                continue
            if model.is_distributed_parameter(parameter) or smp.tp_rank() == 0:
                total += parameter.grad.detach().float().pow(2).sum()
        if smp.mp_size() > 1:
            dist.all_reduce(total, group=smp.get_mp_process_group())
        return total.sqrt()

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
            total = self._global_grad_norm(model)
            norm = float(total)
            if self.hp.grad_clip > 0 and norm > self.hp.grad_clip:
                for parameter in model.local_parameters():
                    if parameter.grad is not None:
                        parameter.grad.mul_(self.hp.grad_clip / (norm + 1e-6))
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
        # A full checkpoint gathers every partition and (translate_if_full) translates it to HF names on rank 0.
        self.smp.save_checkpoint(
            str(scratch_dir), tag=FULL_MODEL_TAG, partial=False, model=model, translate_if_full=True
        )
        self.smp.barrier()
        if not self.is_main:
            return None
        state_dict = torch.load(scratch_dir / FULL_MODEL_TAG, map_location="cpu")
        shutil.rmtree(scratch_dir, ignore_errors=True)
        return state_dict


def _tag(directory: Path) -> str:
    """The tag is the checkpoint's final name, also while it is written under its temporary name."""
    name = directory.name
    return name.split("-", 1)[1] if name.startswith(".tmp-") else name
