"""Container images, resolved offline from the SageMaker SDK's own image_uris config.

No account id or registry is typed by hand here: the SDK's tables cover every region and partition the SDK serves.
Which regions those are differs by image (stacks/region_support.py checks a stage's region against the images it
needs, with `supported_regions`), and the processing image depends on the instance type's family
(`processing_instance_problem`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from unittest import mock

# The SMP v1 line ends at SMP 1.15 in the PyTorch 1.13.1 DLC (Python 3.9); research/smp_training.md §1.
SMP_V1_PYTORCH_VERSION = "1.13.1"
SMP_V1_PY_VERSION = "py39"
# SMP v2 runs in its own smdistributed-modelparallel images; PyTorch 2.4.1 is SMP 2.7.0 (research/smp_training.md §3).
SMP_V2_PYTORCH_VERSION = "2.4.1"
SMP_V2_PY_VERSION = "py311"
# The last LMI image with the DeepSpeed engine; research/lmi_serving.md §3.
DEEPSPEED_LMI_VERSION = "0.27.0"
# Current LMI for the vLLM engine: 0.35.0 (LMI 17, CUDA 12.8) is the first where async vLLM mode is the default,
# which model_artifacts/vllm/serving.properties uses; 0.36+ need CUDA 13 drivers on the host.
VLLM_LMI_VERSION = "0.35.0"


# The instance-type rules of the SDK's image lookup (processor by family, deprecated families) are the same in every
# region; they are asked of one region that has the PyTorch 1.13.1 images.
REFERENCE_REGION = "us-east-1"


@cache
def _retrieve(**kwargs: str) -> str:
    with _sdk_tables() as image_uris:
        return image_uris.retrieve(**kwargs)


@cache
def _sdk_table_readers() -> tuple[Callable, Callable]:
    from sagemaker import image_uris, utils

    return cache(image_uris.config_for_framework), cache(utils._botocore_resolver)


@contextlib.contextmanager
def _sdk_tables() -> Iterator:
    """The SDK's image_uris module, reading each of its JSON tables once per process: it re-reads the framework's
    table and botocore's endpoint list on every lookup (0.1 s each), which checking a region against every image
    repeats dozens of times. The tables are only read, never changed."""
    # The SDK logs its config-file search at INFO and warns about v2's deprecation on import; neither is news here.
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    from sagemaker import image_uris, utils

    config_for_framework, botocore_resolver = _sdk_table_readers()
    with (
        mock.patch.object(image_uris, "config_for_framework", config_for_framework),
        mock.patch.object(utils, "_botocore_resolver", botocore_resolver),
    ):
        yield image_uris


def supported_regions(lookup: Callable[[str], str], regions: Iterable[str]) -> list[str]:
    """The regions among `regions` where `lookup` (one of the functions below, given the region) finds the image:
    the SDK's own lookup, made for each region, so the answer is exactly what synth would do there."""
    found = []
    for region in regions:
        try:
            lookup(region)
        except (ValueError, KeyError, TypeError):  # no registry, or no ECR endpoint, for the region
            continue
        found.append(region)
    return found


def processing_instance_problem(instance_type: str) -> str | None:
    """Why the SDK has no processing image (PyTorch 1.13.1) for `instance_type`, or None when it has one."""
    try:
        processing_image(REFERENCE_REGION, instance_type)
    except ValueError as error:
        return str(error).split(". You may need to upgrade", 1)[0].split("For information about", 1)[0].strip()
    return None


def training_framework(smp_version: int) -> tuple[str, str]:
    """(PyTorch version, Python version) of the training container for an SMP version."""
    if smp_version == 1:
        return SMP_V1_PYTORCH_VERSION, SMP_V1_PY_VERSION
    return SMP_V2_PYTORCH_VERSION, SMP_V2_PY_VERSION


def training_image(region: str, smp_version: int = 1) -> str:
    """The training container: the PyTorch 1.13.1 DLC that ships SMP v1 1.15, or SMP v2's own image.

    The same lookup the SDK's PyTorch estimator makes for the pipeline's Train step (a test checks they agree).
    """
    framework_version, py_version = training_framework(smp_version)
    if smp_version == 1:
        return _retrieve(
            framework="pytorch",
            region=region,
            version=framework_version,
            py_version=py_version,
            instance_type="ml.p4d.24xlarge",
            image_scope="training",
        )
    return _retrieve(
        framework="pytorch-smp",
        region=region,
        version=framework_version,
        py_version=py_version,
        instance_type="ml.p4d.24xlarge",
        image_scope="training",
        container_version="cu121",
    )


def processing_image(region: str, instance_type: str) -> str:
    """The PyTorch 1.13.1 image (CPU or GPU build, by instance type) the prepare and evaluate steps run in."""
    return _retrieve(
        framework="pytorch",
        region=region,
        version=SMP_V1_PYTORCH_VERSION,
        py_version=SMP_V1_PY_VERSION,
        instance_type=instance_type,
        image_scope="training",
    )


def serving_image(region: str, engine: str) -> str:
    """The LMI image for an engine: 'deepspeed' (djl-inference 0.27.0, DeepSpeed 0.12.6) or 'vllm' (current LMI)."""
    if engine == "deepspeed":
        return _retrieve(framework="djl-deepspeed", region=region, version=DEEPSPEED_LMI_VERSION)
    if engine == "vllm":
        return _retrieve(framework="djl-lmi", region=region, version=VLLM_LMI_VERSION)
    raise ValueError(f"unknown serving engine {engine!r}; expected deepspeed or vllm")


@dataclass(frozen=True)
class ImageUri:
    """An ECR image URI taken apart: what an IAM statement needs to allow pulling it."""

    account: str
    region: str
    repository: str
    tag: str

    @classmethod
    def parse(cls, uri: str) -> ImageUri:
        match = re.fullmatch(r"(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([^:@]+)[:@](.+)", uri)
        if not match:
            raise ValueError(f"{uri!r} is not an ECR image URI (<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>)")
        return cls(*match.groups())

    def repository_arn(self, partition: str) -> str:
        return f"arn:{partition}:ecr:{self.region}:{self.account}:repository/{self.repository}"
