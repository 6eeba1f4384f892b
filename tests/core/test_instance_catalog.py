"""The instance catalog agrees with the SageMaker SDK wherever the SDK knows the instance type."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from sagemaker.utils import volume_size_supported

from core.catalog.instances import INSTANCE_TYPES, instance_type

REQUIRED = [
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5.48xlarge",
    "ml.p3.16xlarge",
    "ml.p3dn.24xlarge",
    *(f"ml.{family}.{size}" for family in ["g5", "g6", "g6e"] for size in ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"]),
]  # fmt: skip


def sdk_gpu_info() -> dict[str, dict]:
    return json.loads(resources.files("sagemaker").joinpath("image_uri_config/instance_gpu_info.json").read_text())[
        "us-east-1"
    ]


def test_catalog_covers_every_supported_instance_type():
    assert set(REQUIRED) <= set(INSTANCE_TYPES)


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_volume_support_matches_the_sdk_rule(name):
    assert instance_type(name).volume_size_supported == volume_size_supported(name)


def test_gpu_counts_and_memory_match_the_sdk_table():
    sdk = sdk_gpu_info()
    compared = 0
    for name, entry in INSTANCE_TYPES.items():
        if name not in sdk:
            continue  # g6/g6e and ml.g5.xlarge are not in the SDK's table
        compared += 1
        assert sdk[name]["Count"] == entry.gpu_count, name
        # The SDK lists usable MiB (ml.g5.48xlarge: 183104 of 196608); ours is the memory as sold.
        assert 0.9 <= sdk[name]["TotalGpuMemoryInMiB"] / (entry.total_gpu_memory_gib * 1024) <= 1.0, name
    assert compared >= 18


def test_p4d_has_eight_40gb_a100s_on_local_nvme_with_efa():
    p4d = instance_type("ml.p4d.24xlarge")
    assert (p4d.gpu_count, p4d.gpu.memory_gib, p4d.gpu.bf16) == (8, 40, True)
    assert (p4d.volume_size_supported, p4d.efa) == (False, True)


def test_unknown_instance_type_lists_the_supported_ones():
    with pytest.raises(KeyError, match=r"supported: ml\.p3\.16xlarge"):
        instance_type("ml.m5.large")


# Host memory as AWS publishes it: the SageMaker HyperPod CLI's instance table
# (aws/sagemaker-hyperpod-cli:src/sagemaker/hyperpod/training/quota_allocation_util.py) and the EC2 P3/G4 pages.
HOST_MEMORY_GIB = {
    "ml.p3.16xlarge": 488, "ml.p3dn.24xlarge": 768, "ml.p4d.24xlarge": 1152, "ml.p4de.24xlarge": 1152,
    "ml.p5.48xlarge": 2048, "ml.g4dn.12xlarge": 192, "ml.g5.2xlarge": 32, "ml.g5.12xlarge": 192,
    "ml.g5.24xlarge": 384, "ml.g5.48xlarge": 768, "ml.g6.48xlarge": 768, "ml.g6e.xlarge": 32, "ml.g6e.48xlarge": 1536,
}  # fmt: skip


@pytest.mark.parametrize(("name", "gib"), sorted(HOST_MEMORY_GIB.items()))
def test_host_memory_is_the_published_size(name, gib):
    assert instance_type(name).host_memory_gib == gib


def test_every_instance_type_states_its_host_memory():
    for entry in INSTANCE_TYPES.values():
        # Every size of these families has 4, 8 or 16 GiB per vCPU; at least 16 GiB on the smallest.
        assert entry.host_memory_gib >= 16 and entry.host_memory_gib % 16 in (0, 8), entry.name


def test_the_catalog_types_sagemaker_does_not_offer_for_a_use_are_known():
    """The API-limit rules refuse these at synth (core/api_limits/rules.py); the list moves only with botocore."""
    from core.api_limits import aws_tables

    def offered(member: str) -> set[str]:
        constraint = aws_tables.constraint(member)
        return set(constraint.enum or constraint.member.enum)

    catalog = set(INSTANCE_TYPES)
    assert catalog - offered("sagemaker:CreateTrainingJob:ResourceConfig.InstanceType") == set()
    assert catalog - offered("sagemaker:CreateEndpointConfig:ProductionVariants.InstanceType") == {"ml.p3dn.24xlarge"}
    assert catalog - offered(
        "sagemaker:CreateModelPackage:InferenceSpecification.SupportedRealtimeInferenceInstanceTypes"
    ) == {"ml.p3dn.24xlarge"}
    assert catalog - offered("sagemaker:CreateProcessingJob:ProcessingResources.ClusterConfig.InstanceType") == {
        "ml.p3dn.24xlarge",
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
        "ml.p5.48xlarge",
    }
