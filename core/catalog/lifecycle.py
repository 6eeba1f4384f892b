"""Images and libraries a stage runs that no longer get patches, with the date they stopped and the config change
that moves off them. The plan prints them as warnings, computed from the date it is given (so tests are
deterministic); the reference path they belong to stays usable.

Sources:
- PyTorch DLCs: AWS's framework support policy (aws/deep-learning-containers docs/src/legacy/legacy_support.yml,
  published at https://docs.aws.amazon.com/deep-learning-containers/latest/devguide/support-policy.html):
  PyTorch 1.13 GA 2022-10-28, end of patch 2024-10-28; PyTorch 2.4 GA 2024-07-24, end of patch 2025-07-24;
  PyTorch 2.5 end of patch 2025-10-29. After it "these images will no longer receive security patches or bug fixes".
- LMI 0.27.0 with DeepSpeed: the last DeepSpeed LMI. LMI V10 (0.28.0) discontinued the DeepSpeed integration
  (djl-serving serving/docs/lmi/announcements/deepspeed-deprecation.md, commit c5fdfec1, 2024-06-13), and AWS's
  available-images list carries no 0.27 image any more (aws/deep-learning-containers docs/src/data/djl-inference).
  Its Python 3.10 reached end of life in 2026-10 (PEP 619).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from core.catalog import images


@dataclass(frozen=True)
class Unpatched:
    what: str
    since: datetime.date
    why: str
    move: str  # the config change that moves off it, or why none does


PYTORCH_1_13 = datetime.date(2024, 10, 28)
PYTORCH_2_4 = datetime.date(2025, 7, 24)
PYTORCH_2_5 = datetime.date(2025, 10, 29)
LMI_DEEPSPEED = datetime.date(2024, 6, 13)


def stage_unpatched(stage: Any, today: datetime.date) -> list[Unpatched]:
    """What `stage` runs that stopped getting patches on or before `today`."""
    training, serving = stage.training, stage.serving
    found = []
    if serving.engine == "deepspeed":
        found.append(
            Unpatched(
                f"the endpoint's {images.lmi_image('deepspeed').description} image",
                LMI_DEEPSPEED,
                "LMI V10 (0.28.0) dropped DeepSpeed, so 0.27.0 gets no releases; its Python 3.10 is past end of life",
                f"serving.engine: vllm ({images.lmi_image('vllm').description})",
            )
        )
    if training.smp.version == 1:
        found.append(
            Unpatched(
                f"the PyTorch {images.SMP_V1_PYTORCH_VERSION} DLC of SMP v1 (fine-tuning)",
                PYTORCH_1_13,
                "AWS's DLC support policy",
                f"training.smp.version: 2 (SMP v2, newer, though its PyTorch 2.4 line stopped too, on {PYTORCH_2_4})",
            )
        )
    else:
        found.append(
            Unpatched(
                f"the SMP v2 image (fine-tuning), built on PyTorch {images.SMP_V2_PYTORCH_VERSION}",
                PYTORCH_2_4,
                "AWS's DLC support policy for PyTorch 2.4",
                f"none in config: the newest SMP image, 2.8.0 on PyTorch 2.5.1, stopped too ({PYTORCH_2_5})",
            )
        )
    # Beside SMP v2 the prepare and evaluate steps run in its image (images.processing_image); staging never moves.
    found.append(
        Unpatched(
            f"the PyTorch {images.SMP_V1_PYTORCH_VERSION} DLC of the prepare and evaluate steps and of weights staging"
            if training.smp.version == 1
            else f"the PyTorch {images.SMP_V1_PYTORCH_VERSION} DLC of weights staging",
            PYTORCH_1_13,
            "AWS's DLC support policy",
            "training.smp.version: 2 moves prepare and evaluate to the SMP v2 image; staging stays (none in config: "
            "core/catalog/images.py processing_image pins it)"
            if training.smp.version == 1
            else "none in config: core/catalog/images.py processing_image pins it for staging whatever the SMP version",
        )
    )
    return [item for item in found if item.since <= today]


def warnings(stage: Any, today: datetime.date) -> list[str]:
    """One line per unpatched image: what, since when, why, and what moves off it."""
    return [
        f"no patches since {item.since}: {item.what} ({item.why}); move off: {item.move}"
        for item in stage_unpatched(stage, today)
    ]
