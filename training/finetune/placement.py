"""Where the Evaluate step puts a base model: whole on one device, or spread over the GPUs of the instance.

Processing jobs cannot run on p4d, p4de or p5.48xlarge (CreateProcessingJob's instance types), so a 70B-class base in
bf16 (130+ GiB) fits no GPU a processing job gets. Spread over the GPUs of a multi-GPU instance (e.g. 4 x L40S), it
fits: accelerate's big-model inference assigns whole transformer layers to GPUs, loads each weight straight onto its
GPU, and moves the activations from one GPU to the next as the forward pass crosses them (hooks on the layers). The
GPUs run one after another, not together, which is all perplexity needs.

The device map is computed here, before anything loads, with the accelerate functions transformers' own
device_map="auto" uses (get_balanced_memory, then infer_auto_device_map over the model's no-split layer classes), so
that a model which would not fit is refused with its sizes instead of being silently placed on disk: for safetensors
weights transformers "offloads" what does not fit to the files themselves and reads them again at every forward.

Each GPU's budget is its free memory less RUNTIME_RESERVE_GIB, the runtime allowance synth's sizing keeps per GPU
(core/sizing.py RUNTIME_OVERHEAD_GIB; a test checks they agree).
"""

from __future__ import annotations

from typing import Any, Union

import torch
from torch import nn

from .errors import ConfigurationError

GIB = 1024**3
RUNTIME_RESERVE_GIB = 2.0  # CUDA kernels, the allocator's reserve, and the activations and logits of a batch
Device = Union[int, str]  # accelerate's names: a GPU index, "cpu", "disk"


def budgets(free_bytes: list[int]) -> dict[Device, int]:
    """What each GPU may hold of a model, given the bytes free on each: all but the runtime reserve."""
    return {index: max(0, int(free - RUNTIME_RESERVE_GIB * GIB)) for index, free in enumerate(free_bytes)}


def gpu_memory() -> dict[Device, int]:
    """The budgets of this machine's GPUs (free memory, after the CUDA context this process holds)."""
    return budgets([torch.cuda.mem_get_info(index)[0] for index in range(torch.cuda.device_count())])


def no_split_classes(model: nn.Module) -> list:
    """The layer classes accelerate must keep whole on one device (the decoder layers: their residual connections
    add tensors from the start and the end of the layer). transformers 4.x collects them from the submodules in
    _get_no_split_modules; 5.x has gathered them into _no_split_modules when the model was built."""
    collect = getattr(model, "_get_no_split_modules", None)
    classes = collect("auto") if collect is not None else getattr(model, "_no_split_modules", None)
    return sorted(classes or ())


def _size(size: float) -> str:
    return f"{size / GIB:.1f} GiB" if size >= GIB / 10 else f"{size / 2**20:.1f} MiB"


def _describe(memory: dict[Device, int]) -> str:
    names = {device: f"GPU {device}" if isinstance(device, int) else device for device in memory}
    return ", ".join(f"{names[device]} {_size(budget)}" for device, budget in memory.items())


def device_map(model: nn.Module, memory: dict[Device, int]) -> dict[str, Device] | None:
    """Where each part of `model` (built on the meta device, in the dtype it will load in) goes, given the bytes each
    device may hold (`memory`: GPU index or "cpu" -> bytes, in the order to fill; "disk" to allow accelerate's disk
    offload, which only tests want): None when it goes whole on the first device, because it fits there or there
    is no other; else accelerate's balanced map over the devices. ConfigurationError when even that does not hold
    it."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import compute_module_sizes, get_balanced_memory

    devices = [device for device in memory if device != "disk"]
    if not devices:
        raise ConfigurationError("no device to place the model on: give the memory of at least one GPU or the CPU")
    size = compute_module_sizes(model)[""]
    if len(memory) == 1 or size <= memory[devices[0]]:
        return None
    classes = no_split_classes(model)
    # accelerate's balanced budgets spread the layers evenly, which leaves the last device (the LM head's, where the
    # logits are computed) the least loaded; get_balanced_memory has no notion of "disk", so it is added back after.
    balanced = get_balanced_memory(model, max_memory={d: memory[d] for d in devices}, no_split_module_classes=classes)
    if "disk" in memory:
        balanced["disk"] = memory["disk"]
    placement = dict(infer_auto_device_map(model, max_memory=balanced, no_split_module_classes=classes))
    spilled = sorted(name for name, device in placement.items() if device not in memory)
    if spilled:
        raise ConfigurationError(
            f"the base model ({_size(size)} of weights) does not fit the memory of this instance's devices "
            f"({_describe({d: memory[d] for d in devices})}; free memory less {RUNTIME_RESERVE_GIB} GiB each), even "
            f"spread over all of them: {', '.join(spilled[:3])}{' ...' if len(spilled) > 3 else ''} would not fit. "
            "Use an evaluate_instance_type with more GPU memory in all (synth names those that hold it: "
            "core/config/lora_evaluation.py)"
        )
    return placement


def input_device(model: nn.Module) -> torch.device:
    """Where the token ids go: the device of the layer that embeds them, the first of the forward pass. Weights
    offloaded to the disk (only tests do) wait on the meta device and run on the CPU."""
    weight = model.get_input_embeddings().weight
    return torch.device("cpu") if weight.device.type == "meta" else weight.device


def device_summary(placement: dict[str, Device] | None, device: Any) -> str:
    """One line for the job's log: where the model went."""
    if placement is None:
        return f"placement: whole on {device}"
    counts: dict[str, int] = {}
    for target in placement.values():
        name = f"GPU {target}" if isinstance(target, int) else str(target)
        counts[name] = counts.get(name, 0) + 1
    return "placement: spread over " + ", ".join(f"{target} ({n} parts)" for target, n in counts.items())
