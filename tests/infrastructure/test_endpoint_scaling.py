"""Scaling on the right signal: concurrent requests (SageMaker's high-resolution metrics) by default, invocations
where a config asked for them; components scale their copies and wake from zero on the first failed request."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core import placement
from core.config import ServingConfig
from core.config.components import AutoscalingConfig
from tests.cdk_assembly import Assembly, render
from tests.conftest import synthesized_once
from tests.infrastructure.test_inference_components import EXAMPLE


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Assembly:
    """The example, synthesized once per run: test_inference_components.py reads the same folder."""
    assembly = synthesized_once(tmp_path_factory, "inference-components-assembly", EXAMPLE)
    assert assembly.error is None, assembly.error
    return assembly


def props(assembly: Assembly, stage: str, type_: str) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in assembly.resources(stage, "Serving", type_).items()}


# --- the config -------------------------------------------------------------------------------------------------


def test_concurrency_is_the_default_signal():
    assert AutoscalingConfig().scaling_metric == "concurrency"


def test_a_file_that_set_invocations_per_instance_keeps_scaling_on_invocations():
    # What `invocations_per_instance_per_minute: 60` meant before the concurrency signal existed.
    assert AutoscalingConfig(invocations_per_instance_per_minute=60).scaling_metric == "invocations"


def test_the_concurrency_target_defaults_to_what_the_engine_runs_at_once():
    # GPT-J TP 1 on a g5.12xlarge: 4 copies in one container, 4 sequences each.
    classic = ServingConfig.model_validate({"instance_type": "ml.g5.12xlarge", "max_batch_size": 4})
    assert placement.concurrency_target(classic) == 16
    with_components = ServingConfig.model_validate(
        {"instance_type": "ml.g5.12xlarge", "components": [{"name": "a", "max_batch_size": 8}]}
    )
    (component,) = with_components.component_servings().values()
    assert placement.concurrency_target(with_components, component) == 8


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        (
            {"metric": "concurrency", "invocations_per_instance_per_minute": 60},
            r"invocations_per_instance_per_minute is the target of metric 'invocations'",
        ),
        (
            {"invocations_per_instance_per_minute": 60, "concurrent_requests_per_copy": 4},
            r"concurrent_requests_per_copy is the target of metric 'concurrency'",
        ),
        ({"concurrent_requests_per_copy": 0}, r"greater than 0"),
    ],
    ids=["invocations target with the concurrency metric", "concurrency target with invocations", "zero target"],
)
def test_refuses_a_target_of_the_other_signal(scaling, message):
    with pytest.raises(ValidationError, match=message):
        AutoscalingConfig.model_validate(scaling)


# --- the synthesized scaling ----------------------------------------------------------------------------------------


def test_the_classic_endpoint_tracks_concurrent_requests_per_model_at_high_resolution(example):
    (target,) = props(example, "prod", "AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert (target["ResourceId"], target["MinCapacity"], target["MaxCapacity"]) == (
        "endpoint/llm-platform-prod/variant/AllTraffic",
        2,
        4,
    )
    (policy,) = props(example, "prod", "AWS::ApplicationAutoScaling::ScalingPolicy").values()
    assert policy["PolicyName"] == "llm-platform-prod-concurrent-requests"
    assert policy["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": 4,
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
        },
        "ScaleInCooldown": 900,
        "ScaleOutCooldown": 300,
    }


def test_each_component_scales_its_copies_down_to_zero_on_concurrent_requests_per_copy(example):
    targets = props(example, "dev", "AWS::ApplicationAutoScaling::ScalableTarget")
    assert sorted((t["ResourceId"], t["MinCapacity"], t["MaxCapacity"]) for t in targets.values()) == [
        ("inference-component/llm-platform-dev-base", 0, 1),
        ("inference-component/llm-platform-dev-tuned", 0, 1),
    ]
    assert {t["ScalableDimension"] for t in targets.values()} == {"sagemaker:inference-component:DesiredCopyCount"}
    assert all("RoleARN" not in t for t in targets.values())  # the service-linked role
    tracking = [
        p["TargetTrackingScalingPolicyConfiguration"]
        for p in props(example, "dev", "AWS::ApplicationAutoScaling::ScalingPolicy").values()
        if p["PolicyType"] == "TargetTrackingScaling"
    ]
    assert [t["PredefinedMetricSpecification"]["PredefinedMetricType"] for t in tracking] == [
        "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
    ] * 2
    assert {t["TargetValue"] for t in tracking} == {4}


def test_the_first_request_at_zero_wakes_the_component(example):
    policies = props(example, "dev", "AWS::ApplicationAutoScaling::ScalingPolicy")
    steps = {k: p for k, p in policies.items() if p["PolicyType"] == "StepScaling"}
    assert len(steps) == 2
    alarms = [
        a
        for a in props(example, "dev", "AWS::CloudWatch::Alarm").values()
        if a["MetricName"] == "NoCapacityInvocationFailures"
    ]
    assert len(alarms) == 2
    for alarm in alarms:
        (dimension,) = alarm["Dimensions"]
        assert dimension["Name"] == "InferenceComponentName"
        assert (alarm["Namespace"], alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == (
            "AWS/SageMaker",
            "Sum",
            60,
            1,
        )
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
        (action,) = alarm["AlarmActions"]
        policy = steps[action["Ref"]]
        assert policy["PolicyName"] == f"{dimension['Value']}-scale-from-zero"
        assert policy["StepScalingPolicyConfiguration"] == {
            "AdjustmentType": "ChangeInCapacity",
            "MetricAggregationType": "Maximum",
            "Cooldown": 60,
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
        }
        # The policy scales this component's own target.
        target = render(policy["ScalingTargetId"])
        assert dimension["Value"].removeprefix("llm-platform-dev-").capitalize() in target
