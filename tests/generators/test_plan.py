"""The plan `make synth` prints: host memory next to GPU memory, and where the served weights come from."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from core.config import ServingConfig, TrainingConfig, load_config
from generators.plan import cold_start_seconds, describe_patches, describe_serving, describe_training, describe_weights
from tests.cdk_assembly import REPO

BLOOM_INT8 = dict(model="bloom-176b", dtype="int8", tensor_parallel_degree=8, instance_type="ml.p4d.24xlarge")


def test_endpoint_plan_shows_host_memory_next_to_gpu_memory():
    lines = describe_serving(
        ServingConfig(**BLOOM_INT8, weights={"checkpoint": "deepspeed-int8-tp8", "allow_pickle": True})
    )
    gpu = next(i for i, line in enumerate(lines) if line.startswith("    memory per GPU: "))
    assert lines[gpu + 1] == (
        "    host memory while loading: 238.4 GiB of 1036.8 GiB usable per instance (8 ranks x (weights 26.8 + "
        "process 3.0); each rank reads only its shards of the pre-sharded checkpoint)"
    )


def test_training_plan_shows_host_memory_next_to_gpu_memory():
    lines = describe_training(TrainingConfig())
    gpu = next(i for i, line in enumerate(lines) if line.startswith("    memory per GPU (estimate): "))
    assert lines[gpu + 1] == (
        "    host memory while loading (estimate): 384.8 GiB of 1036.8 GiB usable per instance (8 ranks x (weights "
        "45.1 + process 3.0); every rank builds the whole model and reads the whole state dict: two fp32 copies at "
        "most)"
    )


def test_plan_names_the_staged_checkpoint_and_its_prefix():
    served = describe_weights(
        ServingConfig(**BLOOM_INT8, weights={"checkpoint": "deepspeed-int8-tp8", "allow_pickle": True})
    )
    assert served == (
        "the staged copy of the pre-sharded DeepSpeed int8 checkpoint microsoft/bloom-deepspeed-inference-int8, "
        "split for tensor parallel 8 at commit aa00a6626f6484a2eef68e06d1e089e4e32aa571 (models bucket, "
        "pretrained/bloom-176b-deepspeed-int8-tp8/aa00a6626f6484a2eef68e06d1e089e4e32aa571/)"
    )
    external = ServingConfig(
        **BLOOM_INT8,
        weights={
            "source": "s3",
            "s3_uri": "s3://shared/bloom/",
            "checkpoint": "deepspeed-int8-tp8",
            "allow_pickle": True,
        },
    )
    assert describe_weights(external) == (
        "s3://shared/bloom/, holding the pre-sharded DeepSpeed int8 checkpoint microsoft/bloom-deepspeed-inference-int8, "
        "split for tensor parallel 8"
    )
    assert describe_weights(ServingConfig()) == (
        "the staged copy of the Hugging Face weights at the commit main had when last staged (models bucket, "
        "pretrained/gpt-j-6b/<commit>/, named by pretrained/gpt-j-6b/main.json when the stack deploys)"
    )


def test_plan_says_how_long_captured_requests_are_kept():
    captured = describe_serving(ServingConfig(data_capture_percent=10, data_capture_expiry_days=14))
    assert (
        "    data capture: 10% of requests and responses to capture/ in the data bucket, deleted after 14 days, "
        "their old versions 30 days later"
    ) in captured
    off = describe_serving(ServingConfig())
    assert (
        "    data capture: off; anything under capture/ is deleted after 30 days, their old versions 30 days later"
        in off
    )


def _stage(serving: ServingConfig, training: TrainingConfig):
    return SimpleNamespace(serving=serving, training=training)


SMP_V2 = TrainingConfig(precision="bf16", smp={"version": 2, "tensor_parallel_degree": 1, "hybrid_shard_degree": 8})


def test_plan_warns_of_each_unpatched_image_from_the_day_it_stopped_with_the_change_that_moves_off_it():
    reference = _stage(ServingConfig(), TrainingConfig())
    assert describe_patches(reference, datetime.date(2024, 6, 12)) == []
    assert describe_patches(reference, datetime.date(2024, 6, 13)) == [
        "  warning: no patches since 2024-06-13: the endpoint's LMI 0.27.0: DeepSpeed 0.12.6 image (LMI V10 (0.28.0) "
        "dropped DeepSpeed, so 0.27.0 gets no releases; its Python 3.10 is past end of life); move off: "
        "serving.engine: vllm (LMI 29.0.0: DJL Serving 0.38.0, vLLM 0.28.0)"
    ]
    today = describe_patches(reference, datetime.date(2026, 12, 1))
    assert [line.split(": ", 2)[1] for line in today] == [
        "no patches since 2024-06-13",
        "no patches since 2024-10-28",
        "no patches since 2024-10-28",
    ]
    assert today[1].endswith(
        "move off: training.smp.version: 2 (SMP v2, newer, though its PyTorch 2.4 line stopped too, on 2025-07-24)"
    )
    assert "the PyTorch 1.13.1 DLC of the prepare and evaluate steps" in today[2]


def test_plan_has_no_serving_warning_on_the_current_vllm_image_and_names_the_smp_v2_image_when_it_ends():
    current = _stage(ServingConfig(engine="vllm"), SMP_V2)
    lines = describe_patches(current, datetime.date(2026, 12, 1))
    assert not any("endpoint" in line for line in lines)
    assert lines[0] == (
        "  warning: no patches since 2025-07-24: the SMP v2 image (fine-tuning), built on PyTorch 2.4.1 (AWS's DLC "
        "support policy for PyTorch 2.4); move off: none in config: the newest SMP image, 2.8.0 on PyTorch 2.5.1, "
        "stopped too (2025-10-29)"
    )
    assert len(describe_patches(current, datetime.date(2025, 7, 23))) == 1  # the processing image's alone


def test_plan_shows_cost_at_zero_minimum_and_maximum_and_the_cold_start_of_a_stage_that_scales_to_zero():
    config = load_config(REPO / "config/examples/inference-components.yaml")
    lines = "\n".join(describe_serving(config.stages["dev"].serving))
    assert "2 inference component(s), each invoked by its name" in lines
    assert "component base: 0-1 copies, each reserving 1 GPU(s) and 14618 MB of host memory" in lines
    assert "component tuned: 0-1 copies" in lines
    assert "scaling: concurrent requests per copy, target 4 (high-resolution, every 10 s)" in lines
    assert "cost: $0.00/h at zero, $1.51/h at 1 instance(s), $3.03/h at 2 (maximum)" in lines
    # By hand: the wake-up alarm's minute 60 s + a new instance 180 s + SageMaker's copy of GPT-J's folder, sized as
    # fp32 (6,053,381,344 x 4 bytes = 22.55 GiB), at 120 s + 10 s per GiB = 345.5 s + the load of its fp16 weights
    # (11.28 GiB) at 300 s + 5 s per GiB = 356.4 s: 941.9 s, 942 rounded, which is 15.7 minutes: "about 16 min".
    assert cold_start_seconds(config.stages["dev"].serving.component_servings()["base"]) == 942
    assert "cold start from zero: up to about 16 min for base (alarm 60 s + a new instance ~3 min" in lines


def test_plan_of_a_classic_endpoint_names_its_signal_and_has_no_cold_start():
    config = load_config(REPO / "config/examples/inference-components.yaml")
    lines = "\n".join(describe_serving(config.stages["prod"].serving))
    assert "scaling: concurrent requests per model container, target 4" in lines
    assert "cost: $3.03/h at 2 instance(s), $6.06/h at 4 (maximum)" in lines
    assert "cold start" not in lines
