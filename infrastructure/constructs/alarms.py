"""The endpoint's alarm rule, one home for the classic endpoint and each inference component: 2 of 3 one-minute
datapoints above the threshold (one slow request does not page anyone), missing data not breaching (an idle endpoint
is not broken), notifying the stage's alarm topic. Those that mean failure whatever the engine (5XX errors, model
latency, and the classic endpoint's disk) also roll a deployment back; GPU memory only notifies (gpu_memory_alarm)."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

# Engines whose GPU memory in use says something about their load. vLLM reserves gpu_memory_utilization (0.9 by
# default in LMI) of each GPU when it starts, for weights, activations and its KV cache, whatever the load, plus CUDA
# graphs and its runtime on top; SageMaker's GPUMemoryUtilization is the memory the containers hold, so on a healthy
# vLLM endpoint it is a constant near or above a 95% threshold. DeepSpeed's grows with the requests it batches.
GPU_MEMORY_ENGINES = ("deepspeed",)

# (construct id, metric, threshold, what is measured: for the description)
AlarmSpec = tuple[str, cloudwatch.IMetric, float, str]


def alarms_above(
    scope: Construct, subject: str, specs: Iterable[AlarmSpec], topic: sns.ITopic
) -> list[cloudwatch.Alarm]:
    """One alarm per spec, described as `<subject>: <what> above <threshold>`."""
    alarms = []
    for alarm_id, metric, threshold, what in specs:
        alarm = cloudwatch.Alarm(
            scope,
            alarm_id,
            alarm_description=f"{subject}: {what} above {threshold:g}",
            metric=metric,
            threshold=threshold,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(cw_actions.SnsAction(topic))
        alarms.append(alarm)
    return alarms


def gpu_memory_alarm(engine: str) -> bool:
    """Whether to alarm on GPU memory for `engine` (GPU_MEMORY_ENGINES). It notifies and never rolls a deployment back:
    memory in use is no failure, and a request that runs out of it answers 5XX, which does roll back."""
    return engine in GPU_MEMORY_ENGINES
