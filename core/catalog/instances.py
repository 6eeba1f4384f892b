"""The SageMaker GPU instance types this project supports, and what it needs to know about each.

GPU counts and memory agree with the SageMaker SDK's `instance_gpu_info.json` where the SDK lists the type, and
`volume_size_supported` with its `volume_size_supported()` rule (a test checks both). The SDK does not list g6/g6e,
and knows nothing of prices or EFA, so this table is the one home for all of it.

Host memory (GiB of instance RAM, what every process of a job or an endpoint shares) is as AWS publishes it for
each size: the SageMaker HyperPod CLI's instance table (aws/sagemaker-hyperpod-cli,
src/sagemaker/hyperpod/training/quota_allocation_util.py, INSTANCE_RESOURCES: p4d/p4de 1152, p5 2048, g5, g6, g6e)
and the EC2 instance type pages (https://aws.amazon.com/ec2/instance-types/p3/, .../g4/: p3.16xlarge 488,
p3dn.24xlarge 768, g4dn; as torchx tabulates them in torchx/specs/named_resources_aws.py), which SageMaker's ml.*
types share (https://aws.amazon.com/sagemaker/pricing/).

Prices are reference on-demand rates for SageMaker real-time inference in us-east-1, in USD per instance-hour,
rounded; they differ by region and change over time. They feed the cost lines of the plan, never a decision.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    model: str
    memory_gib: int  # per GPU, as sold
    bf16: bool  # Ampere or newer: bf16 matmuls in hardware


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu: Gpu
    gpu_count: int
    volume_size_supported: bool  # False where storage is instance-local NVMe: no VolumeSizeInGB, no KmsKeyId
    efa: bool  # Elastic Fabric Adapter: the FI_PROVIDER=efa MPI options only make sense here
    hourly_usd: float
    host_memory_gib: int  # instance RAM, shared by every process on the instance

    @property
    def gpus(self) -> str:
        """`8 x A100 40 GB`"""
        return f"{self.gpu_count} x {self.gpu.model} {self.gpu.memory_gib} GB"

    @property
    def total_gpu_memory_gib(self) -> int:
        return self.gpu.memory_gib * self.gpu_count


V100_16 = Gpu("V100", 16, bf16=False)
V100_32 = Gpu("V100", 32, bf16=False)
T4 = Gpu("T4", 16, bf16=False)
A10G = Gpu("A10G", 24, bf16=True)
L4 = Gpu("L4", 24, bf16=True)
L40S = Gpu("L40S", 48, bf16=True)
A100_40 = Gpu("A100", 40, bf16=True)
A100_80 = Gpu("A100", 80, bf16=True)
H100 = Gpu("H100", 80, bf16=True)


def _family(
    prefix: str, gpu: Gpu, sizes: dict[str, tuple[int, float, int]], *, volume: bool, efa_sizes: set[str]
) -> list[InstanceType]:
    """sizes: size -> (GPUs, price, host memory GiB)."""
    return [
        InstanceType(f"ml.{prefix}.{size}", gpu, count, volume, size in efa_sizes, price, memory)
        for size, (count, price, memory) in sizes.items()
    ]


_LARGE = {"8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"}

_ALL = [
    InstanceType(
        "ml.p3.16xlarge", V100_16, 8, volume_size_supported=True, efa=False, hourly_usd=28.152, host_memory_gib=488
    ),
    InstanceType(
        "ml.p3dn.24xlarge", V100_32, 8, volume_size_supported=False, efa=True, hourly_usd=35.894, host_memory_gib=768
    ),
    InstanceType(
        "ml.p4d.24xlarge", A100_40, 8, volume_size_supported=False, efa=True, hourly_usd=37.688, host_memory_gib=1152
    ),
    InstanceType(
        "ml.p4de.24xlarge", A100_80, 8, volume_size_supported=False, efa=True, hourly_usd=47.110, host_memory_gib=1152
    ),
    InstanceType(
        "ml.p5.48xlarge", H100, 8, volume_size_supported=False, efa=True, hourly_usd=113.070, host_memory_gib=2048
    ),
    *_family(
        "g4dn",
        T4,
        {
            "xlarge": (1, 0.736, 16),
            "2xlarge": (1, 1.053, 32),
            "4xlarge": (1, 1.686, 64),
            "8xlarge": (1, 3.046, 128),
            "12xlarge": (4, 5.477, 192),
            "16xlarge": (1, 6.093, 256),
        },
        volume=False,
        efa_sizes={"8xlarge", "12xlarge", "16xlarge"},
    ),
    *_family(
        "g5",
        A10G,
        {
            "xlarge": (1, 1.408, 16),
            "2xlarge": (1, 1.515, 32),
            "4xlarge": (1, 2.030, 64),
            "8xlarge": (1, 3.060, 128),
            "12xlarge": (4, 7.090, 192),
            "16xlarge": (1, 5.120, 256),
            "24xlarge": (4, 10.180, 384),
            "48xlarge": (8, 20.360, 768),
        },
        volume=False,
        efa_sizes=_LARGE,
    ),
    *_family(
        "g6",
        L4,
        {
            "xlarge": (1, 1.006, 16),
            "2xlarge": (1, 1.222, 32),
            "4xlarge": (1, 1.654, 64),
            "8xlarge": (1, 2.518, 128),
            "12xlarge": (4, 5.752, 192),
            "16xlarge": (1, 4.246, 256),
            "24xlarge": (4, 8.344, 384),
            "48xlarge": (8, 16.688, 768),
        },
        volume=False,
        efa_sizes=_LARGE,
    ),
    *_family(
        "g6e",
        L40S,
        {
            "xlarge": (1, 2.326, 32),
            "2xlarge": (1, 2.803, 64),
            "4xlarge": (1, 3.755, 128),
            "8xlarge": (1, 5.661, 256),
            "12xlarge": (4, 13.116, 384),
            "16xlarge": (1, 9.471, 512),
            "24xlarge": (4, 18.833, 768),
            "48xlarge": (8, 37.664, 1536),
        },
        volume=False,
        efa_sizes=_LARGE,
    ),
]

INSTANCE_TYPES: dict[str, InstanceType] = {i.name: i for i in _ALL}


def instance_type(name: str) -> InstanceType:
    """The catalog entry for `name`; a KeyError that lists the supported types otherwise."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        raise KeyError(
            f"{name!r} is not a supported GPU instance type; supported: {', '.join(INSTANCE_TYPES)}"
        ) from None
