"""In-test STAND-INS for the SageMaker model parallelism libraries, which exist only inside AWS containers:
`smdistributed.modelparallel.torch` (SMP v1) and `torch.sagemaker` (SMP v2).

They are not the libraries. They implement just enough of the documented API (sagemaker-python-sdk v2.199.0
`smd_model_parallel_pytorch.rst` / `smd_model_parallel_common_api.rst`; the AWS SMP v2 guide and examples), checked
against SMP v1's own code where it is public (SMP 1.12.1 in tkazusa/smdistributed_modelparallel@b5e06a8), to run
train.py's SMP code paths on one CPU process, and they raise `ApiMisuse` where the real library would fail or
silently misbehave:

SMP v1: smp.init() before anything else, with SMP's config rules (tensor_parallel_degree > 1 needs ddp,
prescaled_batch needs optimize "speed", bf16 excludes fp16); the model built inside smp.model_creation(...); one
DistributedModel; the optimizer created from the DistributedModel's parameters (after wrapping) and then wrapped by
DistributedOptimizer; set_activation_checkpointing on modules of the wrapped model, after DistributedModel; the
DistributedModel called only inside an @smp.step function, and backward through model.backward(loss), never
loss.backward(); batches divisible into `microbatches`; save_checkpoint/resume_from_checkpoint called with the
documented signatures and objects; model and optimizer state loaded at the first step (SMP defers loading until it
has partitioned the model), in the order the loads were asked for.

SMP v1 tensor parallelism (smp_standin_gptj.py): a GPT-J created inside smp.model_creation(tensor_parallelism=True)
(train.py asks for it when tensor_parallel_degree > 1) is replaced at smp.DistributedModel by a freshly initialized, non-HF
DistributedTransformerLMHead with SMP's parameter names, but only when `transformers.__version__` (read at smp.init,
as SMP reads it at import) is one SMP supports; otherwise SMP logs a warning and the model stays whole (recorded as a
"warning" call). state_dict()/local_state_dict() use the module's own names (SMP's under tensor parallelism; no
wrapper prefixes), partial checkpoints store them, full checkpoints gather and, with translate_if_full, translate
them to HF names; load_state_dict() of a full HF state dict translates it to SMP names.

The stand-in is rank 0 of one model replica: size() = tensor x pipeline parallel degree, rdp_size() = 1, every
rank 0; it holds the whole model, so "gathers" are local.

SMP v2 (smp_standin_v2.py): torch.distributed initialized before tsm.init(); tsm.transform() only after init, only
on a model not yet wrapped by FSDP, only for model types SMP v2 supports; grad_norm.clip_grad_norm_ on the
FSDP-wrapped model; delayed_param.DelayedParamIniter only after init, with an init_method_using_config for any model
but a plain Hugging Face model of a type SMP v2 tensor-parallelizes, and its param_init_fn must leave none of a
module's own parameters or buffers on the meta device.

What they do NOT prove: that partitioning, pipelining, tensor-parallel slicing, fp16 loss scaling, sharding, NCCL
collectives or the real checkpoint file formats work, or that the real libraries accept every argument value.
Those run only in the containers on GPUs.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import smp_standin_gptj as gptj
import torch
import torch.distributed as dist
from smp_standin_v1_wrappers import ApiMisuse, DistributedModel, DistributedOptimizer
from torch import nn


def _ensure_process_group() -> None:
    """SMP v1 initializes torch.distributed itself (ddp=True); one gloo process stands in for the cluster."""
    if not dist.is_initialized():
        store = Path(tempfile.mkdtemp(prefix="smp-standin-")) / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


# --------------------------------------------------------------------------------------------------------------
# SMP v1
# --------------------------------------------------------------------------------------------------------------


# The topology queries; the stand-in is rank 0 of one model replica (see the module docstring).
TOPOLOGY = (
    "rank",
    "size",
    "local_rank",
    "local_size",
    *(f"{prefix}_{kind}" for prefix in ("dp", "rdp", "tp", "pp", "mp") for kind in ("rank", "size")),
)


class StepOutput:
    """One value per microbatch, as returned from an @smp.step function."""

    def __init__(self, outputs: list[torch.Tensor]) -> None:
        self.outputs = outputs

    def reduce_mean(self) -> torch.Tensor:
        return torch.stack([output.detach() for output in self.outputs]).mean()

    def reduce_sum(self) -> torch.Tensor:
        return torch.stack([output.detach() for output in self.outputs]).sum()

    def concat(self) -> torch.Tensor:
        return torch.cat(self.outputs)


class SmpV1:
    """The state and API of the stand-in; `module()` returns it as `smdistributed.modelparallel.torch`."""

    class CommGroup(enum.Enum):
        WORLD = 0
        MP_GROUP = 1
        DP_GROUP = 2

    class RankType(enum.Enum):
        WORLD_RANK = 0
        MP_RANK = 1
        DP_RANK = 2

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.config: dict[str, Any] | None = None
        self.transformers_version: str | None = None
        self.created_inside: set[int] = set()
        self.marked_for_tensor_parallelism: set[int] = set()
        self.translate_functions: list[tuple[Any, Any]] = []  # (smp_to_hf, hf_to_smp) of each replaced module
        self.model: Any = None
        self.optimizer: Any = None
        self.in_step = False
        self.in_backward = False
        self.pending_model_loads: list[tuple[dict[str, Any], bool]] = []
        self.pending_optimizer_state: dict[str, Any] | None = None
        self.steps = 0

    # --- bookkeeping ---
    def record(self, name: str, **details: Any) -> None:
        self.calls.append((name, details))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _require_init(self, what: str) -> None:
        if self.config is None:
            raise ApiMisuse(f"smp.{what} called before smp.init()")

    # --- init and topology ---
    def init(self, config: dict[str, Any] | None = None) -> None:
        import transformers

        if self.config is not None:
            raise ApiMisuse("smp.init() called twice")
        launcher = json.loads(os.environ.get("SM_HP_MP_PARAMETERS", "{}"))
        # "values set in the launcher override these" (reference script)
        merged = {**(config or {}), **launcher}
        # SMP's config rules (backend/config.yaml `requires`): it refuses these at init.
        if int(merged.get("tensor_parallel_degree", 1)) > 1 and not merged.get("ddp"):
            raise ApiMisuse("tensor_parallel_degree > 1 requires ddp to be set to True")
        if merged.get("prescaled_batch") and merged.get("optimize", "speed") != "speed":
            raise ApiMisuse("prescaled_batch requires optimize to be set to speed")
        if merged.get("bf16") and merged.get("fp16"):
            raise ApiMisuse("bf16 requires fp16 to be set to False")
        self.config = merged
        # SMP reads the version when it is imported (predefined_hooks.py); init is the stand-in's first call.
        self.transformers_version = transformers.__version__
        self.record("init", config=dict(self.config))
        if not self.hf_tensor_parallelism:
            self.record(
                "warning",
                message=f"Found unsupported HuggingFace version {self.transformers_version} for automated tensor "
                "parallelism. HuggingFace modules will not be automatically distributed.",
            )
        _ensure_process_group()

    @property
    def hf_tensor_parallelism(self) -> bool:
        return self.transformers_version in gptj.SUPPORTED_HF_VERSIONS

    def _degrees(self) -> tuple[int, int]:
        config = self.config or {}
        pipeline = config.get("pipeline_parallel_degree", config.get("partitions", 1))
        return int(config.get("tensor_parallel_degree", 1)), int(pipeline)

    def _one(self, what: str) -> Any:
        def value() -> int:
            self._require_init(what)
            if what.endswith("rank"):
                return 0
            tp, pp = self._degrees()
            sizes = {"size": tp * pp, "local_size": tp * pp, "dp_size": tp, "rdp_size": 1, "tp_size": tp}
            return {**sizes, "pp_size": pp, "mp_size": tp * pp}[what]

        return value

    def __getattr__(self, name: str) -> Any:
        if name in TOPOLOGY:
            return self._one(name)
        raise AttributeError(name)

    def _group(self) -> Any:
        self._require_init("get_*_process_group")
        return dist.group.WORLD

    get_dp_process_group = get_rdp_process_group = get_mp_process_group = get_world_process_group = _group

    def barrier(self) -> None:
        self._require_init("barrier")
        self.record("barrier")

    def broadcast(self, obj: Any, group: Any) -> None:
        self._require_init("broadcast")

    def recv_from(self, rank: int, rank_type: Any) -> Any:
        raise ApiMisuse("recv_from needs a sender; the stand-in runs one process")

    # --- model creation ---
    @contextlib.contextmanager
    def model_creation(self, tensor_parallelism: bool = False, dtype: Any = None, **tensor_parallel_config: Any):
        self._require_init("model_creation")
        self.record("model_creation", tensor_parallelism=tensor_parallelism, dtype=dtype)
        original_init = nn.Module.__init__
        created, marked = self.created_inside, self.marked_for_tensor_parallelism
        # Only classes registered at import are marked, and with an unsupported transformers none is.
        mark = tensor_parallelism and self.hf_tensor_parallelism

        def tracking_init(module: nn.Module, *args: Any, **kwargs: Any) -> None:
            original_init(module, *args, **kwargs)
            created.add(id(module))
            if mark and gptj.distributable(module):
                marked.add(id(module))

        nn.Module.__init__ = tracking_init  # type: ignore[method-assign]
        try:
            yield
        finally:
            nn.Module.__init__ = original_init  # type: ignore[method-assign]

    def DistributedModel(self, module: nn.Module, trace_device: str = "gpu", **options: Any) -> DistributedModel:
        self._require_init("DistributedModel")
        if self.model is not None:
            raise ApiMisuse("only one model can be wrapped with smp.DistributedModel")
        if id(module) not in self.created_inside:
            raise ApiMisuse("the model must be created inside smp.model_creation() (or smp.tensor_parallelism())")
        if trace_device not in ("cpu", "gpu"):
            raise ApiMisuse(f"trace_device must be 'cpu' or 'gpu', got {trace_device!r}")
        self.record("DistributedModel", trace_device=trace_device, **options)
        if id(module) in self.marked_for_tensor_parallelism:
            count = sum(parameter.numel() for parameter in module.parameters())
            distributed = gptj.DistributedTransformerLMHead(module)
            if sum(parameter.numel() for parameter in distributed.parameters()) != count:
                raise ApiMisuse("NumParametersNotMatchError: the distributed module changed the parameter count")
            self.translate_functions.append(
                (gptj.translate_state_dict_to_hf_gptj, gptj.translate_hf_state_dict_to_smdistributed_gptj)
            )
            self.record("distributed", original=type(module).__name__, replacement=type(distributed).__name__)
            module = distributed
        self.model = DistributedModel(self, module)
        return self.model

    def set_activation_checkpointing(self, module: nn.Module, **options: Any) -> None:
        if self.model is None:
            raise ApiMisuse("set_activation_checkpointing must be called after smp.DistributedModel")
        if not any(module is candidate for candidate in self.model.module.modules()):
            raise ApiMisuse("set_activation_checkpointing takes a module of the wrapped model")
        self.record("set_activation_checkpointing", module=type(module).__name__, **options)

    def DistributedOptimizer(
        self,
        optimizer: torch.optim.Optimizer,
        static_loss_scale: Any = 1.0,
        dynamic_loss_scale: bool = False,
        **kw: Any,
    ) -> DistributedOptimizer:
        if self.model is None:
            raise ApiMisuse("smp.DistributedOptimizer must wrap an optimizer created after smp.DistributedModel")
        model_parameters = {id(parameter) for parameter in self.model.parameters()}
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                if id(parameter) not in model_parameters:
                    raise ApiMisuse("the optimizer holds parameters that are not the DistributedModel's")
        self.record(
            "DistributedOptimizer", static_loss_scale=static_loss_scale, dynamic_loss_scale=dynamic_loss_scale, **kw
        )
        self.optimizer = DistributedOptimizer(self, optimizer)
        return self.optimizer

    # --- the step ---
    def step(self, function: Any = None, **options: Any) -> Any:
        if function is None:  # used as @smp.step(...)
            return lambda inner: self.step(inner, **options)

        def run(*args: Any) -> Any:
            if self.model is None:
                raise ApiMisuse("an @smp.step function ran before smp.DistributedModel")
            self._load_pending()
            microbatches = int((self.config or {}).get("microbatches", 1))
            tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
            batch = tensors[0].shape[0]
            if batch % microbatches:
                raise ApiMisuse(f"batch of {batch} does not split into {microbatches} microbatches")
            size = batch // microbatches
            outputs = []
            self.in_step = True
            try:
                for index in range(microbatches):
                    sliced = [
                        arg[index * size : (index + 1) * size] if isinstance(arg, torch.Tensor) else arg for arg in args
                    ]
                    outputs.append(function(*sliced))
            finally:
                self.in_step = False
            if self.optimizer is not None and self.optimizer.bit16:
                self.optimizer.update_master_grads()  # SMP's model step ends with it (torch/model.py)
            self.steps += 1
            self.record("step", function=function.__name__, microbatches=microbatches)
            return StepOutput(outputs)

        run.__name__ = function.__name__
        return run

    # --- checkpoints ---
    def save_checkpoint(
        self,
        path: str,
        tag: str,
        partial: bool = True,
        model: Any = None,
        optimizer: Any = None,
        user_content: Any = None,
        translate_if_full: bool = True,
        num_kept_partial_checkpoints: int | None = None,
    ) -> None:
        self._require_init("save_checkpoint")
        if not isinstance(tag, str):
            raise ApiMisuse(f"checkpoint tag must be a str, got {type(tag).__name__}")
        if model is not None and not isinstance(model, DistributedModel):
            raise ApiMisuse("save_checkpoint takes the smp.DistributedModel as model")
        if optimizer is not None and not isinstance(optimizer, DistributedOptimizer):
            raise ApiMisuse("save_checkpoint takes the smp.DistributedOptimizer as optimizer")
        self.record("save_checkpoint", path=path, tag=tag, partial=partial, translate_if_full=translate_if_full)
        root = Path(path)
        if partial:
            # Each (pp_rank, tp_rank) writes its own files; the stand-in is rank (0, 0).
            folder = root / f"{tag}_partial"
            folder.mkdir(parents=True, exist_ok=True)
            if model is not None:
                torch.save(model.local_state_dict(), folder / "model_0_0.pt")
            if optimizer is not None:
                torch.save(optimizer.local_state_dict(), folder / "optimizer_states_0_0.pt")
            if user_content is not None:
                torch.save(user_content, folder / "user_content.pt")
            torch.save(dict(self.config or {}), folder / "smp_config.pt")
            with (root / "newest").open("a") as handle:
                handle.write(f"{tag}_partial\n")
        else:
            # checkpoint.py save_model_checkpoint: gathered on rdp_rank 0, translated and written by rank 0 only.
            root.mkdir(parents=True, exist_ok=True)
            state_dict = model.state_dict()
            if translate_if_full:
                for smp_to_hf, _ in self.translate_functions:
                    state_dict = smp_to_hf(state_dict)
            else:
                state_dict["_smp_is_partial"] = False
            torch.save(state_dict, root / tag)
            if user_content is not None:
                torch.save(user_content, root / f"user_content_{tag}")

    def resume_from_checkpoint(
        self,
        path: str,
        tag: str | None = None,
        partial: bool = True,
        strict: bool = True,
        load_optimizer: bool = True,
        load_sharded_optimizer_state: bool = True,
        translate_function: Any = None,
    ) -> Any:
        self._require_init("resume_from_checkpoint")
        root = Path(path)
        if tag is None:
            if not partial:
                raise ApiMisuse("tag is required to load a full checkpoint!")
            tag = (root / "newest").read_text().splitlines()[-1][: -len("_partial")]
        if self.model is None:
            raise ApiMisuse("the stand-in resumes only after smp.DistributedModel (as train.py does)")
        self.record("resume_from_checkpoint", path=path, tag=tag, partial=partial)
        if not partial:
            if not (root / tag).is_file():
                raise ApiMisuse(f"Checkpoint {root / tag} does not exist!")
            self.model.load_state_dict(torch.load(root / tag), strict=strict, translate_function=translate_function)
            return None
        folder = root / f"{tag}_partial"
        if not folder.is_dir():
            raise ApiMisuse(f"checkpoint {folder} does not exist")
        self.model.load_state_dict(torch.load(folder / "model_0_0.pt"), strict=strict)
        if load_optimizer:
            self.pending_optimizer_state = torch.load(folder / "optimizer_states_0_0.pt")
        user_content = folder / "user_content.pt"
        return torch.load(user_content, weights_only=False) if user_content.is_file() else None

    def _load_pending(self) -> None:
        """SMP loads state after partitioning, at the first step, in the order it was asked for."""
        if not self.pending_model_loads and self.pending_optimizer_state is None:
            return
        for state_dict, strict in self.pending_model_loads:
            self.model.module.load_state_dict(state_dict, strict=strict)
        self.pending_model_loads = []
        if self.optimizer is not None:
            self.optimizer.refresh_masters()  # the fp16 optimizer's fp32 copies follow the loaded weights
            if self.pending_optimizer_state is not None:
                self.optimizer.optimizer.load_state_dict(self.pending_optimizer_state)
        self.pending_optimizer_state = None
        self.record("deferred_load")

    def modules(self) -> dict[str, ModuleType]:
        """The module objects to place in sys.modules."""
        torch_module = ModuleType("smdistributed.modelparallel.torch")
        api = [
            "init", "barrier", "broadcast", "recv_from", "model_creation", "DistributedModel", "DistributedOptimizer",
            "set_activation_checkpointing", "step", "save_checkpoint", "resume_from_checkpoint", "CommGroup",
            "RankType", "get_dp_process_group", "get_rdp_process_group", "get_mp_process_group",
            "get_world_process_group",
        ]  # fmt: skip
        for name in api:
            setattr(torch_module, name, getattr(self, name))
        for name in TOPOLOGY:
            setattr(torch_module, name, self._one(name))
        torch_module.stand_in = self  # type: ignore[attr-defined]
        nn_module = ModuleType("smdistributed.modelparallel.torch.nn")
        huggingface = ModuleType("smdistributed.modelparallel.torch.nn.huggingface")
        gptj_module = ModuleType("smdistributed.modelparallel.torch.nn.huggingface.gptj")
        for name in ("translate_state_dict_to_hf_gptj", "translate_hf_state_dict_to_smdistributed_gptj"):
            setattr(gptj_module, name, getattr(gptj, name))
        nn_module.DistributedTransformerLMHead = gptj.DistributedTransformerLMHead  # type: ignore[attr-defined]
        nn_module.huggingface = huggingface  # type: ignore[attr-defined]
        huggingface.gptj = gptj_module  # type: ignore[attr-defined]
        torch_module.nn = nn_module  # type: ignore[attr-defined]
        parent = ModuleType("smdistributed.modelparallel")
        parent.torch = torch_module  # type: ignore[attr-defined]
        parent.__version__ = "1.15.0-stand-in"  # type: ignore[attr-defined]
        root = ModuleType("smdistributed")
        root.modelparallel = parent  # type: ignore[attr-defined]
        return {
            "smdistributed": root,
            "smdistributed.modelparallel": parent,
            "smdistributed.modelparallel.torch": torch_module,
            "smdistributed.modelparallel.torch.nn": nn_module,
            "smdistributed.modelparallel.torch.nn.huggingface": huggingface,
            "smdistributed.modelparallel.torch.nn.huggingface.gptj": gptj_module,
        }
