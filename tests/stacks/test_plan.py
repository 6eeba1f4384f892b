"""The plan `make synth` prints: host memory next to GPU memory, and where the served weights come from."""

from __future__ import annotations

from stacks.config import ServingConfig, TrainingConfig
from stacks.plan import describe_serving, describe_training, describe_weights

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
