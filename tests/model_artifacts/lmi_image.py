"""What the LMI 0.27.0 DeepSpeed image (763104351884.dkr.ecr.<region>.amazonaws.com/djl-inference:
0.27.0-deepspeed0.12.6-cu121) installs into its Python 3.10, recorded once, from its build:

- deepjavalibrary/djl-serving@v0.27.0 serving/docker/deepspeed.Dockerfile: the `pip3 install` lines (torch 2.1.2,
  deepspeed 0.12.6, transformers 4.39.0, ..., vllm 0.3.3, lmi_dist, pydantic 2.6.1); the 0.27.0-dlc branch (the
  build AWS publishes) adds huggingface-hub==0.25.1 and numpy==1.26.4;
- serving/docker/scripts/install_python.sh: `pip install -U pip`, then `pip install -U numpy awscli` (awscli 1.x);
- serving/docker/scripts/patch_oss_dlc.sh: `pip3 install requests`;
- serving/docker/scripts/install_s5cmd.sh: s5cmd v2.0.0 into /opt/djl/bin (not a Python package);
- awscli's own requirements, which pip installed with it: aws/aws-cli@1.32.80 (8 April 2024, two days before
  djl-serving v0.27.0) setup.cfg: botocore==1.34.80 (pinned exactly), s3transfer>=0.10.0,<0.11.0,
  docutils>=0.10,<0.17, PyYAML>=3.10,<6.1, colorama>=0.2.5,<0.4.5, rsa>=3.1.2,<4.8; botocore's: jmespath,
  python-dateutil, urllib3.

boto3 is not among them: nothing in the build installs it. Installing it at start-up (a requirements.txt line) would
upgrade botocore past the version awscli pins, so it is listed with what it would move.
"""

from __future__ import annotations

import re

SOURCE = "deepjavalibrary/djl-serving@v0.27.0:serving/docker/deepspeed.Dockerfile (+ scripts/install_python.sh)"

# Distribution names as pip normalizes them (PEP 503).
IMAGE_PACKAGES = frozenset(
    {
        # deepspeed.Dockerfile, pip3 install ...
        "torch", "torchvision", "deepspeed", "seq-scheduler", "peft", "mmaploader", "aiccl", "protobuf",
        "transformers", "hf-transfer", "zstandard", "datasets", "mpi4py", "sentencepiece", "tiktoken", "blobfile",
        "einops", "accelerate", "bitsandbytes", "optimum", "auto-gptq", "pandas", "pyarrow", "jinja2", "diffusers",
        "opencv-contrib-python-headless", "safetensors", "scipy", "flash-attn", "lmi-dist", "vllm", "pydantic",
        "huggingface-hub",
        # install_python.sh and patch_oss_dlc.sh
        "pip", "numpy", "awscli", "requests",
        # awscli 1.32.80's requirements, and botocore's
        "botocore", "s3transfer", "docutils", "pyyaml", "colorama", "rsa", "jmespath", "python-dateutil", "urllib3",
    }
)  # fmt: skip

# Packages the image lacks whose installation would replace an image package: each boto3 release requires the
# botocore of its own release (boto3 setup.cfg: botocore>=1.x.y,<1.(x+1).0), so an unpinned or ranged boto3 line
# installs a current boto3 and upgrades botocore past the botocore==1.34.80 that awscli pins.
MOVES_IMAGE_PACKAGES = {"boto3": ("botocore", "s3transfer")}

# Top-level import names of image packages the handler may import (where they differ from the distribution name).
IMPORT_NAMES = {"torch": "torch", "deepspeed": "deepspeed", "transformers": "transformers", "botocore": "botocore",
                "s3transfer": "s3transfer", "numpy": "numpy", "safetensors": "safetensors",
                "huggingface_hub": "huggingface-hub", "yaml": "pyyaml", "dateutil": "python-dateutil"}  # fmt: skip


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def start_up_install_problems(requirements_text: str) -> list[str]:
    """Why each requirement line would be a problem at start-up (DJL pip-installs requirements.txt then)."""
    problems = []
    for raw in requirements_text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name = normalize(re.split(r"[\s\[<>=!~;@]", line, maxsplit=1)[0])
        if name in IMAGE_PACKAGES:
            problems.append(f"{line!r}: the image ships {name} ({SOURCE}); pip would reinstall or move it")
        elif name in MOVES_IMAGE_PACKAGES:
            moved = ", ".join(MOVES_IMAGE_PACKAGES[name])
            problems.append(f"{line!r}: installing {name} moves the image's {moved}")
        else:
            problems.append(f"{line!r}: start-up would need PyPI; the handler must run on what the image ships")
    return problems
