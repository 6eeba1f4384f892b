"""Copy a Hugging Face model into S3 once: the staging pipeline's processing step.

    python stage_model.py --model_id EleutherAI/gpt-j-6b --revision main --output_dir /opt/ml/processing/output/model

SageMaker uploads the output folder to the stage's pretrained/<model>/ prefix, which the training pipeline reads as
its `model` channel and an endpoint can serve directly, so no training job or endpoint depends on the hub at run
time. Only what loading needs is copied: the configs, the tokenizer files and one weights format (safetensors when
the repository has them, else PyTorch .bin files), never the Flax, TensorFlow or ONNX copies.
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import sys
from pathlib import Path

CONFIG_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken"]  # configs, tokenizer, vocab and merges
SAFETENSORS = "*.safetensors"
PYTORCH_BIN = "pytorch_model*.bin"


class StagingError(Exception):
    """The repository does not hold a loadable model."""


def weight_patterns(repo_files: list[str]) -> list[str]:
    """The one weights format to copy: safetensors if present, else PyTorch .bin."""
    for pattern in (SAFETENSORS, PYTORCH_BIN):
        if any(fnmatch.fnmatch(Path(f).name, pattern) for f in repo_files):
            return [pattern]
    raise StagingError("the repository has neither *.safetensors nor pytorch_model*.bin weights")


def stage(model_id: str, revision: str, output_dir: Path, hub=None) -> list[Path]:
    """Download what loading the model needs into `output_dir`; return the files, biggest first."""
    if hub is None:
        import huggingface_hub as hub
    files = hub.list_repo_files(model_id, revision=revision)
    if "config.json" not in files:
        raise StagingError(f"{model_id}@{revision} has no config.json at its top level; is it a model repository?")
    patterns = CONFIG_PATTERNS + weight_patterns(files)
    print(f"stage_model: {model_id}@{revision}: copying {', '.join(patterns)}", flush=True)
    hub.snapshot_download(model_id, revision=revision, local_dir=str(output_dir), allow_patterns=patterns)
    # The hub client keeps download metadata in <local_dir>/.cache; it is not part of the model.
    shutil.rmtree(output_dir / ".cache", ignore_errors=True)
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
        help="folder SageMaker uploads to the pretrained/<model>/ prefix",
    )
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    try:
        stage(args.model_id, args.revision, args.output_dir)
    except StagingError as error:
        print(f"stage_model.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
