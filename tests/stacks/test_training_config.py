"""Training config: the SMP reference layouts load; layouts that cannot run fail at synth with the field named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stacks.config import TrainingConfig


def training(**fields) -> TrainingConfig:
    return TrainingConfig.model_validate(fields)


ACCEPTED = [
    ("GPT-J TP 8 on p4d (the tensor-parallel reference, the default)", {}),
    ("pipeline parallel 8 with 2 microbatches (the PP notebook)",
     dict(smp={"tensor_parallel_degree": 1, "pipeline_parallel_degree": 8, "microbatches": 2, "optimize": "memory", "offload_activations": True})),
    ("TP 8 on g5.48xlarge", dict(instance_type="ml.g5.48xlarge")),
    ("two p4d hosts: TP 8 x data parallel 2", dict(instance_count=2)),
    ("bf16 on A100", dict(precision="bf16")),
    ("SMP v2 hybrid sharding over 8 GPUs in bf16", dict(precision="bf16", smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8})),
]  # fmt: skip


@pytest.mark.parametrize("fields", [r[1] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED])
def test_accepts_the_reference_layouts(fields):
    assert training(**fields).fit().fits


REJECTED = [
    ("more processes than GPUs", dict(instance_type="ml.g5.12xlarge", processes_per_host=8, smp={"tensor_parallel_degree": 4}),
     r"processes_per_host 8 is more than the 4 GPU\(s\) of ml\.g5\.12xlarge"),
    ("TP x PP not dividing the processes", dict(smp={"tensor_parallel_degree": 3}),
     r"smp\.tensor_parallel_degree x smp\.pipeline_parallel_degree = 3 does not divide the 8 processes"),
    ("TP without ddp", dict(smp={"ddp": False}), r"tensor_parallel_degree > 1 needs smp\.ddp: true"),
    ("batch not divisible by microbatches", dict(train_batch_size=6, smp={"tensor_parallel_degree": 1, "pipeline_parallel_degree": 8, "microbatches": 4}),
     r"train_batch_size 6 is not divisible by smp\.microbatches 4"),
    ("bf16 on V100", dict(instance_type="ml.p3.16xlarge", precision="bf16"), r"precision bf16 needs A100/H100-class"),
    ("fp16 and bf16 together", dict(precision="fp16+bf16"), r"Input should be 'fp16', 'bf16' or 'fp32'"),
    ("SMP v2 tensor parallelism on GPT-J", dict(precision="bf16", smp={"version": 2, "tensor_parallel_degree": 8}),
     r"SMP v2 has no tensor parallelism for GPT-J"),
    ("SMP v2 in fp16", dict(smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8}), r"SMP v2 \(FSDP\) trains in bf16 or fp32"),
    ("SMP v1 on p5", dict(instance_type="ml.p5.48xlarge"), r"SMP v1 does not support p5 instances"),
    ("sharded data parallelism", dict(smp={"tensor_parallel_degree": 2, "sharded_data_parallel_degree": 4}),
     r"SMP v1 then writes only partial shards"),
    ("delayed init over pretrained weights", dict(smp={"delayed_parameter_initialization": True}), r"over the pretrained ones"),
    ("optimizer state that does not fit", dict(smp={"tensor_parallel_degree": 1, "shard_optimizer_state": False}),
     r"gpt-j-6b training does not fit ml\.p4d\.24xlarge \(8 x A100 40 GB\).*estimated 93\.6 GiB of 36\.0 GiB usable per GPU \(weights, gradients and optimizer 90\.2"),
    ("validation batch not divisible by microbatches (train.py's own check)", dict(val_batch_size=3, smp={"microbatches": 2}),
     r"train\.py would refuse to start: --val_batch_size \(3\) is not divisible by mp_parameters microbatches \(2\)"),
    ("unknown SMP key", dict(smp={"partitions": 2}), r"Extra inputs are not permitted"),
    ("bad subnet id", dict(vpc={"subnet_ids": ["subnet-xyz"], "security_group_ids": ["sg-0123456789abcdef0"]}), r"should match pattern"),
    ("processing instance type", dict(processing_instance_type="m5.2xlarge"), r"should match pattern"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("fields", "message"), [(r[1], r[2]) for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejects_layouts_that_cannot_run(fields, message):
    with pytest.raises(ValidationError, match=message):
        training(**fields)


def test_data_parallel_degree_follows_the_world_size():
    assert training(instance_count=2).data_parallel_degree == 2
    assert training(smp={"tensor_parallel_degree": 4}).data_parallel_degree == 2
