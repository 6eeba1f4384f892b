"""Serving config: the seed's sizing cases come out right; every impossible endpoint fails at load with numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.config import ServingConfig, load_config
from tests.cdk_assembly import REPO


def serving(**fields) -> ServingConfig:
    return ServingConfig.model_validate(fields)


# DeepSpeed's pre-sharded checkpoints are pickles: serving one is the config's explicit choice.
INT8_CHECKPOINT = {"checkpoint": "deepspeed-int8-tp8", "allow_pickle": True}
# The catalog pins no commit of the fp16 checkpoint: pickles are served only from one the config pins.
FP16_CHECKPOINT = {
    "checkpoint": "deepspeed-fp16-tp8",
    "allow_pickle": True,
    "revision": "0123456789abcdef0123456789abcdef01234567",
}
BLOOM_INT8_P4D = dict(model="bloom-176b", dtype="int8", tensor_parallel_degree=8, instance_type="ml.p4d.24xlarge")

# The LMI DeepSpeed reference's cases.
ACCEPTED = [
    ("BLOOM-176B int8 TP 8 on p4d from the pre-sharded checkpoint", dict(BLOOM_INT8_P4D, weights=INT8_CHECKPOINT)),
    ("BLOOM-176B fp16 TP 8 on p4de from the pre-sharded checkpoint", dict(model="bloom-176b", dtype="fp16", tensor_parallel_degree=8, instance_type="ml.p4de.24xlarge", weights=FP16_CHECKPOINT)),
    ("a pre-sharded checkpoint someone copied to S3", dict(BLOOM_INT8_P4D, weights={"source": "s3", "s3_uri": "s3://shared/bloom-int8/", **INT8_CHECKPOINT})),
    ("OPT-30B fp16 TP 4 on g5.24xlarge", dict(model="opt-30b", dtype="fp16", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge")),
    ("GPT-J fp16 on g5.2xlarge", dict(model="gpt-j-6b", dtype="fp16", instance_type="ml.g5.2xlarge")),
    ("GPT-J fp16 TP 2 on g5.12xlarge: 2 copies", dict(model="gpt-j-6b", tensor_parallel_degree=2, instance_type="ml.g5.12xlarge")),
]  # fmt: skip


@pytest.mark.parametrize("fields", [row[1] for row in ACCEPTED], ids=[row[0] for row in ACCEPTED])
def test_accepts_the_reference_setups(fields):
    config = serving(**fields)
    assert config.fit().fits and config.host_fit().fits


def test_tensor_parallel_below_the_gpu_count_runs_several_copies_per_instance():
    assert (
        serving(model="gpt-j-6b", tensor_parallel_degree=2, instance_type="ml.g5.12xlarge").fit().copies_per_instance
        == 2
    )
    assert serving(**BLOOM_INT8_P4D, weights=INT8_CHECKPOINT).fit().copies_per_instance == 1


REJECTED = [
    ("BLOOM-176B fp16 on p4d", dict(model="bloom-176b", dtype="fp16", tensor_parallel_degree=8, instance_type="ml.p4d.24xlarge"),
     r"does not fit ml\.p4d\.24xlarge \(8 x A100 40 GB\): needs 52\.7 GiB of 36\.0 GiB usable per GPU \(weights 46\.9 \+ KV cache 3\.8.*dtype int8 from its pre-sharded checkpoint microsoft/bloom-deepspeed-inference-int8 \(weights: \{checkpoint: deepspeed-int8-tp8, allow_pickle: true\}\) with tensor_parallel_degree 8 fits on ml\.p4d\.24xlarge: 32\.6 GiB of 36\.0 GiB usable per GPU \(weights 26\.8"),
    ("int8 from a Hugging Face folder", dict(model="gpt-j-6b", dtype="int8"),
     r"dtype int8 needs a pre-sharded DeepSpeed checkpoint.*gpt-j-6b has no int8 checkpoint in the catalog: use fp16 or bf16"),
    ("BLOOM int8 from its Hugging Face weights", dict(BLOOM_INT8_P4D, weights={"source": "s3", "s3_uri": "s3://shared/bloom/"}),
     r"dtype int8 needs a pre-sharded DeepSpeed checkpoint.*set weights\.checkpoint to one of deepspeed-int8-tp8"),
    ("OPT-30B on one A10G", dict(model="opt-30b", instance_type="ml.g5.2xlarge"),
     r"does not fit ml\.g5\.2xlarge.*the cheapest instance type where fp16 fits is ml\.g6\.12xlarge with tensor_parallel_degree 4"),
    ("GPT-J TP 1 of 4 GPUs too small a shard? no: TP larger than GPUs", dict(model="gpt-j-6b", tensor_parallel_degree=2, instance_type="ml.g5.2xlarge"),
     r"tensor_parallel_degree 2 must divide the 1 GPU\(s\) of ml\.g5\.2xlarge; use one of \[1\]"),
    ("TP not dividing the GPUs", dict(model="gpt-j-6b", tensor_parallel_degree=3, instance_type="ml.p4d.24xlarge"),
     r"tensor_parallel_degree 3 must divide the 8 GPU\(s\) of ml\.p4d\.24xlarge; use one of \[1, 2, 4, 8\]"),
    ("bf16 on a GPU without it", dict(model="gpt-j-6b", dtype="bf16", instance_type="ml.g4dn.12xlarge", tensor_parallel_degree=4),
     r"dtype bf16 needs Ampere or newer GPUs; T4 has none"),
    ("int8 with vLLM", dict(engine="vllm", model="gpt-j-6b", dtype="int8"), r"int8 is DeepSpeed's kernel-injected int8"),
    ("EBS volume on local NVMe", dict(model="gpt-j-6b", volume_size_gib=100), r"ml\.g5\.2xlarge has instance-local NVMe storage"),
    ("volume too large", dict(model="gpt-j-6b", instance_type="ml.p3.16xlarge", tensor_parallel_degree=2, volume_size_gib=600),
     r"volume_size_gib: 600 is above the maximum 512, the limit of SageMaker CreateEndpointConfig ProductionVariants\.VolumeSizeInGB"),
    ("start-up timeout above SageMaker's maximum", dict(startup_timeout_seconds=7200),
     r"startup_timeout_seconds: 7200 is above the maximum 3600, the limit of SageMaker CreateEndpointConfig ProductionVariants\.ContainerStartupHealthCheckTimeoutInSeconds"),
    ("download timeout below the minimum", dict(download_timeout_seconds=30),
     r"download_timeout_seconds: 30 is below the minimum 60, the limit of SageMaker CreateEndpointConfig ProductionVariants\.ModelDataDownloadTimeoutInSeconds"),
    ("download timeout above SageMaker's maximum", dict(download_timeout_seconds=3601),
     r"download_timeout_seconds: 3601 is above the maximum 3600, the limit of SageMaker CreateEndpointConfig ProductionVariants\.ModelDataDownloadTimeoutInSeconds"),
    ("a VPC without security groups", dict(vpc={"subnet_ids": ["subnet-0123456789abcdef0"], "security_group_ids": []}),
     r"vpc\.security_group_ids\n.*at least 1 item"),
    ("a VPC subnet that is no subnet id", dict(vpc={"subnet_ids": ["vpc-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]}),
     r"vpc\.subnet_ids\.0\n.*should match pattern '\^subnet-\[0-9a-f\]\{8,17\}\$'"),
    ("a VPC of 17 subnets", dict(vpc={"subnet_ids": [f"subnet-{i:017x}" for i in range(17)], "security_group_ids": ["sg-0123456789abcdef0"]}),
     r"vpc\.subnet_ids: .* has 17 entries, more than 16, the limit of SageMaker CreateModel VpcConfig\.Subnets"),
    ("unknown model", dict(model="gpt-j-7b"), r"not a known model; did you mean gpt-j-6b"),
    ("unknown instance type", dict(instance_type="ml.g5.3xlarge"), r"not a supported GPU instance type"),
    ("min above max instances", dict(autoscaling={"min_instances": 3, "max_instances": 2}), r"min_instances 3 is above max_instances 2"),
    ("zero instances without inference components", dict(autoscaling={"min_instances": 0}),
     r"autoscaling\.min_instances 0: only an endpoint that hosts inference components scales to zero instances"),
    ("s3 weights without a URI", dict(weights={"source": "s3"}), r"source 's3' needs s3_uri"),
    ("s3 URI not a prefix", dict(weights={"source": "s3", "s3_uri": "s3://bucket/model.tar.gz"}), r"should match pattern"),
    ("model package ARN with pretrained", dict(weights={"model_package_arn": "arn:aws:sagemaker:us-east-1:111111111111:model-package/llm/3"}), r"model_package_arn is only used with source 'model_package'"),
    ("max_new_tokens filling the context", dict(max_new_tokens=2048), r"leaves no room for a prompt in the 2048-token context"),
    ("unknown key", dict(tensor_parallel=2), r"Extra inputs are not permitted"),
    # Host memory while loading: 8 ranks each holding the whole model (from_pretrained) on a 1152 GiB p4d.
    ("BLOOM-176B int8 from the plain checkpoint on p4d", BLOOM_INT8_P4D,
     r"dtype int8 needs a pre-sharded DeepSpeed checkpoint: DeepSpeed quantizes weights only while it loads such shards.*set weights\.checkpoint to one of deepspeed-int8-tp8"),
    ("BLOOM-176B fp16 from the plain checkpoint on p4de", dict(model="bloom-176b", dtype="fp16", tensor_parallel_degree=8, instance_type="ml.p4de.24xlarge"),
     r"cannot load on ml\.p4de\.24xlarge.*weights: \{checkpoint: deepspeed-fp16-tp8, allow_pickle: true, revision: <the 40-hex commit you reviewed>\}"),
    ("BLOOM-176B bf16 from the plain checkpoint on p5: no checkpoint in bf16", dict(model="bloom-176b", dtype="bf16", tensor_parallel_degree=8, instance_type="ml.p5.48xlarge"),
     r"cannot load on ml\.p5\.48xlarge \(2048 GiB of host memory\).*no supported instance type has the host memory for it: use a pre-sharded checkpoint"),
    # A pre-sharded checkpoint is served as it was made.
    ("int8 checkpoint with TP 4", dict(BLOOM_INT8_P4D, tensor_parallel_degree=4, weights=INT8_CHECKPOINT),
     r"deepspeed-int8-tp8 holds bloom-176b's weights in int8, split for 8 tensor-parallel ranks \(microsoft/bloom-deepspeed-inference-int8\): with tensor_parallel_degree 4 DeepSpeed would have to merge or re-split its stored shards"),
    ("int8 checkpoint served as fp16", dict(BLOOM_INT8_P4D, dtype="fp16", instance_type="ml.p4de.24xlarge", weights=INT8_CHECKPOINT),
     r"DeepSpeed loads its shards as stored, so dtype fp16 cannot be served from it; use dtype int8"),
    ("checkpoint with vLLM", dict(BLOOM_INT8_P4D, engine="vllm", dtype="fp16", instance_type="ml.p4de.24xlarge", weights=INT8_CHECKPOINT),
     r"only the deepspeed engine loads it"),
    ("a checkpoint the model does not have", dict(model="gpt-j-6b", weights=INT8_CHECKPOINT),
     r"weights\.checkpoint: gpt-j-6b has no pre-sharded checkpoint 'deepspeed-int8-tp8'; its checkpoints: none"),
    ("pickles from whatever commit main has", dict(weights={"allow_pickle": True}),
     r"weights\.allow_pickle: pickles are accepted from EleutherAI/gpt-j-6b without a pinned commit.*CVE-2025-32434\); set weights\.revision to the 40-hex commit"),
    ("a checkpoint's pickles from whatever commit main has", dict(model="bloom-176b", dtype="fp16", tensor_parallel_degree=8, instance_type="ml.p4de.24xlarge", weights={**FP16_CHECKPOINT, "revision": None}),
     r"weights\.allow_pickle: pickles are accepted from microsoft/bloom-deepspeed-inference-fp16 without a pinned commit.*set weights\.revision"),
    ("a checkpoint with a registered model package", dict(weights={"source": "model_package", "model_package_arn": "arn:aws:sagemaker:us-east-1:111111111111:model-package/llm/3", **INT8_CHECKPOINT}),
     r"checkpoint is only used with source 'pretrained' or 's3'"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("fields", "message"), [(r[1], r[2]) for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejects_endpoints_that_cannot_work(fields, message):
    with pytest.raises(ValidationError, match=message):
        serving(**fields)


@pytest.mark.bad_input("config")
def test_rejects_tensor_parallel_degree_not_dividing_the_heads(monkeypatch):
    # Every catalog model's head count divides 8; the SMP reference's GPT-J "xl" shape (25 heads) does not.
    from core.catalog import models

    xl = models.Model(
        adapters_summary="(a test model)",
        name="gpt-j-xl",
        hf_id="-",
        architecture="gptj",
        parameters=1_500_000_000,
        layers=48,
        hidden_size=1600,
        attention_heads=25,
        context_tokens=2048,
        vocab_size=50400,
    )
    monkeypatch.setitem(models.MODELS, "gpt-j-xl", xl)
    with pytest.raises(
        ValidationError, match=r"tensor_parallel_degree 4 does not divide the 25 attention heads of gpt-j-xl"
    ):
        serving(model="gpt-j-xl", tensor_parallel_degree=4, instance_type="ml.g5.12xlarge")


def test_config_file_errors_name_the_serving_field_path(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "stages:\n  dev:\n    region: us-east-1\n    serving: {model: opt-30b, instance_type: ml.g5.2xlarge}\n"
    )
    with pytest.raises(Exception, match=r"stages\.dev\.serving: .*does not fit ml\.g5\.2xlarge") as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_startup_timeout_is_sized_from_the_weights_each_host_loads():
    # SageMaker copies the weights before the container starts: the start-up covers the load from local disk, the
    # download timeout the copy (core/sizing.py), each kept within SageMaker's 600-3600 s window.
    assert (serving(model="gpt-j-6b").startup_timeout, serving(model="gpt-j-6b").download_timeout) == (600, 600)
    opt = serving(model="opt-30b", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge")
    assert (opt.startup_timeout, opt.download_timeout) == (600, 1260)  # 112 GiB stored as fp32 at most
    # The int8 checkpoint as stored: 160.8 GiB of int8 shards + 6.7 GiB of fp16 embeddings.
    bloom = serving(**BLOOM_INT8_P4D, weights=INT8_CHECKPOINT)
    assert (bloom.startup_timeout, bloom.download_timeout) == (1140, 1800)  # far more than GPT-J
    fp16 = serving(
        model="bloom-176b", tensor_parallel_degree=8, instance_type="ml.p4de.24xlarge", weights=FP16_CHECKPOINT
    )
    assert (fp16.startup_timeout, fp16.download_timeout) == (1980, 3420)
    assert serving(model="gpt-j-6b", startup_timeout_seconds=900).startup_timeout == 900
    assert serving(model="gpt-j-6b", download_timeout_seconds=1200).download_timeout == 1200


def test_host_memory_while_loading_is_estimated_per_rank_and_per_instance():
    bloom = serving(**BLOOM_INT8_P4D, weights=INT8_CHECKPOINT).host_fit()
    # Each rank: its 1/8 of the int8 shards (20.1 GiB) + the fp16 embeddings of non-tp.pt (6.7 GiB).
    assert (bloom.ranks, round(bloom.weights_per_rank_gib, 1), round(bloom.total_gib, 1)) == (8, 26.8, 238.4)
    assert bloom.capacity_gib == pytest.approx(1152 * 0.9)
    opt = serving(model="opt-30b", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge").host_fit()
    assert (opt.ranks, round(opt.weights_per_rank_gib, 1), round(opt.total_gib, 1)) == (4, 55.8, 235.3)
    # Two copies of TP 2 on four GPUs: four ranks load at once.
    copies = serving(model="gpt-j-6b", tensor_parallel_degree=2, instance_type="ml.g5.12xlarge").host_fit()
    assert (copies.ranks, round(copies.weights_per_rank_gib, 1)) == (4, 11.3)
    # vLLM ranks keep only their slice.
    vllm = serving(engine="vllm", model="opt-30b", tensor_parallel_degree=4, instance_type="ml.g5.24xlarge").host_fit()
    assert round(vllm.weights_per_rank_gib, 1) == 14.0


def test_bloom_example_serves_the_presharded_int8_checkpoint():
    for stage in load_config(REPO / "config/examples/bloom-176b-int8-p4d.yaml").stages.values():
        checkpoint = stage.serving.checkpoint
        assert (checkpoint.hf_id, checkpoint.dtype, checkpoint.tensor_parallel_degree) == (
            "microsoft/bloom-deepspeed-inference-int8",
            "int8",
            8,
        )
        assert checkpoint.revision == "aa00a6626f6484a2eef68e06d1e089e4e32aa571"  # the commit the reference staged
        assert stage.serving.staged_weights.name == "bloom-176b-deepspeed-int8-tp8"
        assert stage.serving.host_fit().fits


@pytest.mark.parametrize(
    "path", [*sorted((REPO / "config").glob("*/*.yaml")), REPO / "config/default.yaml"], ids=lambda p: p.name
)
def test_every_shipped_config_loads(path):
    if path.parent.name == "overlays":  # overlays are partial: they only make sense over a full config
        assert load_config(REPO / "config/default.yaml", overlays=(path,)).stages
    else:
        assert load_config(path).stages


# What SageMaker would refuse when the stack deploys, refused at synth with the field named (issue 14).
REFUSED_LATER = [
    ("an instance type endpoints do not offer", dict(instance_type="ml.p3dn.24xlarge"),
     r"instance_type: 'ml\.p3dn\.24xlarge' is not one of the \d+ values it accepts.*SageMaker CreateEndpointConfig "
     r"ProductionVariants\.InstanceType"),
    ("a linear step below 10% of the fleet", dict(deployment={"traffic": "linear", "step_percent": 5}),
     r"deployment\.step_percent: 5 is outside 10-50% \(SageMaker API reference, TrafficRoutingConfig\.LinearStepSize"),
    ("a canary above half the fleet", dict(deployment={"traffic": "canary", "step_percent": 60}),
     r"deployment\.step_percent: 60 is above 50% \(SageMaker API reference, TrafficRoutingConfig\.CanarySize"),
    ("a wait between steps above an hour", dict(deployment={"wait_seconds": 3601}),
     r"deployment\.wait_seconds: 3601 is above the maximum 3600.*WaitIntervalInSeconds"),
    ("a negative termination wait", dict(deployment={"termination_wait_seconds": -1}),
     r"deployment\.termination_wait_seconds: -1 is below the minimum 0.*TerminationWaitInSeconds"),
    ("data capture above 100%", dict(data_capture_percent=101),
     r"data_capture_percent: 101 is above the maximum 100.*DataCaptureConfig\.InitialSamplingPercentage"),
    ("a weights URI longer than a model data source", dict(weights={"source": "s3", "s3_uri": "s3://shared/" + "w/" * 600}),
     r"weights\.s3_uri: .* has 1212 characters, more than 1024, the limit of SageMaker "
     r"CreateModel PrimaryContainer\.ModelDataSource\.S3DataSource\.S3Uri"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("fields", "message"), [(r[1], r[2]) for r in REFUSED_LATER], ids=[r[0] for r in REFUSED_LATER]
)
def test_refuses_what_sagemaker_would_refuse_when_the_stack_deploys(fields, message):
    with pytest.raises(ValidationError, match=message):
        serving(**fields)


def test_accepts_the_deployment_limits_themselves():
    assert serving(deployment={"traffic": "linear", "step_percent": 10, "wait_seconds": 3600})
    assert serving(deployment={"traffic": "canary", "step_percent": 50, "termination_wait_seconds": 0})
    assert serving(data_capture_percent=100, download_timeout_seconds=3600, startup_timeout_seconds=60)
