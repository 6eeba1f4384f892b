"""Application Auto Scaling for an endpoint: the classic variant's instance count, or each inference component's
copy count, tracking concurrent requests (or invocations), and the wake-up from zero copies.

- Concurrency: SageMaker's high-resolution ConcurrentRequestsPerModel / ConcurrentRequestsPerCopy, published every
  10 seconds and counting a streamed request until its last token, so scale-out follows long generations within
  seconds (docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html).
- Scale from zero: target tracking cannot leave zero copies (it divides by the copies), so a component that may reach
  zero also gets a step-scaling policy adding one copy, run by an alarm on NoCapacityInvocationFailures, which
  SageMaker publishes when a request finds no copy (docs.aws.amazon.com/sagemaker/latest/dg/
  endpoint-auto-scaling-zero-instances.html). The request that wakes the component fails; the copy, and the instance
  under it, take minutes (the plan's cold start).

No RoleARN on the scalable targets: Application Auto Scaling uses its service-linked role for SageMaker.
"""

from __future__ import annotations

import jsii
from aws_cdk import Duration
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from core.config.components import WAKE_PERIOD_SECONDS, AutoscalingConfig, ComponentConfig
from core.naming import component_policy_name, scale_from_zero_policy_name, variant_policy_name

VARIANT_METRICS = {
    "concurrency": "SageMakerVariantConcurrentRequestsPerModelHighResolution",
    "invocations": "SageMakerVariantInvocationsPerInstance",
}
COMPONENT_METRICS = {
    "concurrency": "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution",
    "invocations": "SageMakerInferenceComponentInvocationsPerCopy",
}
WAKE_COOLDOWN_SECONDS = 60


def _target_tracking(
    scaling: AutoscalingConfig, metrics: dict[str, str], concurrency_target: float
) -> appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty:
    metric = scaling.scaling_metric
    target = concurrency_target if metric == "concurrency" else scaling.invocations_target
    return appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
        target_value=float(target),
        predefined_metric_specification=appscaling.CfnScalingPolicy.PredefinedMetricSpecificationProperty(
            predefined_metric_type=metrics[metric]
        ),
        scale_in_cooldown=scaling.scale_in_cooldown_seconds,
        scale_out_cooldown=scaling.scale_out_cooldown_seconds,
    )


def variant_scaling(
    scope: Construct,
    *,
    endpoint_name: str,
    variant_name: str,
    endpoint: sagemaker.CfnEndpoint,
    scaling: AutoscalingConfig,
    concurrency_target: float,
) -> appscaling.CfnScalableTarget:
    """The classic endpoint: instances between min_instances and max_instances. `concurrency_target`: requests at
    once per model container (one per instance), placement.concurrency_target."""
    target = appscaling.CfnScalableTarget(
        scope,
        "ScalableTarget",
        service_namespace="sagemaker",
        resource_id=f"endpoint/{endpoint_name}/variant/{variant_name}",
        scalable_dimension="sagemaker:variant:DesiredInstanceCount",
        min_capacity=scaling.min_instances,
        max_capacity=scaling.max_instances,
    )
    target.node.add_dependency(endpoint)
    # The construct id stays what it was when invocations were the only signal: a changed id would replace the policy.
    appscaling.CfnScalingPolicy(
        scope,
        "InvocationsPerInstance",
        policy_name=variant_policy_name(endpoint_name, scaling.scaling_metric),
        policy_type="TargetTrackingScaling",
        scaling_target_id=target.ref,
        target_tracking_scaling_policy_configuration=_target_tracking(scaling, VARIANT_METRICS, concurrency_target),
    )
    return target


@jsii.implements(cloudwatch.IAlarmAction)
class _RunPolicy:
    """An alarm action that runs an Application Auto Scaling policy (its ARN is the policy's Ref)."""

    def __init__(self, policy: appscaling.CfnScalingPolicy) -> None:
        self.policy = policy

    def bind(self, _scope: Construct, _alarm: cloudwatch.IAlarm) -> cloudwatch.AlarmActionConfig:
        return cloudwatch.AlarmActionConfig(alarm_action_arn=self.policy.ref)


class ComponentScaling(Construct):
    """One inference component's copies between min_copies and max_copies; with min_copies 0, the wake-up from zero.

    Args:
        component_name: the component's full name (<endpoint>-<name>).
        component: the component resource (the scalable target must wait for it).
        config: the component's config (copies).
        scaling: the stage's autoscaling (metric, targets, cooldowns).
        concurrency_target: requests at once per copy (placement.concurrency_target).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        component_name: str,
        component: sagemaker.CfnInferenceComponent,
        config: ComponentConfig,
        scaling: AutoscalingConfig,
        concurrency_target: float,
    ) -> None:
        super().__init__(scope, construct_id)
        self.target = appscaling.CfnScalableTarget(
            self,
            "ScalableTarget",
            service_namespace="sagemaker",
            resource_id=f"inference-component/{component_name}",
            scalable_dimension="sagemaker:inference-component:DesiredCopyCount",
            min_capacity=config.min_copies,
            max_capacity=config.max_copies,
        )
        self.target.node.add_dependency(component)
        self.tracking = appscaling.CfnScalingPolicy(
            self,
            "Tracking",
            policy_name=component_policy_name(component_name, scaling.scaling_metric),
            policy_type="TargetTrackingScaling",
            scaling_target_id=self.target.ref,
            target_tracking_scaling_policy_configuration=_target_tracking(
                scaling, COMPONENT_METRICS, concurrency_target
            ),
        )
        self.wake = self._wake_from_zero(component_name) if config.min_copies == 0 else None

    def _wake_from_zero(self, component_name: str) -> cloudwatch.Alarm:
        policy = appscaling.CfnScalingPolicy(
            self,
            "ScaleFromZero",
            policy_name=scale_from_zero_policy_name(component_name),
            policy_type="StepScaling",
            scaling_target_id=self.target.ref,
            step_scaling_policy_configuration=appscaling.CfnScalingPolicy.StepScalingPolicyConfigurationProperty(
                adjustment_type="ChangeInCapacity",
                metric_aggregation_type="Maximum",
                cooldown=WAKE_COOLDOWN_SECONDS,
                step_adjustments=[
                    appscaling.CfnScalingPolicy.StepAdjustmentProperty(
                        metric_interval_lower_bound=0, scaling_adjustment=1
                    )
                ],
            ),
        )
        alarm = cloudwatch.Alarm(
            self,
            "NoCapacity",
            alarm_description=f"{component_name}: a request found no copy; adds one (scale from zero)",
            metric=cloudwatch.Metric(
                namespace="AWS/SageMaker",
                metric_name="NoCapacityInvocationFailures",
                dimensions_map={"InferenceComponentName": component_name},
                statistic="Sum",
                period=Duration.seconds(WAKE_PERIOD_SECONDS),
            ),
            threshold=1,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(_RunPolicy(policy))
        return alarm
