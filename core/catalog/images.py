"""Container images, resolved offline.

Training and processing images come from the SageMaker SDK's own image_uris tables (nothing newer exists for them
than the pinned SDK knows). The LMI images the endpoints run are chosen here (SERVING_IMAGES) and addressed through
the DLC registry table of core/catalog/dlc.py, generated from the same SDK tables but not limited to the tags the
SDK release knows: a newer LMI resolves in every region and partition its registry serves. Which regions have each
image differs (core/region_support.py checks a stage's region against the images it needs, with
`supported_regions`), and the processing image depends on the instance type's family (`processing_instance_problem`).
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

from core import synth_cache
from core.catalog import dlc

# The SMP v1 line ends at SMP 1.15 in the PyTorch 1.13.1 DLC (Python 3.9): aws/sagemaker-python-sdk@v2.199.0
# doc/api/training/smd_model_parallel_release_notes/smd_model_parallel_change_log.rst.
SMP_V1_PYTORCH_VERSION = "1.13.1"
SMP_V1_PY_VERSION = "py39"
# SMP v2 runs in its own smdistributed-modelparallel images; PyTorch 2.4.1 is SMP 2.7.0
# (https://docs.aws.amazon.com/sagemaker/latest/dg/model-parallel-release-notes.html).
SMP_V2_PYTORCH_VERSION = "2.4.1"
SMP_V2_PY_VERSION = "py311"


@dataclass(frozen=True)
class LmiImage:
    """One LMI release of the djl-inference repository an engine runs in."""

    engine: str
    tag: str
    description: str
    cuda: tuple[int, int]  # the CUDA toolkit it is built with: the host driver must run it (inference_hosts.py)
    # The oldest GPU architecture (compute capability) its kernels are built for; None: no limit this project knows.
    min_compute_capability: tuple[int, int] | None = None
    # For a tag newer than the SDK's tables: the published tag whose regions it goes to (dlc.image_uri).
    regions_of: str | None = None
    repository: str = "djl-inference"
    # The versions of the libraries that read a model folder in this image (transformers, tokenizers): staging
    # refuses weights they cannot read (training/finetune/compatibility.py). Empty: none this project checks.
    folder_readers: tuple[tuple[str, str], ...] = ()

    @property
    def cuda_version(self) -> str:
        return f"{self.cuda[0]}.{self.cuda[1]}"


SERVING_IMAGES = {
    # The last LMI with the DeepSpeed engine (LMI V9; V10, 0.28.0, dropped DeepSpeed): deepjavalibrary/djl-serving
    # serving/docs/lmi/announcements/deepspeed-deprecation.md.
    # Its transformers and tokenizers: requirements/images/lmi-0.27.txt, the image's record (a test keeps them equal).
    "deepspeed": LmiImage(
        "deepspeed",
        "0.27.0-deepspeed0.12.6-cu121",
        "LMI 0.27.0: DeepSpeed 0.12.6",
        (12, 1),
        folder_readers=(("transformers", "4.39.0"), ("tokenizers", "0.15.2")),
    ),
    # The newest LMI as of 2026-12-01: LMI 29.0.0 on DJL Serving 0.38.0, vLLM 0.28.0, torch 2.13.0, CUDA 13.0,
    # published 2026-09-21 (aws/deep-learning-containers#6763, #6774; the SDK's djl-lmi "latest"). LMI builds its vLLM
    # wheel for sm_80 and newer (deepjavalibrary/djl-serving#3054), and CUDA 13 has no Volta (sm_70) at all.
    "vllm": LmiImage(
        "vllm",
        "0.38.0-lmi29.0.0-cu130",
        "LMI 29.0.0: DJL Serving 0.38.0, vLLM 0.28.0",
        (13, 0),
        min_compute_capability=(8, 0),
    ),
}


# The instance-type rules of the SDK's image lookup (processor by family, deprecated families) are the same in every
# region; they are asked of one region that has the PyTorch 1.13.1 images.
REFERENCE_REGION = "us-east-1"


@cache
@synth_cache.on_disk  # a lookup needs the SDK imported (2 s): a synth with every lookup cached never imports it
def _retrieve(**kwargs: str) -> str:
    with _sdk_tables() as image_uris:
        return image_uris.retrieve(**kwargs)


@cache
def _sdk_table_readers() -> tuple[Callable, Callable]:
    from sagemaker import image_uris, utils  # deferred: the SDK takes seconds to import; cached lookups never need it

    return cache(image_uris.config_for_framework), cache(utils._botocore_resolver)


@contextlib.contextmanager
def _sdk_tables() -> Iterator:
    """The SDK's image_uris module, reading each of its JSON tables once per process: it re-reads the framework's
    table and botocore's endpoint list on every lookup (0.1 s each), which checking a region against every image
    repeats dozens of times. The tables are only read, never changed."""
    # The SDK logs its config-file search at INFO and warns about v2's deprecation on import; neither is news here.
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    from sagemaker import image_uris, utils  # deferred: as in _sdk_table_readers

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


def processing_image(region: str, instance_type: str, smp_version: int = 1) -> str:
    """The image a processing step runs in: the PyTorch 1.13.1 image (CPU or GPU build, by instance type) beside
    SMP v1, and the weights-staging steps whatever the version (the default); beside SMP v2 (and the adapter methods,
    which run in its image) the SMP v2 training image itself, whose Python 3.11 line of the lock (transformers 4.46)
    reads the current models' configs and tokenizers and the folders its training jobs write, where 1.13.1's
    transformers 4.21 cannot."""
    if smp_version == 2:
        return training_image(region, 2)
    return _retrieve(
        framework="pytorch",
        region=region,
        version=SMP_V1_PYTORCH_VERSION,
        py_version=SMP_V1_PY_VERSION,
        instance_type=instance_type,
        image_scope="training",
    )


def lmi_image(engine: str) -> LmiImage:
    try:
        return SERVING_IMAGES[engine]
    except KeyError:
        raise ValueError(f"unknown serving engine {engine!r}; expected one of {', '.join(SERVING_IMAGES)}") from None


def serving_image(region: str, engine: str) -> str:
    """The LMI image of an engine in `region` (SERVING_IMAGES), from the DLC registry table."""
    image = lmi_image(engine)
    return dlc.image_uri(region, image.repository, image.tag, regions_of=image.regions_of)


@dataclass(frozen=True)
class ImageUri:
    """An ECR image URI taken apart: what an IAM statement needs to allow pulling it."""

    account: str
    region: str
    repository: str
    tag: str

    @classmethod
    def parse(cls, uri: str) -> ImageUri:
        # Any ECR hostname: amazonaws.com, amazonaws.com.cn, and the ISO partitions' own suffixes (c2s.ic.gov, ...).
        match = re.fullmatch(r"(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.[a-z0-9.-]+/([^:@]+)[:@](.+)", uri)
        if not match:
            raise ValueError(f"{uri!r} is not an ECR image URI (<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>)")
        return cls(*match.groups())

    def repository_arn(self, partition: str) -> str:
        return f"arn:{partition}:ecr:{self.region}:{self.account}:repository/{self.repository}"
