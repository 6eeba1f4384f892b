"""The Evaluate step of an adapter method (core/config/lora_evaluation.py): a bf16 base that fits no GPU a
processing job runs on is spread over the GPUs of a multi-GPU evaluate_instance_type, sized by hand here; what does not
fit even spread is refused at synth, naming the instance types that would hold it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.catalog.instances import INSTANCE_TYPES
from core.config import TrainingConfig
from core.config.lora_evaluation import evaluate_fit, fitting_instances

P4D = {"instance_type": "ml.p4d.24xlarge", "precision": "bf16", "train_batch_size": 1, "val_batch_size": 2}
SHARDED = {"version": 2, "hybrid_shard_degree": 8}
GIB = 2**30


def training(**fields) -> TrainingConfig:
    return TrainingConfig.model_validate(fields)


def test_llama_70b_is_evaluated_spread_over_the_4_l40s_of_a_g6e_12xlarge_by_hand() -> None:
    config = training(
        model="llama-3.1-70b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6e.12xlarge", **P4D
    )
    fit = evaluate_fit(config)
    # Llama 3.1 70B: 70,553,706,496 parameters in bf16; 80 layers; token embedding and LM head 128256 x 8192 each.
    embedding = 128256 * 8192 * 2 / GIB
    weights = 70_553_706_496 * 2 / GIB
    layer = (70_553_706_496 - 2 * 128256 * 8192) * 2 / 80 / GIB
    assert (fit.weights_gib, fit.layer_gib, fit.largest_gib) == pytest.approx((weights, layer, embedding))
    assert round(weights, 1) == 131.4 and round(layer, 2) == 1.59 and round(embedding, 2) == 1.96
    capacity = 48 * 0.9 - 2  # per L40S, less the runtime
    assert fit.capacity_gib == pytest.approx(capacity) and not fit.whole
    # accelerate's balanced budgets: the first 3 GPUs up to a quarter of the weights and 1.25 layers, the last all of
    # its capacity. The weights need room for the embedding (the largest part) kept free on the first GPU, and what
    # the 3 GPUs before the last may leave unused: the embedding's room on the first, the LM head's on one, a layer's.
    balanced = min(capacity, weights / 4 + 1.25 * layer)
    assert fit.spread_capacity_gib == pytest.approx(3 * balanced + capacity)
    assert fit.spread_gib == pytest.approx(weights + embedding + 2 * embedding + layer)
    assert round(fit.spread_gib, 1) == 138.9 and round(fit.spread_capacity_gib, 1) == 145.7
    assert fit.spread and fit.fits
    # Host memory: each weight goes from its checkpoint shard straight to its GPU: one 5 GB shard at a time.
    assert fit.host.total_gib == pytest.approx(5e9 / GIB + 3.0) and fit.host.fits


NEOX = dict(model="gpt-neox-20b", method="lora", instance_type="ml.p4de.24xlarge", precision="bf16", train_batch_size=1)


def test_the_host_memory_each_way_of_loading_needs_by_hand() -> None:
    # Whole on one GPU: from_pretrained builds the whole bf16 base in host memory, then evaluate.py moves it to the
    # GPU. GPT-NeoX-20B: 20,554,567,680 parameters x 2 bytes, plus the process's 3 GiB.
    config = training(**NEOX, evaluate_instance_type="ml.g6e.2xlarge")
    fit = evaluate_fit(config)
    weights = 20_554_567_680 * 2 / GIB
    assert fit.whole and fit.host.weights_per_rank_gib == pytest.approx(weights)
    assert fit.host.total_gib == pytest.approx(weights + 3.0) and round(weights + 3.0, 1) == 41.3
    assert fit.host.capacity_gib == pytest.approx(64 * 0.9) and fit.runs
    # The same L40S holds it on a g6e.xlarge, whose 32 GiB of host memory do not.
    small = evaluate_fit(config, INSTANCE_TYPES["ml.g6e.xlarge"])
    assert small.whole and small.host.capacity_gib == pytest.approx(32 * 0.9)
    assert not small.host.fits and not small.runs
    # QLoRA: bitsandbytes quantizes each weight onto the GPU as it reads it, one 5 GB checkpoint shard at a time.
    qlora = evaluate_fit(training(**{**NEOX, "method": "qlora"}, evaluate_instance_type="ml.g5.2xlarge"))
    assert qlora.host.total_gib == pytest.approx(5e9 / GIB + 3.0)


ACCEPTED = [
    ("Llama 3.1 70B over 8 L4s", dict(model="llama-3.1-70b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6.48xlarge", **P4D)),
    ("Qwen2.5 72B over 4 L40S", dict(model="qwen2.5-72b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6e.12xlarge", **P4D)),
    ("Qwen2.5 72B over 8 A10Gs", dict(model="qwen2.5-72b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g5.48xlarge", **P4D)),
    ("OPT-30B over 4 A10Gs", dict(model="opt-30b", method="lora", evaluate_instance_type="ml.g5.12xlarge", **{**P4D, "instance_type": "ml.p4de.24xlarge", "train_batch_size": 2})),
    ("Llama 3.1 8B whole on one of 4 A10Gs", dict(model="llama-3.1-8b", method="lora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=1, evaluate_instance_type="ml.g5.12xlarge")),
]  # fmt: skip


@pytest.mark.parametrize("fields", [r[1] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED])
def test_accepts_evaluate_instance_types_that_hold_the_base(fields) -> None:
    fit = evaluate_fit(training(**fields))
    assert fit.fits and (fit.whole or fit.spread)
    assert fit.whole == (fields["model"] == "llama-3.1-8b")


REJECTED = [
    ("Llama 3.1 70B over 4 A10Gs", dict(model="llama-3.1-70b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g5.12xlarge", **P4D),
     r"evaluate_instance_type: the Evaluate step holds llama-3\.1-70b's base weights with the adapter: about 133\.4 GiB "
     r"with the runtime, more than the 21\.6 GiB usable of one A10G 24 GB, and spread over the 4 GPUs of "
     r"ml\.g5\.12xlarge \(each layer whole on one GPU, with room for the largest part, 2\.0 GiB, on the first\) it "
     r"needs 138\.9 GiB of the 78\.4 GiB accelerate's balanced budgets give; use an instance type that holds it, e\.g\. "
     r"ml\.g6e\.12xlarge \(over its 4 GPUs\), ml\.g6\.48xlarge \(over its 8 GPUs\)"),
    ("Qwen2.5 72B over 4 L4s", dict(model="qwen2.5-72b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6.24xlarge", **P4D),
     r"spread over the 4 GPUs of ml\.g6\.24xlarge .* it needs 144\.0 GiB of the 78\.4 GiB .*e\.g\. ml\.g6e\.12xlarge"),
    ("Llama 3.1 70B on one L40S", dict(model="llama-3.1-70b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6e.2xlarge", **P4D),
     r"more than the 43\.2 GiB usable of one L40S 48 GB of ml\.g6e\.2xlarge; use an instance type that holds it"),
    ("GPT-NeoX-20B whole on one L40S, but not in a g6e.xlarge's 32 GiB of host memory", dict(**NEOX, evaluate_instance_type="ml.g6e.xlarge"),
     r"evaluate_instance_type: gpt-neox-20b's base does not load on ml\.g6e\.xlarge \(32 GiB of host memory\): the "
     r"Evaluate step needs 41\.3 GiB of 28\.8 GiB usable per instance \(1 rank x \(weights 38\.3 \+ process 3\.0\); "
     r"from_pretrained builds the whole bf16 base in host memory, then evaluate\.py moves it to the GPU\); use an "
     r"instance type that holds it, e\.g\. ml\.g6e\.2xlarge \(whole on one GPU\)"),
    ("GPT-J-6B on a T4, which holds it but runs bf16 only emulated", dict(model="gpt-j-6b", method="lora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=2, evaluate_instance_type="ml.g4dn.xlarge"),
     r"evaluate_instance_type: ml\.g4dn\.xlarge has T4 GPUs, without bf16 arithmetic, .*only emulated, at about a "
     r"tenth of their fp16 speed; use Ampere or newer GPUs \(g5, g6, g6e\), e\.g\. ml\.g6\.xlarge \(whole on one GPU\)"),
    ("Llama 3.1 8B spread over 4 T4s", dict(model="llama-3.1-8b", method="lora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=1, evaluate_instance_type="ml.g4dn.12xlarge"),
     r"evaluate_instance_type: ml\.g4dn\.12xlarge has T4 GPUs, without bf16 arithmetic"),
    ("a 4-bit Qwen2.5 72B base is not spread, and fits no processing GPU", dict(model="qwen2.5-72b", method="qlora", instance_type="ml.p4de.24xlarge", precision="bf16", train_batch_size=1),
     r"holds qwen2\.5-72b's base weights with the adapter on one GPU \(a 4-bit base is not spread over GPUs\): about "
     r"45\.0 GiB .*no instance type a processing job runs on holds it \(CreateProcessingJob offers no p4d, p4de or "
     r"p5\.48xlarge\); training\.method lora evaluates over the bf16 base spread over GPUs, e\.g\. on ml\.g6e\.12xlarge "
     r"\(4 x L40S 48 GB\)"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("fields", "message"), [(r[1], r[2]) for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejects_evaluate_instance_types_that_cannot_hold_the_base(fields, message) -> None:
    with pytest.raises(ValidationError, match=message):
        training(**fields)


def test_the_named_instance_types_are_processing_types_that_hold_the_base_cheapest_first() -> None:
    config = training(
        model="llama-3.1-70b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6e.12xlarge", **P4D
    )
    names = [instance.name for instance in fitting_instances(config)]
    assert names[:3] == ["ml.g6e.12xlarge", "ml.g6.48xlarge", "ml.g6e.24xlarge"]
    # p4de and p5 hold it too (8 x 80 GB), but CreateProcessingJob does not offer them.
    assert evaluate_fit(config, INSTANCE_TYPES["ml.p4de.24xlarge"]).fits
    assert not {"ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge"} & set(names)
    prices = [INSTANCE_TYPES[name].hourly_usd for name in names]
    assert prices == sorted(prices)


@pytest.mark.parametrize(
    "fields",
    [
        dict(**NEOX, evaluate_instance_type="ml.g6e.2xlarge"),
        dict(model="llama-3.1-8b", method="qlora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=2),
    ],
    ids=["gpt-neox-20b lora", "llama-3.1-8b qlora"],
)
def test_synth_accepts_exactly_the_evaluate_instance_types_it_names(fields) -> None:
    named = {instance.name for instance in fitting_instances(training(**fields))}
    accepted = set()
    for name in INSTANCE_TYPES:
        try:
            training(**{**fields, "evaluate_instance_type": name})
        except ValidationError:
            continue
        accepted.add(name)
    assert accepted == named
    # Neither a GPU that holds the base with too little host memory (GPT-NeoX-20B on a g6e.xlarge), nor one without
    # bf16 arithmetic (QLoRA's 4-bit Llama 3.1 8B fits a T4's g4dn.xlarge, the cheapest, which its own check refuses).
    assert not {name for name in named if not INSTANCE_TYPES[name].gpu.bf16}
    if fields["method"] == "lora":
        assert evaluate_fit(training(**fields), INSTANCE_TYPES["ml.g6e.xlarge"]).fits
        assert "ml.g6e.xlarge" not in named and "ml.g6e.2xlarge" in named
    else:
        assert evaluate_fit(training(**fields), INSTANCE_TYPES["ml.g4dn.xlarge"]).fits
        assert sorted(named, key=lambda name: INSTANCE_TYPES[name].hourly_usd)[0] == "ml.g6.xlarge"


def test_the_70b_example_loads_with_the_figures_its_comments_give() -> None:
    from core.config import load_config
    from tests.cdk_assembly import REPO

    config = load_config(REPO / "config/examples/llama-70b-lora.yaml").stages["dev"].training
    assert (config.model, config.method, config.shards_base) == ("llama-3.1-70b", "lora", True)
    assert round(config.fit().total_gib, 1) == 33.0 and round(config.fit().capacity_gib, 1) == 36.0
    assert round(config.host_fit().total_gib, 1) == 155.4
    fit = evaluate_fit(config)
    assert fit.instance.name == "ml.g6e.12xlarge" and fit.spread
    assert (round(fit.capacity_gib, 1), round(fit.spread_gib, 1), round(fit.spread_capacity_gib, 1)) == (
        41.2,
        138.9,
        145.7,
    )


@pytest.mark.bad_input("config")
def test_the_base_is_evaluated_in_the_precision_the_adapter_trained_over_by_hand() -> None:
    # GPT-J-6B's checkpoint is fp32; evaluate.py holds the base as training held it (base_model.json's precision).
    gptj = dict(model="gpt-j-6b", method="lora", instance_type="ml.g6e.2xlarge", train_batch_size=2)
    fp16_stage = training(**gptj, precision="fp16", evaluate_instance_type="ml.g4dn.xlarge")
    parameters = fp16_stage.catalog_model.parameters
    fp16 = evaluate_fit(fp16_stage)
    assert fp16.weights_gib == pytest.approx(parameters * 2 / GIB, abs=0.05)
    # An fp16 base runs natively on a T4 (14.4 - 2 GiB of a g4dn.xlarge's 16 GB): accepted there.
    assert fp16.precision == "fp16" and fp16.whole and fp16.runs
    # Trained over the fp32 base, the adapter is evaluated over it: 22.6 GiB + 2 of runtime, more than one A10G of the
    # default Evaluate instance holds (sized as bf16, this used to pass synth and run out of GPU memory in the job).
    with pytest.raises(ValidationError, match=r"about 24\.6 GiB with the runtime, more than the 21\.6 GiB usable"):
        training(**gptj, precision="fp32")
    fp32 = evaluate_fit(training(**gptj, precision="fp32", evaluate_instance_type="ml.g6e.xlarge"))
    assert fp32.weights_gib == pytest.approx(parameters * 4 / GIB, abs=0.05) and fp32.whole
    # The host load follows: from_pretrained builds the whole base, in that dtype, before it goes to the GPU.
    assert fp32.host.describe().startswith(f"{parameters * 4 / GIB + 3:.1f} GiB")
