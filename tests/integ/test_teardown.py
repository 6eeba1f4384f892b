"""Teardown against moto: what a run deployed is stopped, emptied and destroyed, and whatever remains is listed
with the command that removes it."""

from __future__ import annotations

from integ.teardown import teardown
from tests.integ.conftest import COMPONENTS, NAMES, REGION, cdk_destroy, deploy


def leftovers(result) -> dict[str, tuple[str, str]]:
    return {x.name: (x.kind, x.command) for x in result.leftovers}


def test_teardown_stops_runs_deletes_versions_and_destroys_the_stacks(aws):
    made = deploy(aws, packages=2)

    result = teardown(aws, cdk_destroy(aws), NAMES, COMPONENTS, timeout_s=60, poll_s=0)

    assert result.problems == []
    assert f"stopped {made.running[0]}" in result.actions
    assert {f"deleted {arn}" for arn in made.packages} <= set(result.actions)
    assert aws.running_executions(NAMES.pipelines.finetune) == []
    assert aws.package_arns(NAMES.pipelines.model_package_group) == []
    for part in ("storage", "training", "serving"):
        assert aws.stack_status(NAMES.stack(part)) is None
    assert not aws.bucket_exists("integ-models")


def test_what_a_destroy_retains_is_listed_with_the_command_that_removes_it(aws):
    deploy(aws)

    result = teardown(aws, cdk_destroy(aws), NAMES, COMPONENTS, timeout_s=60, poll_s=0)

    found = leftovers(result)
    # The retained bucket: every version deleted, then the bucket (a versioned bucket survives `aws s3 rm`).
    assert found["integ-data"][0] == "bucket"
    assert "Bucket('integ-data')" in found["integ-data"][1]
    assert "object_versions.delete(); b.delete()" in found["integ-data"][1]
    # The retained key (Enabled, not scheduled): scheduled for deletion by the command given.
    [key] = [name for name, (kind, _) in found.items() if kind == "KMS key"]
    assert found[key][1] == f"aws kms schedule-key-deletion --key-id {key} --pending-window-in-days 7 --region {REGION}"
    # The endpoint's log group, which SageMaker writes outside any stack.
    endpoint_logs = f"/aws/sagemaker/Endpoints/{NAMES.endpoint}"
    assert found[endpoint_logs] == (
        "log group",
        f"aws logs delete-log-group --log-group-name {endpoint_logs} --region {REGION}",
    )
    # What the stacks deleted is not listed; the stacks themselves are gone.
    assert "integ-models" not in found and "integ-artifacts" not in found
    assert not [x for x in result.leftovers if x.kind == "stack"]
    assert any("CDKToolkit" in x.name for x in result.kept_by_design)


def test_a_stack_that_will_not_delete_is_listed_and_the_rest_still_runs(aws):
    deploy(aws)

    result = teardown(aws, cdk_destroy(aws, fail_on="training"), NAMES, COMPONENTS, timeout_s=60, poll_s=0)

    assert any("cdk destroy" in problem for problem in result.problems)
    found = leftovers(result)
    for part in ("training", "storage"):
        stack = NAMES.stack(part)
        assert found[stack] == ("stack", f"aws cloudformation delete-stack --stack-name {stack} --region {REGION}")
    assert NAMES.stack("serving") not in found
    # Runs were stopped and versions deleted before the destroy failed.
    assert aws.running_executions(NAMES.pipelines.finetune) == []
    assert aws.package_arns(NAMES.pipelines.model_package_group) == []


def test_teardown_of_a_stage_never_deployed_finds_nothing_and_fails_on_nothing(aws):
    destroyed = []

    result = teardown(aws, destroyed.append, NAMES, COMPONENTS, timeout_s=60, poll_s=0)

    assert result.problems == []
    assert result.leftovers == []
    assert destroyed  # cdk destroy still runs: a deploy that failed early may have left a stack being created


def test_a_failing_part_does_not_stop_the_parts_after_it(aws, monkeypatch):
    made = deploy(aws)

    def refuse(arn):
        raise RuntimeError("AccessDenied: sagemaker:StopPipelineExecution")

    monkeypatch.setattr(aws, "stop_execution", refuse)
    result = teardown(aws, cdk_destroy(aws), NAMES, COMPONENTS, timeout_s=60, poll_s=0)

    assert any("StopPipelineExecution" in problem for problem in result.problems)
    assert {f"deleted {arn}" for arn in made.packages} <= set(result.actions)
    assert aws.stack_status(NAMES.stack("serving")) is None
