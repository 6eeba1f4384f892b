"""The int8 units of `make gpu-check`: dtype int8 as the handler serves it on a BLOOM, from a plain Hugging Face folder
(int8-bloom) and from a pre-sharded DeepSpeed checkpoint, the BLOOM-176B example's kind (int8-checkpoint-bloom),
each against the fp16 Hugging Face reference. Two processes: a CUDA fault in one cannot take the other with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from bench.gpu import _dtype_argument
from bench.gpu_check import FAIL, FP16_TOLERANCE, INT8_TOLERANCE, PASS, PartResult, log
from bench.gpu_check_handler import (
    CONTEXT,
    SIZES,
    Call,
    build_folder,
    compare_calls,
    handler_model,
    injected_layers,
    int8_weights,
    load_reference,
    release,
    serve,
)

DS_CHECKPOINT = "ds_inference_config.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".index.json")


def bloom_reference(scratch: Path, *, torch_save: Path | None = None) -> tuple[Path, list[Call], Any]:
    """A random BLOOM folder and what the fp16 Hugging Face model generates for requests(), with its margins."""
    folder = scratch / "bloom-model"
    log("building a random BLOOM and its fp16 Hugging Face reference")
    build_folder("bloom", folder, SIZES["bloom"], torch_save_copy=torch_save)
    hf_model, hf_tokenizer = load_reference(folder, "fp16", "cuda")
    reference, eos_ids = serve(
        hf_model, hf_tokenizer, context_length=CONTEXT, max_input_length=CONTEXT - 1, scores=True, tolerate=False
    )
    del hf_model
    release()
    return folder, reference, eos_ids


def int8_direct(scratch: Path) -> PartResult:
    from lmi_config import ConfigError

    folder, reference, eos_ids = bloom_reference(scratch)
    log("int8-bloom: lmi_loading.load_model, dtype int8, on a plain Hugging Face folder")
    try:
        model, tokenizer, plan = handler_model(folder, "int8", "true", "cuda")
    except ConfigError as error:  # refused at start-up, before any GPU work: a correct answer too
        return PartResult("int8-bloom", PASS, f"the handler refuses dtype int8 without a DeepSpeed checkpoint: {error}")
    tensors, scaled = int8_weights(model)
    numbers: dict[str, Any] = {
        "injected_layers": injected_layers(model),
        "int8_tensors": tensors,
        "with_scales": scaled,
    }
    fix = (
        "serve int8 from a pre-sharded DeepSpeed checkpoint (ds_inference_config.json, as the BLOOM-176B example "
        "does), or have plan_loading refuse dtype int8 for a folder without one"
    )
    if tensors == 0 or scaled < tensors:
        # DeepSpeed's int8 GEMMs would read these as quantized weights with no scales: garbage, or a CUDA fault.
        problem = "no weight is int8 after init_inference(dtype=int8)" if tensors == 0 else (
            f"{tensors - scaled} of {tensors} int8 weight tensors carry no quantization scale: DeepSpeed cast the fp16 "
            "weights to int8 instead of quantizing them (it quantizes only while loading a checkpoint: "
            "module_inject/load_checkpoint.py; containers/base.py keeps apply_weight_quantization() disabled)"
        )  # fmt: skip
        return PartResult("int8-bloom", FAIL, f"{problem}; generation not attempted", numbers, fix=fix)
    candidate, _ = serve(
        model, tokenizer, context_length=plan.context_length, max_input_length=plan.max_input_length, scores=False,
        tolerate=True,
    )  # fmt: skip
    passed, summary, numbers["agreement"] = compare_calls(
        reference, candidate, tolerance=INT8_TOLERANCE, eos_ids=eos_ids
    )
    return PartResult("int8-bloom", PASS if passed else FAIL, summary, numbers, fix=None if passed else fix)


def write_int8_checkpoint(torch_save: Path, target: Path) -> Any:
    """A pre-sharded int8 checkpoint as DeepSpeed writes one: the model on the meta device, the Hugging Face weights
    listed in a checkpoint JSON (DeepSpeed quantizes them to int8 while loading), and save_mp_checkpoint_path.
    Returns the model that wrote it, ready to generate."""
    import deepspeed
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    listing = torch_save / "checkpoints.json"
    files = sorted(path.name for path in torch_save.glob("*.bin"))
    listing.write_text(json.dumps({"type": "BLOOM", "checkpoints": files, "version": 1.0}))
    config = AutoConfig.from_pretrained(torch_save)
    with deepspeed.OnDevice(dtype=torch.float16, device="meta"):
        model = AutoModelForCausalLM.from_config(config, **_dtype_argument(torch.float16))
    engine = deepspeed.init_inference(
        model.eval(),
        tensor_parallel={"tp_size": 1},
        dtype=torch.int8,
        replace_with_kernel_inject=True,
        checkpoint=str(listing),
        base_dir=str(torch_save),
        max_out_tokens=CONTEXT,
        save_mp_checkpoint_path=str(target),
    )
    return engine.module


def stage_checkpoint(written: Path, model_folder: Path, target: Path) -> dict[str, Any]:
    """Move a checkpoint DeepSpeed wrote to where an endpoint would find it: config and tokenizer files beside
    DeepSpeed's shards and its ds_inference_config.json (as written: its base_dir names the writer's folder), no
    Hugging Face weights. The writer's folder is then removed, as it is elsewhere for an endpoint whose shards came
    from S3: the handler must find them in the folder it loads."""
    target.mkdir(parents=True)
    for source in sorted(model_folder.iterdir()):
        if source.is_file() and not source.name.endswith(WEIGHT_SUFFIXES):
            shutil.copy2(source, target / source.name)
    for source in sorted(written.iterdir()):
        shutil.copy2(source, target / source.name)
    shutil.rmtree(written)
    description = json.loads((target / DS_CHECKPOINT).read_text())
    shards = [path for path in target.iterdir() if path.suffix == ".pt"]
    return {
        "shards": len(shards),
        "shard_mb": round(sum(path.stat().st_size for path in shards) / 2**20, 1),
        "tp_size": description.get("tp_size"),
        "dtype": description.get("dtype"),
        "written_base_dir": description.get("base_dir"),
    }


def int8_checkpoint(scratch: Path) -> PartResult:
    from transformers import AutoTokenizer

    folder, reference, eos_ids = bloom_reference(scratch, torch_save=scratch / "bloom-torch-save")
    log("int8-checkpoint-bloom: DeepSpeed writes a pre-sharded int8 checkpoint")
    writer = write_int8_checkpoint(scratch / "bloom-torch-save", scratch / "int8-written")
    written, _ = serve(
        writer, AutoTokenizer.from_pretrained(folder), context_length=CONTEXT, max_input_length=CONTEXT - 1,
        scores=True, tolerate=False,
    )  # fmt: skip
    del writer
    release()
    served = scratch / "int8-served"
    numbers: dict[str, Any] = stage_checkpoint(scratch / "int8-written", folder, served)
    log("int8-checkpoint-bloom: lmi_loading.load_model on the staged checkpoint (meta device)")
    model, tokenizer, plan = handler_model(served, "int8", "true", "cuda")
    if not plan.meta_checkpoint:
        summary = f"the handler did not take the DeepSpeed checkpoint path for a folder with {DS_CHECKPOINT}"
        return PartResult("int8-checkpoint-bloom", FAIL, summary, numbers)
    numbers["int8_tensors"], numbers["with_scales"] = int8_weights(model)
    candidate, _ = serve(
        model, tokenizer, context_length=plan.context_length, max_input_length=plan.max_input_length, scores=False,
        tolerate=True,
    )  # fmt: skip
    # Same int8 weights, same kernels: only fp16-level differences are allowed against the model that wrote them.
    same, same_text, numbers["against_writer"] = compare_calls(
        written, candidate, tolerance=FP16_TOLERANCE, eos_ids=eos_ids
    )
    close, close_text, numbers["against_fp16"] = compare_calls(
        reference, candidate, tolerance=INT8_TOLERANCE, eos_ids=eos_ids
    )
    summary = (
        f"{numbers['shards']} shards ({numbers['shard_mb']} MiB) loaded on the meta device; against the model that "
        f"wrote them: {same_text}; against Hugging Face fp16: {close_text}"
    )
    return PartResult("int8-checkpoint-bloom", PASS if same and close else FAIL, summary, numbers)
