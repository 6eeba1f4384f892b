"""The steps' assertions: on moto where it implements the calls (the model package and its evaluation report, the
alarms, the scaling policies), on fakes where only AWS answers (an endpoint's replies, a cold start)."""

from __future__ import annotations

import contextlib
import datetime
import json

import pytest
from botocore.stub import Stubber

from core.config import load_config
from integ import actions as actions_module
from integ.actions import Actions, StepFailed, StepTimeout, expected_policies
from integ.commands import REPO
from scripts.smoke_test import Reply, StreamReply
from tests.integ.conftest import NAMES, deploy

STAGE = load_config(REPO / "integ" / "config.yaml").stages["integ"]


def actions_on(aws) -> Actions:
    made = Actions(commands=None, aws=aws, stage=STAGE, names=NAMES)
    made.poll_s = 0
    return made


def put_report(aws, perplexity) -> None:
    aws.client("s3").put_object(
        Bucket="integ-data", Key="evaluation.json", Body=json.dumps({"metrics": {"perplexity": {"value": perplexity}}})
    )


def test_the_new_package_pending_approval_with_its_evaluation_report_passes(aws):
    made = deploy(aws)
    put_report(aws, 7.25)

    data = actions_on(aws).package_pending(60)

    assert data == {"package": made.packages[0], "report": "s3://integ-data/evaluation.json", "perplexity": 7.25}


def test_a_package_already_approved_fails_the_step(aws):
    made = deploy(aws)
    put_report(aws, 7.25)
    aws.client("sagemaker").update_model_package(ModelPackageArn=made.packages[0], ModelApprovalStatus="Approved")

    with pytest.raises(StepFailed, match="is Approved, not pending"):
        actions_on(aws).package_pending(60)


def test_a_report_without_a_finite_perplexity_fails_the_step(aws):
    deploy(aws)
    put_report(aws, "NaN")

    with pytest.raises(StepFailed, match="no finite perplexity"):
        actions_on(aws).package_pending(60)


def test_no_package_registered_fails_the_step(aws):
    aws.client("sagemaker").create_model_package_group(ModelPackageGroupName=NAMES.pipelines.model_package_group)

    with pytest.raises(StepFailed, match="registered nothing"):
        actions_on(aws).package_pending(60)


def put_alarms(aws) -> list[dict]:
    """Two alarms in CloudWatch (moto), as the serving stack's resources name them."""
    cloudwatch = aws.client("cloudwatch")
    rows = []
    for name in ("llmp-integ-integ-base-5xx", "llmp-integ-integ-base-latency"):
        cloudwatch.put_metric_alarm(
            AlarmName=name,
            MetricName="Invocation5XXErrors",
            Namespace="AWS/SageMaker",
            Statistic="Sum",
            Period=60,
            EvaluationPeriods=3,
            Threshold=1,
            ComparisonOperator="GreaterThanOrEqualToThreshold",
        )
        rows.append({"type": "AWS::CloudWatch::Alarm", "logical_id": name, "physical_id": name})
    return rows


@contextlib.contextmanager
def scaling_policies(aws, present: list[str]):
    """DescribeScalingPolicies through botocore's Stubber (moto 5.2.5 refuses the inference-component dimension):
    the request must be the one expected, and the answer has the API's own shape."""
    client = aws.client("application-autoscaling")
    with Stubber(client) as stub:
        stub.add_response(
            "describe_scaling_policies",
            {
                "ScalingPolicies": [
                    {
                        "PolicyARN": f"arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:x:resource/{name}",
                        "PolicyName": name,
                        "ServiceNamespace": "sagemaker",
                        "ResourceId": "inference-component/llmp-integ-integ-base",
                        "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
                        "PolicyType": "StepScaling",
                        "CreationTime": datetime.datetime(2026, 1, 1),
                    }
                    for name in present
                ]
            },
            {"ServiceNamespace": "sagemaker", "PolicyNames": expected_policies(STAGE, NAMES)},
        )
        yield
        stub.assert_no_pending_responses()


def test_the_policies_expected_are_the_tracking_and_the_wake_policy_of_the_base():
    assert expected_policies(STAGE, NAMES) == [
        "llmp-integ-integ-base-concurrent-requests",
        "llmp-integ-integ-base-scale-from-zero",
    ]


def test_alarms_and_scaling_pass_when_cloudwatch_and_autoscaling_know_them(aws, monkeypatch):
    rows = put_alarms(aws)
    monkeypatch.setattr(aws, "stack_resources", lambda name: rows)

    with scaling_policies(aws, expected_policies(STAGE, NAMES)):
        data = actions_on(aws).alarms_and_scaling(60)

    assert data["alarms"] == 2 and data["scaling_policies"] == sorted(expected_policies(STAGE, NAMES))


def test_a_missing_wake_policy_fails_the_step(aws, monkeypatch):
    rows = put_alarms(aws)
    monkeypatch.setattr(aws, "stack_resources", lambda name: rows)

    with scaling_policies(aws, expected_policies(STAGE, NAMES)[:1]), pytest.raises(StepFailed, match="scale-from-zero"):
        actions_on(aws).alarms_and_scaling(60)


def test_an_alarm_of_the_stack_that_cloudwatch_does_not_know_fails_the_step(aws, monkeypatch):
    rows = [*put_alarms(aws), {"type": "AWS::CloudWatch::Alarm", "logical_id": "Gone", "physical_id": "gone-alarm"}]
    monkeypatch.setattr(aws, "stack_resources", lambda name: rows)

    with pytest.raises(StepFailed, match="gone-alarm"):
        actions_on(aws).alarms_and_scaling(60)


def test_a_serving_stack_without_alarms_fails_the_step(aws, monkeypatch):
    monkeypatch.setattr(aws, "stack_resources", lambda name: [])

    with pytest.raises(StepFailed, match="no CloudWatch alarm"):
        actions_on(aws).alarms_and_scaling(60)


# --- what only a real endpoint answers: fakes in the smoke test's own reply types ------------------------------


class FakeTarget:
    def __init__(self, component: str, text: str = " Paris.", streamed: str | None = None, bad_status: int = 400):
        self.name, self.component = NAMES.endpoint, component
        self.text, self.streamed, self.bad_status = text, text if streamed is None else streamed, bad_status

    def invoke(self, payload: dict) -> Reply:
        if payload["parameters"].get("max_new_tokens") == "many":
            return Reply(self.bad_status, b'{"error": "max_new_tokens must be an integer"}')
        body = {"generated_text": self.text, "details": {"generated_tokens": 3}}
        return Reply(200, json.dumps(body).encode())

    def invoke_stream(self, payload: dict) -> StreamReply:
        lines = [{"token": {"text": self.streamed}}, {"token": {"text": ""}, "generated_text": self.streamed}]
        body = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return StreamReply(200, "application/jsonlines", [body])


def with_targets(targets: list[FakeTarget]) -> Actions:
    made = Actions(commands=None, aws=None, stage=STAGE, names=NAMES)
    made.targets = lambda: targets
    return made


def test_invoke_stream_and_bad_request_pass_on_answers_in_the_agreed_shape():
    made = with_targets([FakeTarget("llmp-integ-integ-base"), FakeTarget("llmp-integ-integ-tuned")])

    data = made.invoke(60)
    made.stream(60)
    refused = made.bad_request(60)

    assert set(data["answers"]) == {"llmp-integ-integ-base", "llmp-integ-integ-tuned"}
    assert all(speed and speed > 0 for speed in data["tokens_per_second"].values())
    assert refused["statuses"] == {"llmp-integ-integ-base": 400, "llmp-integ-integ-tuned": 400}


def test_a_stream_that_differs_from_the_greedy_answer_fails_the_step():
    made = with_targets([FakeTarget("llmp-integ-integ-tuned", text=" Paris.", streamed=" Lyon.")])
    made.invoke(60)

    with pytest.raises(StepFailed, match="not the non-streamed greedy answer"):
        made.stream(60)


def test_a_malformed_request_answered_500_fails_the_step():
    with pytest.raises(StepFailed, match="answered 500"):
        with_targets([FakeTarget("llmp-integ-integ-base", bad_status=500)]).bad_request(60)


class ColdAws:
    """An endpoint whose instances go to zero two polls after its copies do."""

    region = "us-east-1"
    session = None

    def __init__(self) -> None:
        self.copies: dict[str, int] = {}
        self.polls = 0

    def set_copy_count(self, component: str, copies: int) -> None:
        self.copies[component] = copies

    def endpoint(self, name: str) -> dict:
        self.polls += 1
        count = 0 if self.copies and self.polls > 2 else 1
        return {"EndpointStatus": "InService", "ProductionVariants": [{"CurrentInstanceCount": count}]}


class WakingTarget(FakeTarget):
    """Fails with no capacity twice (the failures wake it), then answers."""

    failures = 2

    def invoke(self, payload: dict) -> Reply:
        if WakingTarget.failures:
            WakingTarget.failures -= 1
            raise RuntimeError("ValidationError: Inference Component has no capacity to process this request")
        return super().invoke(payload)


def test_cold_start_scales_to_zero_then_times_the_first_answer(monkeypatch):
    aws = ColdAws()
    made = Actions(commands=None, aws=aws, stage=STAGE, names=NAMES)
    made.poll_s = 0
    monkeypatch.setattr(actions_module.smoke_test, "SageMakerEndpoint", lambda name, session: WakingTarget(""))
    monkeypatch.setattr(WakingTarget, "of_component", lambda self, name: WakingTarget(name), raising=False)

    data = made.cold_start(60)

    assert aws.copies == {"llmp-integ-integ-base": 0}
    assert data["requests"] == 3 and data["cold_start_seconds"] >= 0


def test_cold_start_times_out_when_the_endpoint_never_reaches_zero(monkeypatch):
    class NeverZero(ColdAws):
        def endpoint(self, name: str) -> dict:
            return {"ProductionVariants": [{"CurrentInstanceCount": 1}]}

    made = Actions(commands=None, aws=NeverZero(), stage=STAGE, names=NAMES)
    made.poll_s = 0.01

    with pytest.raises(StepTimeout, match="zero instances"):
        made.cold_start(0.05)
