"""Training config: the SMP reference layouts load; layouts that cannot run fail at synth with the field named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.config import TrainingConfig


def training(**fields) -> TrainingConfig:
    return TrainingConfig.model_validate(fields)


ACCEPTED = [
    ("GPT-J TP 8 on p4d (the tensor-parallel reference, the default)", {}),
    ("pipeline parallel 8 with 2 microbatches (the PP notebook)",
     dict(smp={"tensor_parallel_degree": 1, "pipeline_parallel_degree": 8, "microbatches": 2, "optimize": "memory", "prescaled_batch": False, "offload_activations": True})),
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
    ("prescaled batch with optimize memory (SMP's own rule)", dict(smp={"tensor_parallel_degree": 1, "pipeline_parallel_degree": 8, "optimize": "memory"}),
     r'train\.py would refuse to start: mp_parameters prescaled_batch=true requires optimize="speed", but optimize is "memory"'),
    ("delayed init over pretrained weights", dict(smp={"delayed_parameter_initialization": True}), r"over the pretrained ones"),
    ("optimizer state that does not fit", dict(smp={"tensor_parallel_degree": 1, "shard_optimizer_state": False}),
     r"gpt-j-6b training does not fit ml\.p4d\.24xlarge \(8 x A100 40 GB\).*estimated 93\.6 GiB of 36\.0 GiB usable per GPU \(weights, gradients and optimizer 90\.2"),
    ("validation batch not divisible by microbatches (train.py's own check)", dict(val_batch_size=3, smp={"microbatches": 2}),
     r"train\.py would refuse to start: --val_batch_size \(3\) is not divisible by mp_parameters microbatches \(2\)"),
    ("unknown SMP key", dict(smp={"partitions": 2}), r"Extra inputs are not permitted"),
    ("pickles from whatever commit main has", dict(pretrained={"allow_pickle": True}),
     r"pretrained\.allow_pickle: pickles are accepted from EleutherAI/gpt-j-6b without a pinned commit.*set training\.pretrained\.revision to the 40-hex commit"),
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


@pytest.mark.bad_input("config")
def test_every_training_process_loading_the_whole_model_must_fit_host_memory(monkeypatch):
    # A 13B GPT-J shape (gptj: SMP v1 tensor parallelism) on g5.24xlarge hosts: the GPUs hold TP 4 with the optimizer
    # state sharded over 8 hosts and 4 sequences per step (20.5 of 21.6 GiB, the embedding and LM head whole on each),
    # but 4 processes x 2 fp32 copies of the model (96.9 GiB) do not fit 384 GiB of host memory.
    from core.catalog import models

    big = models.Model(
        adapters_summary="(a test model)",
        name="gpt-j-13b",
        hf_id="-",
        architecture="gptj",
        parameters=13_000_000_000,
        layers=40,
        hidden_size=5120,
        attention_heads=40,
        context_tokens=2048,
        vocab_size=50400,
    )
    monkeypatch.setitem(models.MODELS, "gpt-j-13b", big)
    fields = dict(
        model="gpt-j-13b",
        instance_type="ml.g5.24xlarge",
        instance_count=8,
        train_batch_size=4,
        smp={"tensor_parallel_degree": 4},
    )
    with pytest.raises(
        ValidationError,
        match=r"gpt-j-13b cannot load on ml\.g5\.24xlarge \(384 GiB of host memory\) with 4 processes per host: needs "
        r"399\.4 GiB of 345\.6 GiB usable per instance \(4 ranks x \(weights 96\.9 \+ process 3\.0\); every rank "
        r"builds the whole model and reads the whole state dict: two fp32 copies at most\); lower processes_per_host",
    ):
        training(**fields)
    assert training(**{**fields, "instance_type": "ml.g5.48xlarge", "processes_per_host": 4}).host_fit().fits


def test_the_reference_layout_loads_within_host_memory():
    host = training().host_fit()
    assert (host.ranks, round(host.weights_per_rank_gib, 1), host.fits) == (8, 45.1, True)


def test_the_smp_v1_transformers_pin_is_one_smp_v1_tensor_parallelizes():
    """train.py's own list (training/finetune/layout.py), checked against what training/requirements.txt pins for
    the SMP v1 image's Python 3.9: with another version SMP v1 silently trains GPT-J without tensor parallelism."""
    from core.training_job import TRAINING_REQUIREMENTS, pinned_version
    from training.finetune.layout import SMP_V1_TENSOR_PARALLEL_TRANSFORMERS

    assert pinned_version(TRAINING_REQUIREMENTS, "transformers", "3.9") in SMP_V1_TENSOR_PARALLEL_TRANSFORMERS


@pytest.mark.bad_input("config")
def test_synth_refuses_smp_v1_tensor_parallelism_with_an_unsupported_transformers_pin(tmp_path, monkeypatch):
    from core import training_job

    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        'transformers==4.28.1; python_version < "3.10"\ntransformers==4.46.3; python_version >= "3.10"\n'
    )
    monkeypatch.setattr(training_job, "TRAINING_REQUIREMENTS", requirements)
    message = (
        r"train\.py would refuse to start: mp_parameters tensor_parallel_degree is 8 but transformers is 4\.28\.1 "
        r"\(pinned in training/requirements\.txt for the training image's Python 3\.9\): SMP v1 replaces Hugging Face "
        r"models with its tensor-parallel modules only for transformers 4\.17\.0, 4\.20\.1, 4\.21\.0"
    )
    with pytest.raises(ValidationError, match=message):
        training()
    # Without tensor parallelism the pin does not matter to SMP, and SMP v2 reads the Python 3.11 line.
    assert training(smp={"tensor_parallel_degree": 1, "pipeline_parallel_degree": 8, "microbatches": 2})
    assert training(precision="bf16", smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8})


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('transformers>=4.21; python_version < "3.10"', r"transformers must be pinned exactly"),
        (
            'transformers==4.46.3; python_version >= "3.10"',
            r"must pin transformers exactly once for Python 3\.9, found none",
        ),
    ],
)
def test_synth_needs_an_exact_transformers_pin_for_the_smp_v1_image(tmp_path, monkeypatch, line, message):
    from core import training_job

    (tmp_path / "requirements.txt").write_text(line + "\n")
    monkeypatch.setattr(training_job, "TRAINING_REQUIREMENTS", tmp_path / "requirements.txt")
    with pytest.raises(ValidationError, match=message):
        training()


@pytest.mark.bad_input("config")
def test_synth_refuses_smp_v1_tensor_parallelism_with_optimize_memory():
    with pytest.raises(
        ValidationError, match=r"SMP v1's GPT-J state-dict translation .* supports only optimize=\"speed\""
    ):
        training(smp={"optimize": "memory", "prescaled_batch": False})


# What SageMaker or the job would refuse later, refused at synth with the field named (issue 14).
REFUSED_LATER = [
    ("spot wait shorter than the run time", dict(max_runtime_hours=24, spot={"enabled": True, "max_wait_hours": 12}),
     r"spot\.max_wait_hours: 12 h \(43200 s\) is less than max_runtime_hours 24 h \(86400 s\).*MaxWaitTimeInSeconds: "
     r"\"It must be equal to or greater than MaxRuntimeInSeconds"),
    ("run time past SageMaker's 28 days", dict(max_runtime_hours=673, spot={"max_wait_hours": 700}),
     r"max_runtime_hours: 673 h \(2422800 s\) is above 2419200 s \(28 days\)"),
    ("run time past the processing jobs' 9 days", dict(max_runtime_hours=217),
     r"max_runtime_hours: 217 h \(781200 s\) is above the maximum 777600, the limit of SageMaker CreateProcessingJob "
     r"StoppingCondition\.MaxRuntimeInSeconds.*the prepare, evaluate and weights-staging jobs"),
    ("a sequence longer than the model's context", dict(sequence_length=4096),
     r"sequence_length: 4096 is above the 2048-token context of gpt-j-6b \(train\.py refuses"),
    ("tensor parallelism dividing neither the heads nor the hidden size",
     dict(instance_type="ml.g5.48xlarge", processes_per_host=6, smp={"tensor_parallel_degree": 6}),
     r"smp\.tensor_parallel_degree 6 divides neither the 16 attention heads nor the hidden size 4096 of gpt-j-6b"),
    ("a sequence length SMP v1 cannot shard over the tensor-parallel ranks", dict(sequence_length=1020),
     r"sequence_length 1020 is not a multiple of smp\.tensor_parallel_degree 8.*InvalidSeqLenPrescaledBatchError"),
    ("a processing instance type that does not exist", dict(processing_instance_type="ml.m5.3xlarge"),
     r"processing_instance_type: 'ml\.m5\.3xlarge' is not one of the \d+ values it accepts \(did you mean ml\.m5\."
     r".*SageMaker CreateProcessingJob ProcessingResources\.ClusterConfig\.InstanceType"),
    ("an evaluation instance type processing jobs do not offer", dict(evaluate_instance_type="ml.p4d.24xlarge"),
     r"evaluate_instance_type: 'ml\.p4d\.24xlarge' is not one of the \d+ values it accepts"),
    ("a processing instance type the SDK has no image for", dict(processing_instance_type="ml.p2.xlarge"),
     r"processing_instance_type: the SageMaker SDK has no PyTorch 1\.13\.1 image for ml\.p2\.xlarge.*P2 instances have "
     r"been deprecated"),
    ("a seed torch cannot take", dict(seed=2**60), r"seed: 1152921504606846976 is outside what torch can seed"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("fields", "message"), [(r[1], r[2]) for r in REFUSED_LATER], ids=[r[0] for r in REFUSED_LATER]
)
def test_refuses_what_sagemaker_or_train_py_would_refuse_later(fields, message):
    with pytest.raises(ValidationError, match=message):
        training(**fields)


def test_accepts_the_limits_themselves():
    assert training(max_runtime_hours=216, spot={"enabled": True, "max_wait_hours": 216})
    assert training(
        sequence_length=2048, processing_instance_type="ml.c5.xlarge", evaluate_instance_type="ml.g6.xlarge"
    )
    assert training(smp={"tensor_parallel_degree": 4})  # divides GPT-J's 16 heads
