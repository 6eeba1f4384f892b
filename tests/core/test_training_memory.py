"""Training memory per GPU, worked by hand from the libraries' source: what SMP v1 keeps whole on every
tensor-parallel rank, and what the jobs' transformers spends on the logits."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.config import TrainingConfig
from generators.plan import describe_training

GIB = 2**30


def training(**fields) -> TrainingConfig:
    return TrainingConfig.model_validate(fields)


def test_smp_v1_gptj_keeps_the_embedding_and_lm_head_whole_on_every_tensor_parallel_rank():
    # SMP 1.12.1's GPT-J hook sets parallel_attn_output, so DistributedTransformerLMHead turns distribute_embedding
    # off: nn.Embedding(50400, 4096) and nn.Linear(4096, 50400, bias=True) on every rank.
    # Whole: 2 x 50400 x 4096 + 50400 = 412,927,200 parameters; split: 6,053,381,344 - 412,927,200 = 5,640,454,144,
    # of which TP 8 leaves 705,056,768 per GPU. Per GPU: 1,117,983,968 parameters x 16 bytes (fp16 weights and
    # gradients, fp32 master and Adam's two moments; data parallel 1, so sharding the optimizer state splits nothing)
    # = 17,887,743,488 bytes = 16.659 GiB, of which the whole parts 412,927,200 x 16 = 6,606,835,200 = 6.153 GiB.
    # Activations (checkpointed, batch 8 x 1024 tokens): 28 x 2 x 1024 x 8 x 4096 + 1024 x 8 x 4096 x (34 + 5 x 16 x
    # 1024 / 4096) / 8 = 1,879,048,192 + 226,492,416 = 2,105,540,608 bytes = 1.961 GiB.
    fit = training().fit()
    assert fit.model_states_gib == pytest.approx(17_887_743_488 / GIB)
    assert fit.whole_gib == pytest.approx(6_606_835_200 / GIB)
    assert fit.activations_gib == pytest.approx(2_105_540_608 / GIB)
    assert fit.describe() == (
        "18.6 GiB of 36.0 GiB usable per GPU (weights, gradients and optimizer 16.7, of which 6.2 for what every "
        "tensor-parallel GPU holds whole: embedding and LM head + activations 2.0)"
    )


def test_without_tensor_parallelism_nothing_is_counted_twice():
    # Pipeline parallel 8: every parameter on one of 8 stages, 6,053,381,344 / 8 x 16 bytes = 12,106,762,688 bytes.
    fit = training(
        smp={
            "tensor_parallel_degree": 1,
            "pipeline_parallel_degree": 8,
            "microbatches": 2,
            "optimize": "memory",
            "prescaled_batch": False,
            "offload_activations": True,
        }
    ).fit()
    assert (fit.model_states_gib, fit.whole_gib) == (pytest.approx(12_106_762_688 / GIB), 0.0)


@pytest.mark.bad_input("config")
def test_a_gptj_layout_that_fits_only_if_the_embedding_were_split_is_refused():
    # 8 x V100 16 GB: 14.4 GiB usable. Split evenly it would have been 11.3 + 2.0 = 13.2 GiB; SMP's whole embedding
    # and LM head make it 18.6, which runs out of memory at the first step.
    with pytest.raises(ValidationError) as error:
        training(instance_type="ml.p3.16xlarge")
    assert (
        "gpt-j-6b training does not fit ml.p3.16xlarge (8 x V100 16 GB) with tensor parallel 8 and pipeline parallel "
        "1 and shard_optimizer_state true: estimated 18.6 GiB of 14.4 GiB usable per GPU (weights, gradients and "
        "optimizer 16.7, of which 6.2 for what every tensor-parallel GPU holds whole: embedding and LM head"
    ) in str(error.value)


def test_the_plan_shows_what_every_tensor_parallel_rank_holds_whole():
    lines = describe_training(training())
    assert (
        "    memory per GPU (estimate): 18.6 GiB of 36.0 GiB usable per GPU (weights, gradients and optimizer 16.7, of "
        "which 6.2 for what every tensor-parallel GPU holds whole: embedding and LM head + activations 2.0)"
    ) in lines


LOGITS_BYTES = [
    # (transformers, model_type, what the LM head computes in, bytes per logit at the loss's peak)
    # 4.46.3's ForCausalLMLoss (Llama, Qwen2) and Mistral's own loss: bf16 logits 2 + logits.float() 4 + the shifted
    # .contiguous() copy 4 + cross_entropy's log-softmax 4.
    ("4.46.3", "llama", "bf16", 14),
    ("4.46.3", "qwen2", "bf16", 14),
    ("4.46.3", "mistral", "bf16", 14),
    # GPT-J upcasts in the model (lm_head(...).to(torch.float32)), in 4.21.0 and 4.46.3 alike.
    ("4.46.3", "gptj", "bf16", 14),
    ("4.21.0", "gptj", "fp16", 14),
    # GPT-NeoX, OPT and BLOOM keep the loss in the logits' dtype: logits, shifted copy, log-softmax, 2 bytes each.
    ("4.46.3", "gpt_neox", "bf16", 6),
    ("4.46.3", "opt", "bf16", 6),
    ("4.46.3", "bloom", "bf16", 6),
    ("4.21.0", "opt", "fp16", 6),
    # An fp32 LM head (fp32 training; QLoRA's, which prepare_model_for_kbit_training casts to fp32): .float() is the
    # same tensor, so logits, shifted copy and log-softmax, 4 bytes each.
    ("4.46.3", "llama", "fp32", 12),
    ("4.46.3", "gpt_neox", "fp32", 12),
]


@pytest.mark.parametrize(("version", "model_type", "dtype", "expected"), LOGITS_BYTES)
def test_bytes_per_logit_follow_the_loss_code_of_each_transformers_version(version, model_type, dtype, expected):
    from core.config.lora_training import logits_bytes

    assert logits_bytes(version, model_type, dtype) == expected


def test_a_transformers_version_whose_loss_was_not_read_is_refused_with_the_fix():
    from core.config.lora_training import logits_bytes

    with pytest.raises(ValueError, match=r"transformers 4\.47\.0 .*training/requirements\.txt.*LOSS_UPCASTS_TO_FP32"):
        logits_bytes("4.47.0", "llama", "bf16")


def test_llama_70b_lora_logits_are_sized_for_the_smp_v2_images_transformers():
    from core.config import load_config
    from tests.cdk_assembly import REPO

    # config/examples/llama-70b-lora.yaml: batch 2 x 1024 tokens over a vocabulary of 128,256, 14 bytes per logit
    # (transformers 4.46.3, the SMP v2 image's pin): 2 x 1024 x 128256 x 14 = 3,677,356,032 bytes = 3.42 GiB. With the
    # checkpointed activations 2 x (80 x 2 x 1024 x 8192 + 1024 x 8192 x 74) = 3,925,868,544 bytes = 3.66 GiB.
    config = load_config(REPO / "config/examples/llama-70b-lora.yaml")
    fit = config.stages["dev"].training.fit()
    assert fit.activations_gib == pytest.approx((3_677_356_032 + 3_925_868_544) / GIB)
    assert round(fit.total_gib, 1) == 33.0 and fit.fits


STAGES = {
    "the GPT-J reference (SMP v1, TP 8)": dict(),
    "SMP v1 with 2 microbatches": dict(smp={"microbatches": 2}),
    "Llama 3.1 70B LoRA over a sharded base": dict(
        model="llama-3.1-70b",
        method="lora",
        instance_type="ml.p4d.24xlarge",
        precision="bf16",
        train_batch_size=2,
        val_batch_size=2,
        smp={"version": 2, "hybrid_shard_degree": 8},
        evaluate_instance_type="ml.g6e.12xlarge",
    ),
    "Llama 3.1 8B LoRA on one A10G": dict(
        model="llama-3.1-8b", method="lora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=1
    ),
}


@pytest.mark.parametrize("fields", STAGES.values(), ids=STAGES.keys())
def test_train_py_refuses_exactly_the_batches_synth_would(fields):
    """Every batch a run may ask for: train.py's rule, fed the figures the job is given, agrees with synth's estimate."""
    from core import training_job
    from training.finetune.errors import ConfigurationError
    from training.finetune.hyperparameters import parse_hyperparameters
    from training.finetune.layout import check_layout, parse_layout

    config = training(**fields)
    layout = parse_layout(training_job.smp_parameters(config) if training_job.backend_name(config) != "torch" else {})
    figures = training_job.memory_hyperparameters(config)
    step = layout.microbatches
    for batch in range(step, 16 * step + 1, step):
        flags = {**figures, "model_config": "config.json", "train_batch_size": batch}
        hp, _ = parse_hyperparameters([x for k, v in flags.items() for x in (f"--{k}", str(v))], environ={})
        fits = config.model_copy(update={"train_batch_size": batch}).fit().fits
        try:
            check_layout(hp, layout, training_job.backend_name(config), config.world_size)
            refused = False
        except ConfigurationError:
            refused = True
        assert refused is not fits, batch


def test_the_job_is_given_the_figures_of_its_stage():
    from core import training_job

    # The 70B example: 25.914 GiB of states and runtime, 3.541 GiB per sequence (1.828 activations + 1.713 logits at
    # 14 bytes), 36.0 usable; at TrainBatchSize 4 it would need 40.1 GiB, so a run asking for it stops at once.
    config = training(**STAGES["Llama 3.1 70B LoRA over a sharded base"])
    figures = training_job.memory_hyperparameters(config)
    assert figures["memory_fixed_gib"] == pytest.approx(25.9144, abs=1e-4)
    assert figures["memory_per_sequence_gib"] == pytest.approx((1_962_934_272 + 1_838_678_016) / GIB)
    assert figures["memory_usable_gib"] == pytest.approx(36.0)
    flags = training_job.hyperparameters(config, max_steps=1, learning_rate=1e-4, train_batch_size=2)
    assert {name: flags[name] for name in figures} == figures
