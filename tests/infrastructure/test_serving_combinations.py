"""Every VPC x engine x components combination of a stage, synthesized once.

serving.vpc: whatever starts instances in the VPC waits for the hosting role's network-interface grant. SageMaker
creates the instances' network interfaces with the execution role when it creates the Model (classic), and when it
starts the endpoint's instances or a component's copies (components: VpcConfig sits on the EndpointConfig).
The hosting role has no other ec2:* grant, so each of those resources must depend on the VpcAccess policy, or
CloudFormation may create it first.

Rollback: a deployment rolls back only on what means failure for its engine (5XX errors, model latency). GPU memory is
not one: vLLM reserves gpu_memory_utilization (0.9 by default in LMI) of each GPU when it starts, whatever the load,
and SageMaker's GPUMemoryUtilization is the memory the containers hold, so a healthy vLLM endpoint sits near or above a
95% threshold. DeepSpeed's GPU memory grows with the requests it batches: its alarm notifies, and rolls nothing back.
"""

from __future__ import annotations

import itertools

import pytest
import yaml

from tests.cdk_assembly import Assembly, synthesize

VPC = {"subnet_ids": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]}
ENGINES = ("deepspeed", "vllm")
# What starts instances or containers in the VPC, for each layout.
STARTS_INSTANCES = {
    "classic": ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint"),
    "components": (
        "AWS::SageMaker::Model",
        "AWS::SageMaker::EndpointConfig",
        "AWS::SageMaker::Endpoint",
        "AWS::SageMaker::InferenceComponent",
    ),
}
COMBINATIONS = list(itertools.product((True, False), ENGINES, STARTS_INSTANCES))


def stage_name(in_vpc: bool, engine: str, layout: str) -> str:
    return f"{'vpc' if in_vpc else 'open'}-{engine[:2]}-{layout[:4]}"


def serving(in_vpc: bool, engine: str, layout: str) -> dict:
    fields = {"engine": engine, "model": "gpt-j-6b", "instance_type": "ml.g5.2xlarge"}
    if layout == "components":
        fields["components"] = [{"name": "base"}, {"name": "tuned", "weights": {"source": "latest_approved"}}]
        fields["autoscaling"] = {"min_instances": 2, "max_instances": 2}
    return fields | ({"vpc": VPC} if in_vpc else {})


@pytest.fixture(scope="module")
def combinations(tmp_path_factory) -> Assembly:
    folder = tmp_path_factory.mktemp("vpc-combinations")
    stages = {
        stage_name(*combination): {"region": "us-east-1", "removal_policy": "destroy", "serving": serving(*combination)}
        for combination in COMBINATIONS
    }
    config = folder / "vpc.yaml"
    config.write_text(yaml.safe_dump({"project": "vpc", "stages": stages}))
    assembly = synthesize(config, folder / "out")
    assert assembly.error is None, assembly.error
    return assembly


def referenced(value) -> set[str]:
    """The logical ids a property value names (Ref, Fn::GetAtt): CloudFormation creates those first."""
    if isinstance(value, dict):
        names = {value["Ref"]} if isinstance(value.get("Ref"), str) else set()
        if "Fn::GetAtt" in value:
            names.add(value["Fn::GetAtt"][0])
        return names.union(*(referenced(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(referenced(v) for v in value))
    return set()


def waits_for(resources: dict, logical_id: str) -> set[str]:
    """Every resource CloudFormation creates before `logical_id`: DependsOn and references, transitively."""
    seen: set[str] = set()
    todo = [logical_id]
    while todo:
        resource = resources[todo.pop()]
        depends = resource.get("DependsOn", [])
        before = {depends} if isinstance(depends, str) else set(depends)
        before |= referenced(resource.get("Properties", {})) & set(resources)
        todo += sorted(before - seen)
        seen |= before
    return seen


@pytest.mark.parametrize(("in_vpc", "engine", "layout"), COMBINATIONS, ids=lambda v: str(v))
def test_everything_that_starts_instances_in_the_vpc_waits_for_the_network_interface_grant(
    combinations, in_vpc, engine, layout
):
    stage = stage_name(in_vpc, engine, layout)
    resources = combinations.template(stage, "Serving")["Resources"]
    policies = [k for k in combinations.resources(stage, "Serving", "AWS::IAM::Policy") if k.startswith("VpcAccess")]
    if not in_vpc:
        assert policies == []
        return
    (policy,) = policies
    waiting = {
        logical_id: policy in waits_for(resources, logical_id)
        for type_ in STARTS_INSTANCES[layout]
        for logical_id in combinations.resources(stage, "Serving", type_)
    }
    expected = {"classic": 3, "components": 2 + 1 + 1 + 2}[layout]  # two Models and two components with components
    assert len(waiting) == expected and all(waiting.values()), waiting


ROLLBACK_METRICS = {
    # The classic endpoint's instances' disk alarm rolls back too (it is no engine's normal state: sizing leaves room).
    "classic": ["DiskUtilization", "Invocation5XXErrors", "ModelLatency"],
    "components": ["Invocation5XXErrors", "ModelLatency"],
}
GPU_MEMORY = {"classic": "GPUMemoryUtilization", "components": "GPUMemoryUtilizationNormalized"}


def rollback_alarm_lists(assembly: Assembly, stage: str, layout: str) -> list[list[str]]:
    """The alarms (logical ids) each deployment rolls back on: the endpoint's blue/green, or each component's."""
    if layout == "classic":
        (endpoint,) = assembly.resources(stage, "Serving", "AWS::SageMaker::Endpoint").values()
        configs = [endpoint["Properties"]["DeploymentConfig"]]
    else:
        components = assembly.resources(stage, "Serving", "AWS::SageMaker::InferenceComponent").values()
        configs = [c["Properties"]["DeploymentConfig"] for c in components]
    return [[a["AlarmName"]["Ref"] for a in c["AutoRollbackConfiguration"]["Alarms"]] for c in configs]


@pytest.mark.parametrize(("in_vpc", "engine", "layout"), COMBINATIONS, ids=lambda v: str(v))
def test_deployments_roll_back_only_on_what_means_failure_for_the_engine(combinations, in_vpc, engine, layout):
    stage = stage_name(in_vpc, engine, layout)
    alarms = combinations.resources(stage, "Serving", "AWS::CloudWatch::Alarm")
    lists = rollback_alarm_lists(combinations, stage, layout)
    assert len(lists) == {"classic": 1, "components": 2}[layout]
    for rollback in lists:
        assert sorted(alarms[a]["Properties"]["MetricName"] for a in rollback) == ROLLBACK_METRICS[layout]
    gpu_memory = [a for a in alarms.values() if a["Properties"]["MetricName"] == GPU_MEMORY[layout]]
    # vLLM's reservation makes GPU memory a constant, not a signal; DeepSpeed's still warns, by the alarm topic only.
    assert len(gpu_memory) == {"vllm": 0, "deepspeed": len(lists)}[engine]
    assert all(alarm["Properties"]["AlarmActions"] for alarm in gpu_memory)
