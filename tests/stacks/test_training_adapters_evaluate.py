"""The Evaluate step of an adapter method (stacks/config/adapter_evaluation.py): a bf16 base that fits no GPU a
processing job runs on is spread over the GPUs of a multi-GPU evaluate_instance_type, sized by hand here; what does not
fit even spread is refused at synth, naming the instance types that would hold it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stacks.catalog.instances import INSTANCE_TYPES
from stacks.config import TrainingConfig
from stacks.config.adapter_evaluation import evaluate_fit, fitting_instances

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
    assert fit.host_gib == pytest.approx(5e9 / GIB + 3.0)


ACCEPTED = [
    ("Llama 3.1 70B over 8 L4s", dict(model="llama-3.1-70b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6.48xlarge", **P4D)),
    ("Qwen2.5 72B over 4 L40S", dict(model="qwen2.5-72b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g6e.12xlarge", **P4D)),
    ("Qwen2.5 72B over 8 A10Gs", dict(model="qwen2.5-72b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g5.48xlarge", **P4D)),
    ("OPT-30B over 4 A10Gs", dict(model="opt-30b", method="lora", smp=SHARDED, evaluate_instance_type="ml.g5.12xlarge", **{**P4D, "train_batch_size": 2})),
    ("Llama 3.1 8B whole on one of 4 A10Gs", dict(model="llama-3.1-8b", method="lora", instance_type="ml.g5.2xlarge", precision="bf16", train_batch_size=2, evaluate_instance_type="ml.g5.12xlarge")),
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


def test_the_70b_example_loads_with_the_figures_its_comments_give() -> None:
    from stacks.config import load_config
    from tests.cdk_assembly import REPO

    config = load_config(REPO / "config/examples/llama-70b-lora.yaml").stages["dev"].training
    assert (config.model, config.method, config.shards_base) == ("llama-3.1-70b", "lora", True)
    assert round(config.fit().total_gib, 1) == 32.0 and round(config.fit().capacity_gib, 1) == 36.0
    assert round(config.host_fit().total_gib, 1) == 155.4
    fit = evaluate_fit(config)
    assert fit.instance.name == "ml.g6e.12xlarge" and fit.spread
    assert (round(fit.capacity_gib, 1), round(fit.spread_gib, 1), round(fit.spread_capacity_gib, 1)) == (
        41.2,
        138.9,
        145.7,
    )
