"""LoRA and QLoRA settings that need no library: the methods, the projection names of each architecture, the 4-bit
quantization QLoRA loads its base weights with, and the record of the base model an adapter belongs to.

Shared by train.py (through backends/lora.py, which imports PEFT) and by the CDK side, which checks a config's
`training.lora` against the same tables at synth.
"""

from __future__ import annotations

import re
from typing import Any

from .architecture_records import load_records

METHODS = ("full", "lora", "qlora")
ADAPTER_METHODS = ("lora", "qlora")

# The linear layers of each architecture's transformer block, by the attribute names PEFT matches on; the tuple is
# the default a run adapts. Declared with their sources in core/catalog/architectures.py (lora_targets).
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    name: tuple(record["lora_targets"]) for name, record in load_records().items() if record["lora_targets"]
}

# QLoRA's recipe (the paper, and bitsandbytes' and transformers' quantization docs): 4-bit NormalFloat base weights,
# double quantization of the scaling constants, bf16 compute. bitsandbytes 0.50 (the job's lock) runs NF4 on CUDA
# compute capability 6.0+ (its installation guide); the bf16 compute needs Ampere (8.0) or newer. This pipeline runs
# QLoRA on CUDA GPUs only: a CPU run is refused rather than left to crawl.
QLORA_QUANTIZATION: dict[str, Any] = {
    "load_in_4bit": True,
    "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True,
    "bnb_4bit_compute_dtype": "bfloat16",
}
QLORA_MIN_COMPUTE_CAPABILITY = (8, 0)

# What train.py writes next to the adapter: which base model (catalog name, Hugging Face id, commit) it adapts.
BASE_RECORD_FILE = "base_model.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
# The adapter as a SageMaker adapter inference component takes it: one gzipped tar (its Container.ArtifactUrl must
# name "a single gzip compressed tar archive (.tar.gz suffix)"), PEFT's files at the top. Written beside the folder.
ADAPTER_ARCHIVE_FILE = "adapter.tar.gz"

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def adapter_backend_problem(method: str, backend: str, tensor_parallel_degree: int = 1) -> str | None:
    """Why train.py's `backend` (torch, smp_v1, smp_v2) cannot train `method`'s adapters, or None. LoRA runs on plain
    PyTorch (DDP: the base whole on every GPU) or on SMP v2 with FSDP sharding the frozen base; QLoRA only on plain
    PyTorch."""
    if method not in ADAPTER_METHODS or backend == "torch":
        return None
    if backend == "smp_v1":
        return (
            f"--method {method} does not run on SMP v1 (its image's Python 3.9 has no peft, and its tensor-parallel "
            "modules are not PEFT's target layers): use SMP v2 with hybrid_shard_degree (LoRA), or plain PyTorch "
            "(--backend torch, no mp_parameters)"
        )
    if method == "qlora":
        return (
            "--method qlora with SMP v2: bitsandbytes' 4-bit base weights are not sharded by FSDP in this stack; run "
            "QLoRA on plain PyTorch (--backend torch, no mp_parameters: the 4-bit base on every GPU), or --method "
            "lora with SMP v2 to shard a bf16 base"
        )
    if tensor_parallel_degree > 1:
        return (
            f"--method lora with mp_parameters tensor_parallel_degree {tensor_parallel_degree}: SMP v2's "
            "torch.sagemaker.transform replaces the model's attention and MLP modules with its own, so PEFT finds "
            "none of the layers its adapters attach to (AWS documents SMP v2 fine-tuning with FSDP sharding only): "
            "set tensor_parallel_degree to 1 and shard the base with hybrid_shard_degree"
        )
    return None


def default_target_modules(model_type: str) -> tuple[str, ...] | None:
    return LORA_TARGETS.get(model_type)


def parse_target_modules(text: str) -> tuple[str, ...] | None:
    """`auto` (None: the architecture's default) or comma-separated module names; ValueError naming what is wrong."""
    value = str(text).strip()
    if value.lower() == "auto":
        return None
    names = tuple(name.strip() for name in value.split(","))
    bad = [name for name in names if not _MODULE_NAME.match(name)]
    if bad or not names:
        raise ValueError(
            f"expected `auto` or comma-separated module names (e.g. q_proj,v_proj), got {text!r}"
            + (f": {', '.join(repr(name) for name in bad)} is not a module name" if bad else "")
        )
    if len(set(names)) != len(names):
        raise ValueError(f"module names repeat in {text!r}")
    return names


def resolve_target_modules(model_type: str, requested: tuple[str, ...] | None) -> tuple[str, ...]:
    """The modules to adapt; ValueError (with the names that exist) when the architecture has no default or a
    requested name is not one of its linear layers."""
    known = LORA_TARGETS.get(model_type)
    if requested is None:
        if known is None:
            raise ValueError(
                f"there is no default LoRA target list for model type {model_type!r} (defaults exist for "
                f"{', '.join(sorted(LORA_TARGETS))}); name the linear layers to adapt"
            )
        return known
    if known is not None:
        unknown = [name for name in requested if name not in known]
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a linear layer of {model_type} "
                f"models; choose from {', '.join(known)}"
            )
    return requested


def write_adapter_archive(folder: Any) -> Any:
    """ADAPTER_ARCHIVE_FILE in `folder`: its adapter config, weights and base record, byte-identical for identical
    files (fixed order, times and owners), so a resumed run that ends with the same weights writes the same archive."""
    import gzip
    import tarfile
    from pathlib import Path

    folder = Path(folder)
    target = folder / ADAPTER_ARCHIVE_FILE
    # Nested, not one parenthesized `with`: this runs in Python 3.9 images.
    with open(target, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped:  # noqa: SIM117
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, BASE_RECORD_FILE):
                path = folder / name
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
                with open(path, "rb") as data:
                    archive.addfile(info, data)
    return target
