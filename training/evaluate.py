"""The pipeline's Evaluate step (a SageMaker Processing job): loss and perplexity of the trained model on the
validation blocks, written as SageMaker model-quality JSON so a JsonGet on `metrics.perplexity.value` works:

    {"metrics": {"perplexity": {"value": X}, "loss": {"value": Y}}, "tokens": N}

The model folder is the training job's output: an HF folder, or one holding the `model.tar.gz` SageMaker packs
SM_MODEL_DIR into (extracted first). A LoRA / QLoRA job's output is an adapter folder (adapter_config.json): it is
applied through PEFT to the base model in --base_model_dir (the staged weights it was trained on; 4-bit again for a
QLoRA adapter, as it was trained). A base that does not fit one GPU is spread over all the GPUs of the instance
(finetune/placement.py). Uses the same token-weighted loss as train.py's validation.

  python evaluate.py                                     # SageMaker Processing: /opt/ml/processing/... defaults
  python evaluate.py --model_dir out/model --validation_dir data/validation --output_dir out/evaluation

Run it with this folder as the processing job's source dir (it imports `finetune`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from finetune.adapters import ADAPTER_CONFIG_FILE
from finetune.data import read_blocks
from finetune.errors import ConfigurationError
from finetune.hyperparameters import parse_int
from finetune.perplexity import loss_and_token_sums, perplexity

EVALUATION_FILE = "evaluation.json"
MODEL_ARCHIVE = "model.tar.gz"


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigurationError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _RaisingParser(prog="evaluate.py", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--model_dir", default="/opt/ml/processing/model", help=f"HF model folder or one with {MODEL_ARCHIVE}"
    )
    parser.add_argument(
        "--validation_dir", default="/opt/ml/processing/test", help="validation JSON lines (packed blocks)"
    )
    parser.add_argument("--output_dir", default="/opt/ml/processing/evaluation", help=f"where {EVALUATION_FILE} goes")
    parser.add_argument("--batch_size", type=parse_int, default=4, help="blocks per forward")
    parser.add_argument(
        "--base_model_dir", default="/opt/ml/processing/base", help="the base model's HF folder, for an adapter"
    )
    return parser


def _safe_members(archive: tarfile.TarFile, target: Path) -> list:
    """Refuse archive entries that would land outside the target folder."""
    members = archive.getmembers()
    root = target.resolve()
    for member in members:
        destination = (target / member.name).resolve()
        if root != destination and root not in destination.parents:
            raise ConfigurationError(f"{MODEL_ARCHIVE} entry {member.name!r} points outside the extraction folder")
    return members


def locate_model(model_dir: Path, scratch: Path) -> Path:
    """The HF folder: model_dir itself, or model.tar.gz inside it extracted into scratch."""
    archive_path = model_dir / MODEL_ARCHIVE
    if archive_path.is_file():
        with tarfile.open(archive_path, "r:gz") as archive:
            archive.extractall(scratch, members=_safe_members(archive, scratch))
        model_dir = scratch
    if not (model_dir / "config.json").is_file() and not (model_dir / ADAPTER_CONFIG_FILE).is_file():
        raise ConfigurationError(
            f"{model_dir} has neither config.json nor {ADAPTER_CONFIG_FILE} (nor a {MODEL_ARCHIVE} with one)"
        )
    return model_dir


def _load_model(model_dir: Path, base_model_dir: str | None, device: Any, memory: dict[Any, int] | None) -> Any:
    import torch
    from finetune.modeling import load_hf_model

    if not (model_dir / ADAPTER_CONFIG_FILE).is_file():
        model = load_hf_model(str(model_dir))  # transformers 4.21 (the SMP v1 pin) cannot read safetensors itself
    else:
        from finetune.backends.lora import load_adapter_model

        model = load_adapter_model(model_dir, base_model_dir, device, memory)
    if _placed(model) is None and device.type == "cpu" and model.dtype in (torch.float16, torch.bfloat16):
        model = model.float()  # half-precision matmuls are slow or missing on CPU
    return model


def _placed(model: Any) -> dict[str, Any] | None:
    """Where accelerate put the parts of a model as it loaded (spread over GPUs; a 4-bit model on its GPU), or None
    for a model loaded whole on the CPU."""
    return getattr(model, "hf_device_map", None)  # a PeftModel answers for its base model


def evaluate(
    model_dir: Path,
    validation_dir: str,
    batch_size: int,
    base_model_dir: str | None = None,
    memory: dict[Any, int] | None = None,
) -> dict[str, Any]:
    """`memory`: the bytes each device may hold of the model (finetune/placement.py); by default each GPU's free
    memory less the runtime reserve, and none on a machine without GPUs (the model whole on the CPU)."""
    import torch
    from finetune.placement import device_summary, gpu_memory, input_device

    blocks = read_blocks(validation_dir, "validation")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if memory is None and device.type == "cuda":
        memory = gpu_memory()
    model = _load_model(model_dir, base_model_dir, device, memory)
    placement = _placed(model)
    # A model accelerate placed stays where it is: spread over GPUs, its hooks move the activations from one to the
    # next; a 4-bit model is placed on its GPU as it loads.
    if placement is None and not getattr(model, "is_loaded_in_4bit", False):
        model = model.to(device)
    model = model.eval()
    inputs_on = device if placement is None else input_device(model)
    print(device_summary(placement, device), flush=True)

    def mean_loss(batch: torch.Tensor) -> torch.Tensor:
        batch = batch.to(inputs_on)
        return model(input_ids=batch, attention_mask=torch.ones_like(batch), labels=batch)["loss"].float()

    batches = (blocks[start : start + batch_size] for start in range(0, blocks.shape[0], batch_size))
    loss_sum, tokens = loss_and_token_sums(mean_loss, batches)
    loss = loss_sum / tokens
    return {"metrics": {"perplexity": {"value": perplexity(loss)}, "loss": {"value": loss}}, "tokens": tokens}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        if args.batch_size < 1:
            raise ConfigurationError(f"--batch_size must be at least 1, got {args.batch_size}")
        with tempfile.TemporaryDirectory() as scratch:
            report = evaluate(
                locate_model(Path(args.model_dir), Path(scratch)),
                args.validation_dir,
                args.batch_size,
                args.base_model_dir,
            )
    except ConfigurationError as error:
        print(f"evaluate.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    (output / EVALUATION_FILE).write_text(json.dumps(report, indent=2))
    metrics = report["metrics"]
    print(
        f"evaluation: loss={metrics['loss']['value']:.4f} perplexity={metrics['perplexity']['value']:.4f} "
        f"tokens={report['tokens']} path={output / EVALUATION_FILE}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
