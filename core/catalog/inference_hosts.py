"""What a SageMaker endpoint instance must offer an LMI image: a host driver that runs the image's CUDA, and GPUs the
image's kernels are built for. Synth refuses a combination SageMaker would start and the container would not.

Host drivers (https://docs.aws.amazon.com/sagemaker/latest/dg/inference-gpu-drivers.html): without an
InferenceAmiVersion, real-time endpoints get NVIDIA 470 (CUDA 11.4) on ml.p3, p4d, p4de, g4dn and g5, 535 (CUDA 12.2)
on ml.p5 and g6, 550 (CUDA 12.4) on ml.p5e and p5en. The LMI images carry NVIDIA's CUDA compat package and put it on
the library path when the driver is older than their CUDA (djl-serving serving/docker/dockerd-entrypoint-with-cuda-
compat.sh), which is how the CUDA 12.1 DeepSpeed image runs on driver 470; a CUDA 13 image does not start on 470
("Do not use the default AMIs of ml.g5 and ml.g4dn (NVIDIA driver 470): they cannot start the CUDA 13 image",
aws-samples' SageMaker examples), so it gets the AMI with driver 580, which runs CUDA 13.0 natively.

AMI names, drivers and CUDA versions: botocore 1.44.8's sagemaker service model, ProductionVariantInferenceAmiVersion
and the InferenceAmiVersion documentation (a test checks the names against the enum). The instance families the
CUDA 13 AMI serves are the ones AWS's autogluon-cloud sets it for (src/autogluon/cloud/utils/dlc_utils.py,
_INFERENCE_AMI_INSTANCE_PREFIXES); ml.p3 and p3dn (V100) are not among them, and CUDA 13 has no Volta support anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.catalog.images import LmiImage


@dataclass(frozen=True)
class InferenceAmi:
    name: str  # ProductionVariant.InferenceAmiVersion
    driver: int  # NVIDIA driver branch
    cuda: tuple[int, int]  # the newest CUDA the driver runs natively
    families: tuple[str, ...]  # the instance families (ml.<family>.*) it runs on


CUDA_13_AMI = InferenceAmi(
    "al2023-ami-sagemaker-inference-gpu-4-1",
    580,
    (13, 0),
    ("g4dn", "g5", "g6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en"),
)
# By CUDA major version of the image: the AMI it needs. Absent: SageMaker's default for the instance type runs it
# (CUDA 12 images through their compat package, as above).
REQUIRED_AMI = {13: CUDA_13_AMI}

# Compute capability of each GPU of core/catalog/instances.py (https://developer.nvidia.com/cuda-gpus).
COMPUTE_CAPABILITY = {
    "V100": (7, 0),
    "T4": (7, 5),
    "A10G": (8, 6),
    "A100": (8, 0),
    "L4": (8, 9),
    "L40S": (8, 9),
    "H100": (9, 0),
}


def _version(pair: tuple[int, int]) -> str:
    return f"{pair[0]}.{pair[1]}"


def required_ami(image: LmiImage) -> InferenceAmi | None:
    """The InferenceAmiVersion the image needs on the production variant; None: the instance type's default."""
    major = image.cuda[0]
    if major > max(REQUIRED_AMI, default=12):
        raise ValueError(
            f"{image.tag} ({image.description}) is built with CUDA {image.cuda_version}, which no SageMaker inference "
            f"AMI this project knows runs (newest: {CUDA_13_AMI.name}, CUDA {_version(CUDA_13_AMI.cuda)})"
        )
    return REQUIRED_AMI.get(major)


def host_problem(image: LmiImage, instance_type: str, gpu_model: str) -> str | None:
    """Why `image` cannot serve on `instance_type` (whose GPUs are `gpu_model`), or None when it can."""
    family = instance_type.split(".")[1]
    ami = required_ami(image)
    where = f"{image.tag} ({image.description}; CUDA {image.cuda_version})"
    if ami is not None and family not in ami.families:
        runs_on = ", ".join(f"ml.{f}" for f in ami.families)
        return (
            f"{where} needs the inference AMI {ami.name} (NVIDIA driver {ami.driver}, CUDA {_version(ami.cuda)}), "
            f"which SageMaker does not offer on ml.{family} instances; it runs on {runs_on}"
        )
    needed = image.min_compute_capability
    have = COMPUTE_CAPABILITY[gpu_model]
    if needed is not None and have < needed:
        return (
            f"{where} is built for GPUs of compute capability {_version(needed)} and newer; the {gpu_model} GPUs of "
            f"{instance_type} are {_version(have)}, so its kernels would not load"
        )
    return None
