"""What an SMP v2 full fine-tuning job is told and sized for: the tensor parallel degree it was checked for reaches
SMP v2's mp_parameters (the SDK's estimator passes them on as the `mp_parameters` hyperparameter, which train.py and
torch.sagemaker read), and hybrid_shard_degree 0 is sized as SMP v2 runs it: sharded over every data-parallel rank
(distributed-model-parallel-v2-reference: FSDP's FULL_SHARD with tensor parallel degree 1, else the largest degree
that tensor parallelism leaves)."""

from __future__ import annotations

import json

import pytest

from core.config import ServingConfig, TrainingConfig
from core.naming import PipelineNames
from core.training_job import smp_parameters
from infrastructure.constructs.training_pipeline.finetune_pipeline import finetune_definition
from training.finetune.layout import parse_layout

GIB = 2**30
LLAMA_8B = 8_030_261_248  # Llama 3.1 8B's parameters (its config.json)
P4D = {"model": "llama-3.1-8b", "instance_type": "ml.p4d.24xlarge", "precision": "bf16", "train_batch_size": 8}


def training(**smp) -> TrainingConfig:
    return TrainingConfig.model_validate({**P4D, "smp": {"version": 2, **smp}})


def train_hyperparameters(config: TrainingConfig) -> dict:
    names = PipelineNames(finetune="p-dev-finetune", staging="p-dev-stage-weights", model_package_group="p-dev")
    definition = json.loads(
        finetune_definition(config, ServingConfig(), region="us-east-1", names=names, serving_image="lmi")
    )
    train = next(step for step in definition["Steps"] if step["Name"] == "Train")
    return {k: json.loads(v) if isinstance(v, str) else v for k, v in train["Arguments"]["HyperParameters"].items()}


def test_the_tensor_parallel_degree_reaches_the_smp_v2_job() -> None:
    config = training(tensor_parallel_degree=4, hybrid_shard_degree=2)
    assert smp_parameters(config)["tensor_parallel_degree"] == 4
    # What the SDK writes into the Train step, and what train.py (and SMP v2's tsm.init) read from it.
    mp_parameters = train_hyperparameters(config)["mp_parameters"]
    assert mp_parameters == {
        "tensor_parallel_degree": 4,
        "hybrid_shard_degree": 2,
        "sm_activation_offloading": False,
        "activation_loading_horizon": 4,
    }
    layout = parse_layout(mp_parameters)
    assert (layout.smp_version, layout.tensor_parallel_degree, layout.hybrid_shard_degree) == ("v2", 4, 2)


def test_hybrid_shard_degree_0_shards_over_every_gpu_without_tensor_parallelism_by_hand() -> None:
    config = training(tensor_parallel_degree=1)  # hybrid_shard_degree 0: FULL_SHARD over the 8 GPUs
    # bf16 weights and gradients, fp32 master weights and Adam's two moments: 16 bytes per parameter, over 8 GPUs.
    assert config.fit().model_states_gib == pytest.approx(LLAMA_8B * 16 / 8 / GIB)
    assert config.fit().model_states_gib == pytest.approx(
        training(tensor_parallel_degree=1, hybrid_shard_degree=8).fit().model_states_gib
    )
    assert round(config.fit().model_states_gib, 1) == 15.0 and config.fit().fits


def test_hybrid_shard_degree_0_with_tensor_parallelism_shards_over_what_it_leaves_by_hand() -> None:
    config = training(tensor_parallel_degree=2)  # 8 GPUs: 2-way tensor parallel, so sharded 4 ways
    assert config.fit().model_states_gib == pytest.approx(LLAMA_8B / 2 * 16 / 4 / GIB)
    assert round(config.fit().model_states_gib, 1) == 15.0


def test_a_shard_degree_within_what_tensor_parallelism_leaves_is_sized_by_hand() -> None:
    # 8 GPUs, 4-way tensor parallel: 2 data-parallel ranks, each holding a quarter of every layer, shard over 2.
    config = training(tensor_parallel_degree=4, hybrid_shard_degree=2)
    assert config.fit().model_states_gib == pytest.approx(LLAMA_8B / 4 * 16 / 2 / GIB)
    assert config.fit().model_states_gib == pytest.approx(training(tensor_parallel_degree=4).fit().model_states_gib)
    # hybrid_shard_degree 1 with tensor parallelism: NO_SHARD within each tensor-parallel group (the reference), every
    # state whole: SMP v1's shard_optimizer_state (on by default) is not an SMP v2 key.
    assert training(tensor_parallel_degree=4, hybrid_shard_degree=1).fit().model_states_gib == pytest.approx(
        LLAMA_8B / 4 * 16 / GIB
    )


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("smp", "message"),
    [
        # Sharded 8 ways on top of 8-way tensor parallelism would need 64 GPUs; the old estimate divided by 8 twice.
        (
            {"tensor_parallel_degree": 8, "hybrid_shard_degree": 8},
            r"smp\.hybrid_shard_degree 8 does not divide the 1 data-parallel ranks that smp\.tensor_parallel_degree 8 "
            r"leaves of the 8 processes: SMP v2 shards the model over those ranks \(each holding a tensor-parallel "
            r"slice\), so the degree must divide 1; use one of \[1\], or 0 for 1",
        ),
        (
            {"tensor_parallel_degree": 2, "hybrid_shard_degree": 8},
            r"smp\.hybrid_shard_degree 8 does not divide the 4 data-parallel ranks .*use one of \[1, 2, 4\], or 0 for 4",
        ),
        (
            {"tensor_parallel_degree": 1, "hybrid_shard_degree": 3},
            r"smp\.hybrid_shard_degree 3 does not divide the 8 processes: .*use one of \[1, 2, 4, 8\], or 0 for 8",
        ),
    ],
    ids=["tp 8 x hsd 8 on 8 GPUs", "tp 2 x hsd 8 on 8 GPUs", "hsd 3 on 8 GPUs"],
)
def test_refuses_shard_degrees_beyond_what_tensor_parallelism_leaves(smp, message) -> None:
    with pytest.raises(ValueError, match=message):
        training(**smp)


@pytest.mark.bad_input("config")
def test_a_layout_that_does_not_fit_is_told_smp_v2_remedies() -> None:
    # Llama 3.1 8B whole on each A100 40 GB (no sharding, no tensor parallelism): 16 bytes per parameter do not fit.
    with pytest.raises(ValueError) as refusal:
        training(tensor_parallel_degree=1, hybrid_shard_degree=1)
    message = str(refusal.value)
    assert "with tensor parallel 1 and hybrid_shard_degree 1: estimated" in message
    assert "shard over more GPUs (hybrid_shard_degree 0: every data-parallel GPU)" in message
    assert "shard_optimizer_state" not in message and "pipeline parallel" not in message  # SMP v1's keys
