"""Copy a Hugging Face model into S3 once: the staging pipeline's processing step.

    python stage_model.py --model_id EleutherAI/gpt-j-6b --revision main --output_dir /opt/ml/processing/output/model
    python stage_model.py --model_id microsoft/bloom-deepspeed-inference-int8 --revision aa00a66... \\
        --deepspeed_tp_size 8 --deepspeed_dtype int8

SageMaker uploads the output folder to the stage's pretrained/<name>/ prefix, which the training pipeline reads as
its `model` channel and an endpoint can serve directly, so no training job or endpoint depends on the hub at run
time. Only what loading needs is copied: the configs, the tokenizer files and one weights format (safetensors when
the repository has them, else PyTorch .bin files), never the Flax, TensorFlow or ONNX copies.

With --deepspeed_tp_size/--deepspeed_dtype the repository is a pre-sharded DeepSpeed inference checkpoint: its
ds_inference_config.json must describe exactly that split and dtype in the form DeepSpeed's kernel-injection loader
reads, and every file it lists is copied (a listed file the repository lacks fails the staging, not the endpoint's
start-up 40 minutes later).
"""

from __future__ import annotations

import argparse
import glob
import json
import shutil
import sys
from pathlib import Path

from huggingface_hub.utils import filter_repo_objects

CONFIG_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken"]  # configs, tokenizer, vocab and merges
SAFETENSORS = "*.safetensors"
PYTORCH_BIN = "pytorch_model*.bin"
# The handler loads a folder through DeepSpeed's checkpoint description whenever it holds this file.
DS_DESCRIPTION = "ds_inference_config.json"
# DeepSpeed's dtype names in the description (torch's) -> the platform's.
DS_DTYPES = {"int8": "int8", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# deepspeed@v0.12.6:deepspeed/runtime/state_dict_factory.py, get_sd_loader_json: only these types come back as the
# description the kernel-injection loader reads; any other builds a Megatron loader.
DS_TYPES = ("bloom", "ds_model")


class StagingError(Exception):
    """The repository does not hold a loadable model."""


def weight_patterns(repo_files: list[str]) -> list[str]:
    """The one weights format to copy: safetensors if present, else PyTorch .bin."""
    for pattern in (SAFETENSORS, PYTORCH_BIN):
        if any(filter_repo_objects(repo_files, allow_patterns=[pattern])):
            return [pattern]
    raise StagingError("the repository has neither *.safetensors nor pytorch_model*.bin weights")


def deepspeed_files(description: dict, repo_files: list[str], *, tp_size: int, dtype: str) -> list[str]:
    """The files a DeepSpeed checkpoint description lists, once it is known to be what the catalog says: split for
    `tp_size` ranks, in `dtype`, loadable from the staged folder. Read as DeepSpeed 0.12.6 reads it
    (deepspeed/module_inject/replace_module.py, replace_transformer_layer)."""
    where = DS_DESCRIPTION
    kind = str(description.get("type", ""))
    if kind.lower() not in DS_TYPES:
        raise StagingError(f"{where} has type {kind!r}; DeepSpeed reads tensor-parallel shards only for {DS_TYPES}")
    if "version" not in description:
        raise StagingError(f"{where} has no version; DeepSpeed's loader requires one")
    if "base_dir" in description:
        raise StagingError(
            f"{where} sets base_dir {description['base_dir']!r}: DeepSpeed would read the shards from there instead "
            "of the staged folder; use a repository whose description has no base_dir"
        )
    if description.get("parallelization", "pp") != "tp":
        raise StagingError(
            f"{where} has parallelization {description.get('parallelization', 'pp')!r}: every rank would load every "
            "file; a pre-sharded checkpoint has 'tp'"
        )
    checkpoints = description.get("checkpoints")
    if not isinstance(checkpoints, dict) or not checkpoints.get("tp"):
        raise StagingError(f"{where} lists no tensor-parallel files (checkpoints.tp)")
    tp_files, non_tp = list(checkpoints["tp"]), list(checkpoints.get("non_tp", []))
    # As DeepSpeed resolves it: mp_size over tp_size over the number of tp files.
    size = description.get("mp_size", description.get("tp_size", len(tp_files)))
    if size != tp_size:
        raise StagingError(f"{where} is split for {size} tensor-parallel ranks, not {tp_size}")
    if len(tp_files) % tp_size:
        raise StagingError(f"{where}: its {len(tp_files)} tensor-parallel files do not divide into {tp_size} ranks")
    stored = description.get("dtype")
    if stored is None:
        raise StagingError(f"{where} states no dtype: cannot confirm it holds {dtype} weights")
    if DS_DTYPES.get(stored) != dtype:
        raise StagingError(f"{where} holds {stored} weights, not {dtype}")
    listed = tp_files + non_tp
    missing = sorted(set(listed) - set(repo_files))
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise StagingError(f"{where} lists {len(missing)} file(s) the repository does not have: {shown}")
    return listed


def stage(
    model_id: str, revision: str, output_dir: Path, hub=None, deepspeed: tuple[int, str] | None = None
) -> list[Path]:
    """Download what loading the model needs into `output_dir`; return the files, biggest first. `deepspeed`:
    (tensor parallel degree, dtype) of the pre-sharded DeepSpeed checkpoint the repository must be."""
    if hub is None:
        import huggingface_hub as hub
    files = hub.list_repo_files(model_id, revision=revision)
    if "config.json" not in files:
        raise StagingError(f"{model_id}@{revision} has no config.json at its top level; is it a model repository?")
    ignore: list[str] = []
    if deepspeed is None:
        # A description copied without its shards would send the handler after files that are not there.
        patterns, ignore = CONFIG_PATTERNS + weight_patterns(files), [DS_DESCRIPTION]
    else:
        if DS_DESCRIPTION not in files:
            raise StagingError(
                f"{model_id}@{revision} has no {DS_DESCRIPTION} at its top level: it is not a pre-sharded DeepSpeed "
                "inference checkpoint"
            )
        path = hub.hf_hub_download(model_id, DS_DESCRIPTION, revision=revision, local_dir=str(output_dir))
        description = json.loads(Path(path).read_text())
        tp_size, dtype = deepspeed
        listed = deepspeed_files(description, files, tp_size=tp_size, dtype=dtype)
        patterns = CONFIG_PATTERNS + [glob.escape(name) for name in listed]
    print(f"stage_model: {model_id}@{revision}: copying {', '.join(patterns[:6])}{' ...' * (len(patterns) > 6)}")
    hub.snapshot_download(
        model_id, revision=revision, local_dir=str(output_dir), allow_patterns=patterns, ignore_patterns=ignore or None
    )
    # The hub client keeps download metadata in <local_dir>/.cache; it is not part of the model.
    shutil.rmtree(output_dir / ".cache", ignore_errors=True)
    if deepspeed is not None:
        absent = [name for name in listed if not (output_dir / name).is_file()]
        if absent:
            raise StagingError(f"the download lacks {len(absent)} file(s) {DS_DESCRIPTION} lists: {absent[:5]}")
    staged = sorted((p for p in output_dir.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    total = sum(p.stat().st_size for p in staged)
    print(f"stage_model: {len(staged)} files, {total / 2**30:.2f} GiB in {output_dir}", flush=True)
    return staged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_id", required=True, help="Hugging Face repository, e.g. EleutherAI/gpt-j-6b")
    parser.add_argument("--revision", default="main", help="branch, tag or commit to copy (pin a commit to freeze it)")
    parser.add_argument(
        "--output_dir",
        type=Path,
        default=Path("/opt/ml/processing/output/model"),
        help="folder SageMaker uploads to the pretrained/<name>/ prefix",
    )
    parser.add_argument(
        "--deepspeed_tp_size", type=int, help="a pre-sharded DeepSpeed checkpoint split for this many ranks"
    )
    parser.add_argument("--deepspeed_dtype", choices=sorted(set(DS_DTYPES.values())), help="... holding these weights")
    args = parser.parse_args(argv)
    if (args.deepspeed_tp_size is None) != (args.deepspeed_dtype is None):
        parser.error("--deepspeed_tp_size and --deepspeed_dtype go together: give both, or neither")
    deepspeed = None if args.deepspeed_tp_size is None else (args.deepspeed_tp_size, args.deepspeed_dtype)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    try:
        stage(args.model_id, args.revision, args.output_dir, deepspeed=deepspeed)
    except StagingError as error:
        print(f"stage_model.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
