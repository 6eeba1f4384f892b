"""Fine-tune GPT-J (or any HF causal LM) with SageMaker model parallelism, or plain PyTorch; the SageMaker
`sagemaker_program` of the training step.

Run it one of these ways (from this folder; every flag is listed by `python train.py --help` and in the README):

  Local, one process (CPU or one GPU), random init from a config:
    python train.py --train_dir data/train --validation_dir data/validation --model_config config.json \
        --tokenizer_dir tokenizer/ --model_dir out/model --output_dir out --checkpoint_dir out/checkpoints

  Local, fine-tuning pretrained weights (an HF folder: config.json, *.safetensors, tokenizer files):
    python train.py --pretrained_dir gpt-j-6b/ --train_dir ... --validation_dir ... --model_dir ... \
        --output_dir ... --checkpoint_dir ...

  Data parallel on one machine (DDP; NCCL on GPUs, gloo on CPUs):
    torchrun --nproc_per_node 8 train.py <same flags>

  SageMaker (the pipeline does this): entry point train.py in a sourcedir with this folder's contents.
    Channels `train`, `test` and `model` become SM_CHANNEL_TRAIN / SM_CHANNEL_TEST / SM_CHANNEL_MODEL, SM_MODEL_DIR
    receives the model, SM_OUTPUT_DATA_DIR metrics.json, /opt/ml/checkpoints the checkpoints (synced to S3).
    Hyperparameters arrive as `--name value` flags. The SMP layout arrives as mp_parameters from the estimator's
    `distribution`: SMP v1 with {"smdistributed": {"modelparallel": {"enabled": true, "parameters": {...}}},
    "mpi": {"enabled": true, "processes_per_host": <GPUs>}}, SMP v2 with {"torch_distributed": {"enabled": true},
    "smdistributed": {"modelparallel": {"enabled": true, "parameters": {"hybrid_shard_degree": ...}}}}.
    With --backend auto (default) the backend follows mp_parameters and the libraries present.

Exit status: 0 on success, 2 when a flag, layout, channel, model/tokenizer folder or data problem is found (the
message says what to change).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from finetune.errors import ConfigurationError
from finetune.hyperparameters import parse_hyperparameters
from finetune.loop import run_training


def run(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any]:
    """Parse, check and train; raises ConfigurationError for anything the user must change."""
    hyperparameters, platform = parse_hyperparameters(argv, environ)
    return run_training(hyperparameters, platform, environ)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    try:
        run(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
    except ConfigurationError as error:
        print(f"train.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
