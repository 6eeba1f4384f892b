"""Serving images: chosen here, addressed through one DLC registry table that covers every partition and is what the
pinned SDK's tables say; a CUDA 13 image gets the host AMI it needs, and synth refuses hosts it cannot start on."""

from __future__ import annotations

import importlib.util
import re

import botocore.session
import pytest
from packaging.version import Version

from core.catalog import dlc, images, inference_hosts
from core.catalog.images import ImageUri, LmiImage
from core.catalog.instances import INSTANCE_TYPES
from core.config import ServingConfig
from tests.cdk_assembly import REPO

VLLM_TAG = "0.38.0-lmi29.0.0-cu130"
DEEPSPEED_TAG = "0.27.0-deepspeed0.12.6-cu121"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "generate_dlc_registries", REPO / "scripts/generate_dlc_registries.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_registry_table_is_what_the_generator_makes_from_the_installed_sdk():
    generator = _generator()
    assert generator.render(generator.build()) == dlc.TABLE.read_text()


@pytest.mark.parametrize(
    ("region", "partition", "registry"),
    [
        ("us-east-1", "aws", "763104351884.dkr.ecr.us-east-1.amazonaws.com"),
        ("af-south-1", "aws", "626614931356.dkr.ecr.af-south-1.amazonaws.com"),
        ("cn-northwest-1", "aws-cn", "727897471807.dkr.ecr.cn-northwest-1.amazonaws.com.cn"),
        ("us-gov-east-1", "aws-us-gov", "446045086412.dkr.ecr.us-gov-east-1.amazonaws.com"),
    ],
)
def test_both_engines_resolve_in_every_partition_with_a_pullable_repository_arn(region, partition, registry):
    for engine, tag in (("deepspeed", DEEPSPEED_TAG), ("vllm", VLLM_TAG)):
        uri = images.serving_image(region, engine)
        assert uri == f"{registry}/djl-inference:{tag}"
        account = registry.split(".", 1)[0]
        arn = ImageUri.parse(uri).repository_arn(partition)
        assert arn == f"arn:{partition}:ecr:{region}:{account}:repository/djl-inference"


def test_tags_the_sdk_knows_resolve_exactly_as_the_sdk_resolves_them_wherever_it_has_them():
    for engine, framework, version in (("deepspeed", "djl-deepspeed", "0.27.0"), ("vllm", "djl-lmi", "0.38.0")):
        image = images.lmi_image(engine)
        regions = dlc.published_regions(image.repository, image.tag)
        assert len(regions) >= 30
        for region in sorted(regions):
            sdk = images._retrieve(framework=framework, region=region, version=version)
            assert images.serving_image(region, engine) == sdk, region


def test_the_vllm_image_is_not_older_than_the_newest_lmi_the_pinned_sdk_knows():
    """The SDK's table may lag (it is bumped in place, release by release); it must never lead."""
    sdk_tags = [t for t in dlc._table()["published"]["djl-inference"] if "-lmi" in t]

    def release(tag: str) -> tuple[Version, Version]:
        djl, lmi = re.fullmatch(r"(\d+\.\d+\.\d+)-lmi(\d+\.\d+\.\d+)-cu\d+", tag).groups()
        return Version(lmi), Version(djl)

    assert release(images.lmi_image("vllm").tag) >= max(release(t) for t in sdk_tags)


def test_a_tag_newer_than_the_sdk_resolves_in_every_partition_with_the_regions_of_the_release_before():
    newer = "0.39.0-lmi30.0.0-cu130"
    for region, host in (
        ("eu-west-1", "763104351884.dkr.ecr.eu-west-1.amazonaws.com"),
        ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn"),
        ("us-gov-west-1", "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com"),
    ):
        assert dlc.image_uri(region, "djl-inference", newer, regions_of=VLLM_TAG) == f"{host}/djl-inference:{newer}"
    with pytest.raises(ValueError, match=r"djl-inference:0\.39\.0-lmi30\.0\.0-cu130 is not published in ap-east-2"):
        dlc.image_uri("ap-east-2", "djl-inference", newer, regions_of=VLLM_TAG)
    with pytest.raises(KeyError, match=r"name the published tag whose regions it shares"):
        dlc.image_uri("eu-west-1", "djl-inference", newer)


def test_a_region_without_a_dlc_registry_is_refused_naming_the_regions_that_have_one():
    with pytest.raises(ValueError) as error:
        images.serving_image("eusc-de-east-1", "vllm")
    message = str(error.value)
    assert message.startswith("eusc-de-east-1 has no AWS Deep Learning Containers registry (sagemaker 2.257.7 ")
    assert "us-gov-west-1" in message.rsplit(": ", 1)[1].split(", ")


def test_the_cuda_13_image_gets_the_ami_whose_driver_runs_it_and_cuda_12_keeps_the_default():
    assert ServingConfig(engine="vllm").inference_ami_version == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert ServingConfig(engine="deepspeed").inference_ami_version is None
    newer_cuda = LmiImage("vllm", "x-cu140", "a CUDA 14 build", (14, 0))
    with pytest.raises(ValueError, match=r"built with CUDA 14\.0, which no SageMaker inference AMI"):
        inference_hosts.required_ami(newer_cuda)


def test_the_ami_is_one_the_api_accepts_with_the_driver_and_cuda_botocore_documents():
    model = botocore.session.get_session().get_service_model("sagemaker")
    ami = inference_hosts.CUDA_13_AMI
    assert ami.name in model.shape_for("ProductionVariantInferenceAmiVersion").enum
    doc = model.shape_for("ProductionVariant").members["InferenceAmiVersion"].documentation
    section = doc.split(f"<dt>{ami.name}</dt>", 1)[1].split("</dd>", 1)[0]
    assert f"NVIDIA driver version: {ami.driver}" in section
    assert f"CUDA version: {ami.cuda[0]}.{ami.cuda[1]}" in section


def test_every_cataloged_gpu_has_a_compute_capability():
    assert {i.gpu.model for i in INSTANCE_TYPES.values()} <= set(inference_hosts.COMPUTE_CAPABILITY)


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("instance_type", "reason"),
    [
        (
            "ml.p3.16xlarge",
            "needs the inference AMI al2023-ami-sagemaker-inference-gpu-4-1 (NVIDIA driver 580, CUDA 13.0), which "
            "SageMaker does not offer on ml.p3 instances",
        ),
        (
            "ml.g4dn.12xlarge",
            "is built for GPUs of compute capability 8.0 and newer; the T4 GPUs of ml.g4dn.12xlarge are 7.5",
        ),
    ],
)
def test_vllm_on_a_host_its_image_cannot_start_on_is_refused_with_the_reason_and_the_families_that_work(
    instance_type, reason
):
    with pytest.raises(ValueError) as error:
        ServingConfig(engine="vllm", instance_type=instance_type, tensor_parallel_degree=2)
    message = str(error.value)
    assert f"instance_type {instance_type} with engine vllm: {VLLM_TAG} (LMI 29.0.0: " in message
    assert reason in message
    assert "use an instance type of ml.g5, ml.g6, ml.g6e, ml.p4d, ml.p4de, ml.p5, or engine deepspeed" in message
    # The reference engine runs there: its CUDA 12.1 image needs no AMI and has no architecture floor.
    assert ServingConfig(engine="deepspeed", instance_type=instance_type, tensor_parallel_degree=2)
