"""The endpoint's alarm rule, one home for the classic endpoint and each inference component: 2 of 3 one-minute
datapoints above the threshold (one slow request does not page anyone), missing data not breaching (an idle endpoint
is not broken), notifying the stage's alarm topic. The same alarms roll a deployment back."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

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
