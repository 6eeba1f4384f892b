"""Inference components: several models on one endpoint, each with its own copies, GPUs, memory, weights, alarms and
rolling update; what SageMaker would refuse is refused when the config loads."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from core import placement, sizing
from core.catalog.models import MODELS
from core.config import ServingConfig
from tests.cdk_assembly import REPO, Assembly, render, short_id
from tests.conftest import synthesized_once

EXAMPLE = REPO / "config" / "examples" / "inference-components.yaml"


@pytest.fixture(scope="session")
def example(tmp_path_factory) -> Assembly:
    """config/examples/inference-components.yaml, synthesized once per run (shared with test_endpoint_scaling.py)."""
    assembly = synthesized_once(tmp_path_factory, "inference-components-assembly", EXAMPLE)
    assert assembly.error is None, assembly.error
    return assembly


def serving(**fields) -> ServingConfig:
    return ServingConfig.model_validate({"engine": "vllm", **fields})


TWO_GPTJ = dict(
    instance_type="ml.g5.2xlarge",
    autoscaling={"min_instances": 0, "max_instances": 2},
    components=[
        {"name": "base", "min_copies": 0},
        {"name": "tuned", "min_copies": 0, "weights": {"source": "latest_approved"}},
    ],
)


# --- the config -------------------------------------------------------------------------------------------------


def test_each_component_takes_the_stage_serving_values_it_does_not_set():
    config = serving(**TWO_GPTJ)
    base, tuned = config.component_servings().values()
    assert (base.model, base.weights.source, tuned.model, tuned.weights.source) == (
        "gpt-j-6b",
        "pretrained",
        "gpt-j-6b",
        "latest_approved",
    )


def test_a_copy_reserves_its_tensor_parallel_gpus_and_the_host_memory_its_ranks_load_with():
    # GPT-J fp16 with vLLM: one rank holding its 11.3 GiB slice plus 3 GiB of process, in MiB.
    config = serving(
        instance_type="ml.g5.12xlarge", components=[{"name": "a"}, {"name": "b", "tensor_parallel_degree": 2}]
    )
    copies = {name: placement.copy_of(name, s) for name, s in config.component_servings().items()}
    assert (copies["a"].gpus, copies["a"].memory_mb) == (1, 14618)
    # Two ranks, each holding half the weights: vLLM loads only its slice.
    half = sizing.weights_gib(MODELS["gpt-j-6b"], "fp16") / 2
    assert (copies["b"].gpus, copies["b"].memory_mb) == (2, math.ceil(2 * (half + sizing.HOST_OVERHEAD_GIB) * 1024))


def test_the_deepspeed_engine_runs_as_a_component_one_worker_per_copy():
    # DJL 0.27's MPI mode starts GPUs / tensor parallel degree workers; a copy sees only its own GPUs, so one worker.
    # from_pretrained holds the whole model on every rank: the reservation says so.
    config = ServingConfig.model_validate(
        {
            "engine": "deepspeed",
            "instance_type": "ml.g5.12xlarge",
            "components": [{"name": "a", "tensor_parallel_degree": 2}],
        }
    )
    (copy,) = (placement.copy_of(n, s) for n, s in config.component_servings().items())
    assert copy.gpus == 2 and copy.memory_mb > 2 * 11 * 1024


def test_the_endpoint_starts_with_the_instances_the_first_copies_need():
    # One GPU per g5.2xlarge: each component's first copy needs an instance of its own.
    assert placement.initial_instances(serving(**TWO_GPTJ)) == 2
    # Four GPUs on a g5.12xlarge: both copies on one.
    assert placement.initial_instances(serving(**{**TWO_GPTJ, "instance_type": "ml.g5.12xlarge"})) == 1


REJECTED = [
    ("scale to zero while a component keeps a copy",
     dict(TWO_GPTJ, components=[{"name": "base", "min_copies": 1}]),
     r"autoscaling\.min_instances 0, but components keep copies running: base \(1\); an instance holds them"),
    ("more copies than the instances at most can hold",
     dict(TWO_GPTJ, components=[{"name": "base", "min_copies": 0, "max_copies": 3}]),
     r"the components' max_copies \(base: 3 x 1 GPU\(s\)\) need 3 instance\(s\) of ml\.g5\.2xlarge .* more than "
     r"autoscaling\.max_instances 2"),
    ("two components of one name",
     dict(TWO_GPTJ, components=[{"name": "base", "min_copies": 0}, {"name": "base", "min_copies": 0}]),
     r"components: base named more than once"),
    ("a component sharded over more GPUs than an instance has",
     dict(TWO_GPTJ, components=[{"name": "base", "min_copies": 0, "tensor_parallel_degree": 2}]),
     r"component base: tensor_parallel_degree 2 must divide the 1 GPU\(s\) of ml\.g5\.2xlarge"),
    ("a component model that does not fit the GPUs",
     dict(TWO_GPTJ, components=[{"name": "big", "min_copies": 0, "model": "opt-30b"}]),
     r"component big: opt-30b fp16 with tensor_parallel_degree 1 does not fit ml\.g5\.2xlarge"),
    ("canary traffic shifting with components",
     dict(TWO_GPTJ, deployment={"traffic": "canary"}),
     r"inference components update by a rolling update of their copies"),
    ("a component name that makes the full name too long for SageMaker",
     dict(TWO_GPTJ, components=[{"name": "a-very-long-component-name", "min_copies": 0}]),
     r"at most 17 characters"),
    ("min copies above max copies",
     dict(TWO_GPTJ, components=[{"name": "base", "min_copies": 2, "max_copies": 1}]),
     r"component base: min_copies 2 is above max_copies 1"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("fields", "message"), [(r[1], r[2]) for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_refuses_components_sagemaker_could_not_place_or_update(fields, message):
    with pytest.raises(ValidationError, match=message):
        serving(**fields)


# --- the synthesized endpoint -------------------------------------------------------------------------------------


def resources(example: Assembly, stage: str, type_: str) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in example.resources(stage, "Serving", type_).items()}


def test_the_variant_holds_instances_only_scaled_by_sagemaker_down_to_zero(example):
    (config,) = resources(example, "dev", "AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["ProductionVariants"]
    assert "ModelName" not in variant
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2}
    assert variant["InitialInstanceCount"] == 2
    # The containers of the components run with the hosting role, isolated.
    assert "HostingRole" in json.dumps(config["ExecutionRoleArn"])
    assert config["EnableNetworkIsolation"] is True


def test_two_gptj_components_side_by_side_each_with_its_own_model_weights_and_name(example):
    found = resources(example, "dev", "AWS::SageMaker::InferenceComponent")
    by_name = {props["InferenceComponentName"]: props for props in found.values()}
    assert sorted(by_name) == ["llm-platform-dev-base", "llm-platform-dev-tuned"]
    models = resources(example, "dev", "AWS::SageMaker::Model")
    sources = {}
    for name, props in by_name.items():
        spec = props["Specification"]
        assert spec["ComputeResourceRequirements"] == {
            "NumberOfAcceleratorDevicesRequired": 1,
            "MinMemoryRequiredInMb": 14618,
        }
        assert props["RuntimeConfig"] == {"CopyCount": 1}
        assert props["VariantName"] == "AllTraffic"
        model = models[spec["ModelName"]["Fn::GetAtt"][0]]
        sources[name] = json.dumps(render(model["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]["S3Uri"]))
    # Each component's weights come from its own deploy-time lookup: the staged record, the approved package.
    assert "ComponentBaseWeightsLookup" in sources["llm-platform-dev-base"]
    assert "ComponentTunedWeightsLookup" in sources["llm-platform-dev-tuned"]
    lookups = {short_id(k) for k in example.resources("dev", "Serving", "Custom::AWS")}
    assert lookups == {
        "ComponentBaseWeightsLookup",
        "ComponentTunedWeightsLookup",
        "ComponentTunedLatestApprovedModelPackage",
    }


def test_components_roll_their_copies_one_at_a_time_and_roll_back_on_their_own_alarms(example):
    alarms = resources(example, "dev", "AWS::CloudWatch::Alarm")
    for props in resources(example, "dev", "AWS::SageMaker::InferenceComponent").values():
        deployment = props["DeploymentConfig"]
        assert deployment["RollingUpdatePolicy"] == {
            "MaximumBatchSize": {"Type": "COPY_COUNT", "Value": 1},
            "WaitIntervalInSeconds": 600,
        }
        watched = [alarms[a["AlarmName"]["Ref"]] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
        # vLLM reserves 90% of each GPU at start: GPU memory is no failure signal, and no alarm (alarms.py).
        assert sorted(a["MetricName"] for a in watched) == ["Invocation5XXErrors", "ModelLatency"]
        assert all(
            a["Dimensions"] == [{"Name": "InferenceComponentName", "Value": props["InferenceComponentName"]}]
            for a in watched
        )
    # No blue/green on an endpoint of components; the classic prod endpoint keeps it.
    (dev_endpoint,) = resources(example, "dev", "AWS::SageMaker::Endpoint").values()
    (prod_endpoint,) = resources(example, "prod", "AWS::SageMaker::Endpoint").values()
    assert "DeploymentConfig" not in dev_endpoint
    assert prod_endpoint["DeploymentConfig"]["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]["Type"] == "CANARY"


def test_the_dashboard_has_a_row_per_component(example):
    (dashboard,) = resources(example, "dev", "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["DashboardBody"])
    for name in ("llm-platform-dev-base", "llm-platform-dev-tuned"):
        assert f'InferenceComponentName\\",\\"{name}' in body
    assert "NoCapacityInvocationFailures" in body and "GPUMemoryUtilizationNormalized" in body
