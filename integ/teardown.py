"""Take down everything a run deployed, whatever state the run stopped in, and say what remains.

1. Note what the stage's stacks hold (buckets, keys, log groups) while they still exist.
2. Stop the stage's pipeline runs still going (a training job bills until it stops).
3. Delete the model versions of the stage's group (the run's own; nothing relies on CloudFormation deleting a group
   that still holds versions).
4. `cdk destroy` the stage (integ/commands.py): the endpoint, the pipelines, the roles, the buckets (removal_policy
   destroy empties them), the key (scheduled for deletion).
5. Look again: each stack, bucket, key or log group still there is listed with the command that removes it.

Each part runs even when one before it failed: a teardown that stops at its first error leaves GPUs running.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from core.naming import StageNames, component_name
from integ.aws import IntegAws

STACK_PARTS = ("serving", "training", "storage")
# CloudFormation states a stack is still moving in: cdk destroy waits for none of them, so teardown does.
MOVING = ("_IN_PROGRESS",)
# What stays after a destroy on purpose, with the command that lists (or removes) it.
KEPT_BY_DESIGN = (
    (
        "the CDK bootstrap stack CDKToolkit and its assets bucket and repository (shared by every CDK app of the "
        "account and region)",
        "aws cloudformation describe-stacks --stack-name CDKToolkit --region {region}",
    ),
    (
        "the logs of this run's jobs, in the account's shared /aws/sagemaker/TrainingJobs and ProcessingJobs groups",
        "aws logs describe-log-streams --log-group-name /aws/sagemaker/TrainingJobs --order-by LastEventTime "
        "--descending --region {region}",
    ),
)


@dataclass
class Leftover:
    kind: str
    name: str
    why: str
    command: str


@dataclass
class TeardownResult:
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)
    kept_by_design: list[Leftover] = field(default_factory=list)

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class Inventory:
    """What the stacks held before the destroy, by physical name."""

    buckets: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    log_groups: list[str] = field(default_factory=list)


def inventory(aws: IntegAws, names: StageNames, component_names: list[str]) -> Inventory:
    found = Inventory()
    for part in STACK_PARTS:
        for resource in aws.stack_resources(names.stack(part)):
            kind, physical = resource["type"], resource["physical_id"]
            if kind == "AWS::S3::Bucket":
                found.buckets.append(physical)
            elif kind == "AWS::KMS::Key":
                found.keys.append(physical)
            elif kind == "AWS::Logs::LogGroup":
                found.log_groups.append(physical)
    # What SageMaker itself writes for the endpoint and its components, outside any stack.
    found.log_groups += [f"/aws/sagemaker/Endpoints/{names.endpoint}"]
    found.log_groups += [f"/aws/sagemaker/InferenceComponents/{name}" for name in component_names]
    found.log_groups = list(dict.fromkeys(found.log_groups))
    return found


def stage_components(names: StageNames, serving) -> list[str]:
    """Every inference component of the stage, adapters included, by the name requests give."""
    shorts = [c.name for c in serving.components] + [a.name for c in serving.components for a in c.adapters]
    return [component_name(names.endpoint, short) for short in shorts]


def teardown(
    aws: IntegAws,
    destroy: Callable[[float], None],
    names: StageNames,
    component_names: list[str],
    *,
    timeout_s: float,
    poll_s: float = 15,
) -> TeardownResult:
    """Everything above; `destroy(timeout_s)` is the CDK CLI's destroy of the whole stage."""
    result = TeardownResult()
    deadline = time.monotonic() + timeout_s
    region = aws.region

    def attempt(what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as error:  # every part of a teardown runs; each failure is reported
            result.problems.append(f"{what}: {type(error).__name__}: {error}")

    held = Inventory()

    def note() -> None:
        nonlocal held
        held = inventory(aws, names, component_names)

    attempt("list what the stacks hold", note)
    for pipeline in (names.pipelines.finetune, names.pipelines.staging):
        attempt(f"stop the runs of {pipeline}", lambda p=pipeline: _stop_runs(aws, p, result))
    attempt("delete the model versions", lambda: _delete_packages(aws, names.pipelines.model_package_group, result))
    attempt("wait for the stacks to settle", lambda: _wait_settled(aws, names, deadline, poll_s))
    attempt("cdk destroy", lambda: destroy(max(deadline - time.monotonic(), 60)))
    result.actions.append(f"cdk destroy {names.stage}/*")
    attempt("look for what remains", lambda: _leftovers(aws, names, held, result))
    result.kept_by_design[:0] = [
        Leftover("kept by design", what, "", command.format(region=region)) for what, command in KEPT_BY_DESIGN
    ]
    return result


def _stop_runs(aws: IntegAws, pipeline: str, result: TeardownResult) -> None:
    for arn in aws.running_executions(pipeline):
        aws.stop_execution(arn)
        result.actions.append(f"stopped {arn}")


def _delete_packages(aws: IntegAws, group: str, result: TeardownResult) -> None:
    for arn in aws.package_arns(group):
        aws.delete_package(arn)
        result.actions.append(f"deleted {arn}")


def _wait_settled(aws: IntegAws, names: StageNames, deadline: float, poll_s: float) -> None:
    while time.monotonic() < deadline:
        states = [aws.stack_status(names.stack(part)) for part in STACK_PARTS]
        if not any(state and state.endswith(MOVING) for state in states):
            return
        time.sleep(poll_s)


def _leftovers(aws: IntegAws, names: StageNames, held: Inventory, result: TeardownResult) -> None:
    region = aws.region
    for part in STACK_PARTS:
        stack = names.stack(part)
        if (state := aws.stack_status(stack)) is not None:
            result.leftovers.append(
                Leftover(
                    "stack",
                    stack,
                    f"still there ({state})",
                    f"aws cloudformation delete-stack --stack-name {stack} --region {region}",
                )
            )
    for arn in aws.package_arns(names.pipelines.model_package_group):
        result.leftovers.append(
            Leftover(
                "model package",
                arn,
                "not deleted",
                f"aws sagemaker delete-model-package --model-package-name {arn} --region {region}",
            )
        )
    for bucket in held.buckets:
        if aws.bucket_exists(bucket):
            result.leftovers.append(Leftover("bucket", bucket, "retained", _empty_and_delete(bucket, region)))
    for key in held.keys:
        state = aws.key_state(key)
        if state not in (None, "PendingDeletion"):
            result.leftovers.append(
                Leftover(
                    "KMS key",
                    key,
                    f"retained ({state})",
                    f"aws kms schedule-key-deletion --key-id {key} --pending-window-in-days 7 --region {region}",
                )
            )
        elif state == "PendingDeletion":
            result.kept_by_design.append(
                Leftover(
                    "kept by design",
                    key,
                    "the stage key, scheduled for deletion (its 7-day window; no charge meanwhile)",
                    f"aws kms describe-key --key-id {key} --region {region}",
                )
            )
    for group in held.log_groups:
        if aws.log_group_exists(group):
            result.leftovers.append(
                Leftover(
                    "log group",
                    group,
                    "retained",
                    f"aws logs delete-log-group --log-group-name {group} --region {region}",
                )
            )


def _empty_and_delete(bucket: str, region: str) -> str:
    """A versioned bucket keeps old versions through `aws s3 rm`: delete every version, then the bucket."""
    return (
        f"python -c \"import boto3; b = boto3.resource('s3', region_name='{region}').Bucket('{bucket}'); "
        'b.object_versions.delete(); b.delete()"'
    )
