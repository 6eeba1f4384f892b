"""What moto does not emulate: the instance-type probe, skipped types from the server log, re-created roles."""

from __future__ import annotations

from rehearsal import emulator, gaps
from rehearsal.assembly import StackTemplate

ACCOUNT = "123456789012"


def test_the_emulator_takes_a_g5_endpoint_refuses_a_training_only_type_and_the_probe_leaves_nothing(aws):
    with emulator.patched():
        accepted = gaps.probe_instance_type(aws, "ml.g5.2xlarge", account=ACCOUNT)
        rejected = gaps.probe_instance_type(aws, "ml.p3dn.24xlarge", account=ACCOUNT)
    assert accepted.rejection is None
    assert "Value 'ml.p3dn.24xlarge' at 'instanceType' failed to satisfy constraint" in rejected.rejection
    assert aws("sagemaker").list_models()["Models"] == []
    assert aws("sagemaker").list_endpoint_configs()["EndpointConfigs"] == []

    line = gaps.instance_type_line(accepted, "ml.g5.2xlarge", [])
    assert line.startswith("instance types: the endpoint was deployed on its configured ml.g5.2xlarge, which the ")
    changes = ["serving.instance_type ml.p3dn.24xlarge -> ml.p4d.24xlarge"]
    line = gaps.instance_type_line(rejected, "ml.p4d.24xlarge", changes)
    assert line.startswith("instance types: the emulator rejects ml.p3dn.24xlarge for an endpoint, as SageMaker does (")
    assert "enum value set: [its own list]" in line
    assert line.endswith(
        f"{changes[0]}. The real config is unchanged, and the ml.p3dn.24xlarge endpoint itself is not rehearsed"
    )
    line = gaps.instance_type_line(rejected, "ml.p3dn.24xlarge", [])
    assert line.endswith("and the overlays leave it in place, so the serving stack cannot deploy on moto")


def test_skipped_types_come_from_the_server_log_with_their_count_in_the_templates():
    log = (
        "parsing.py:341: UserWarning: Tried to parse AWS::CloudWatch::Alarm but it's not supported by moto's "
        "CloudFormation implementation\n"
        "parsing.py:341: UserWarning: Tried to parse AWS::Future::Thing but it's not supported by moto's ...\n"
    )
    alarms = {f"Alarm{i}": {"Type": "AWS::CloudWatch::Alarm"} for i in range(4)}
    stack = StackTemplate("serving", "staging/Serving", {"Resources": alarms}, None)
    assert gaps.skipped_types(log) == ["AWS::CloudWatch::Alarm", "AWS::Future::Thing"]
    assert gaps.skipped_type_lines([stack], log) == [
        "AWS::CloudWatch::Alarm (4): the endpoint's alarms, and so the blue/green auto-rollback that watches them",
        "AWS::Future::Thing (0)",
    ]


def test_roles_that_reappear_after_destroy_are_reported_as_a_gap():
    before = {"cdk-hnb659fds-deploy-role", "llm-platform-staging-storage-TrainingRole-AAA"}
    after = before | {"llm-platform-staging-storage-TrainingRole-BBB", "someone-elses-role"}
    gap = gaps.recreated_roles_gap(before, after, ["llm-platform-staging-storage"])
    assert gap is not None and "moto re-created 1 roles" in gap.why
    assert gaps.recreated_roles_gap(before, before, ["llm-platform-staging-storage"]) is None
