"""What moto does not emulate, found in the templates, the emulator's log and the emulator itself.

Every line of the report's "what moto does not emulate" section comes from here, and each is observed during the
run (a warning in the server log, a value missing from a deployed resource, an answer of the emulator), so the
section stays exact when the stacks or moto change.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from botocore.exceptions import ClientError

from rehearsal.assembly import CUSTOM_RESOURCE, CustomAttributeUse, StackTemplate, custom_attribute_uses
from rehearsal.deployment import Aws
from rehearsal.emulator import FIXES
from rehearsal.findings import Gap

# moto's warning for a resource type its CloudFormation does not implement: the stack still says CREATE_COMPLETE.
SKIPPED_WARNING = re.compile(r"Tried to parse (\S+) but it's not supported")

# What each skipped type means for these stacks: what cannot be checked here.
CONSEQUENCES = {
    "AWS::S3::BucketPolicy": "bucket policies (TLS-only access, access-log delivery)",
    "AWS::SNS::TopicPolicy": "the alarm topic's policy",
    "AWS::CloudWatch::Alarm": "the endpoint's alarms, and so the blue/green auto-rollback that watches them",
    "AWS::SageMaker::Pipeline": "the fine-tuning and weights-staging pipelines, with the training, processing and "
    "evaluation instance types in their definitions (moto never sees them, so they need no overlay)",
    "AWS::SageMaker::ModelPackageGroup": "the model registry group",
    "AWS::SageMaker::InferenceComponent": "inference components: the models of an endpoint that hosts them, their "
    "copies, GPU and memory reservations and rolling updates (the endpoint deploys with no model on it), and the LoRA "
    "adapter components over them",
    "AWS::ApplicationAutoScaling::ScalableTarget": "endpoint autoscaling, and the components' copies with their "
    "scale-to-zero",
    "AWS::ApplicationAutoScaling::ScalingPolicy": "endpoint autoscaling",
    "AWS::Events::Rule": "EventBridge rules (model approvals)",
}


def skipped_types(server_log: str) -> list[str]:
    return sorted(set(SKIPPED_WARNING.findall(server_log)))


def resource_counts(stacks: list[StackTemplate]) -> Counter:
    return Counter(r["Type"] for s in stacks for r in s.resources.values())


def skipped_type_lines(stacks: list[StackTemplate], server_log: str) -> list[str]:
    counts = resource_counts(stacks)
    lines = []
    for resource_type in skipped_types(server_log):
        consequence = CONSEQUENCES.get(resource_type)
        lines.append(f"{resource_type} ({counts.get(resource_type, 0)})" + (f": {consequence}" if consequence else ""))
    return lines


def custom_resource_lines(stacks: list[StackTemplate], outputs: dict[str, set[str]], skipped: list[str]) -> list[str]:
    """Custom resources never run (moto runs their Lambda only in Docker); what depends on their data."""
    counts = Counter(r["Type"] for s in stacks for r in s.resources.values() if CUSTOM_RESOURCE.match(r["Type"]))
    if not counts:
        return []
    kinds = ", ".join(f"{t} ({n})" for t, n in sorted(counts.items()))
    lines = [
        f"custom resources {kinds}: never run. moto invokes a custom resource's Lambda only inside Docker, and the "
        "emulator is given none (so the rehearsal behaves the same on every machine and pulls no image); moto still "
        "reports the resource CREATE_COMPLETE, with no data. So the code archives are never built, and every value "
        "only a handler produces is null:"
    ]
    for stack in stacks:
        for use in custom_attribute_uses(stack):
            lines.append(f"  {use.where} <- {use.source}: {_outcome(use, stack, outputs, skipped)}")
    return ["\n".join(lines)]


def _outcome(use: CustomAttributeUse, stack: StackTemplate, outputs: dict[str, set[str]], skipped: list[str]) -> str:
    if use.user_type == "output":
        output_id = use.where.rsplit(" ", 1)[-1]
        deployed = outputs.get(stack.stack_name, set())
        return "the output is missing from the deployed stack" if output_id not in deployed else "output present"
    if use.user_type in skipped:
        return f"unused here ({use.user_type} is skipped anyway)"
    return "resolved to null (see the gaps below for what the emulator shows)"


@dataclass(frozen=True)
class InstanceTypeProbe:
    instance_type: str
    rejection: str | None  # moto's error message, or None when moto accepts it

    @property
    def accepted(self) -> bool:
        return self.rejection is None


def probe_instance_type(aws: Aws, instance_type: str, *, account: str) -> InstanceTypeProbe:
    """Ask the emulator itself whether it accepts an endpoint on `instance_type` (a throwaway model and config)."""
    sagemaker, name = aws("sagemaker"), "rehearsal-instance-type-probe"
    sagemaker.create_model(
        ModelName=name,
        ExecutionRoleArn=f"arn:aws:iam::{account}:role/{name}",
        PrimaryContainer={"Image": f"{account}.dkr.ecr.us-east-1.amazonaws.com/{name}:latest"},
    )
    try:
        sagemaker.create_endpoint_config(
            EndpointConfigName=name,
            ProductionVariants=[
                {"VariantName": "probe", "ModelName": name, "InstanceType": instance_type, "InitialInstanceCount": 1}
            ],
        )
    except ClientError as err:
        return InstanceTypeProbe(instance_type, err.response.get("Error", {}).get("Message", str(err)))
    else:
        sagemaker.delete_endpoint_config(EndpointConfigName=name)
        return InstanceTypeProbe(instance_type, None)
    finally:
        sagemaker.delete_model(ModelName=name)


def instance_type_line(probe: InstanceTypeProbe, rehearsed_instance_type: str, overlay_changes: list[str]) -> str:
    """What the emulator says of the configured endpoint instance type, and what the rehearsal deployed."""
    changes = "; ".join(overlay_changes) or "nothing"
    if probe.rejection is None:
        if not overlay_changes:
            return (
                f"instance types: the endpoint was deployed on its configured {probe.instance_type}, which the "
                "emulator accepts as SageMaker's API does (fix endpoint-instance-types below); no instance runs behind "
                "it, so whether the model fits it is checked only by the config's synth checks"
            )
        return (
            f"instance types: the emulator accepts {probe.instance_type} for an endpoint (the overlay changed: "
            f"{changes}); an overlay is no longer needed for it"
        )
    listed = re.sub(r"enum value set: \[.*\]", "enum value set: [its own list]", probe.rejection)
    said = f"instance types: the emulator rejects {probe.instance_type} for an endpoint, as SageMaker does ({listed!r})"
    if rehearsed_instance_type == probe.instance_type:
        return f"{said}, and the overlays leave it in place, so the serving stack cannot deploy on moto"
    return (
        f"{said}, so the stage was deployed with the overlay's changes, for this rehearsal only: {changes}. The real "
        f"config is unchanged, and the {probe.instance_type} endpoint itself is not rehearsed"
    )


def recreated_roles_gap(roles_before: set[str], roles_after: set[str], prefixes: list[str]) -> Gap | None:
    """IAM roles of the deleted stacks that exist after the destroy under names they did not have before it."""
    new = sorted(r for r in roles_after - roles_before if r.startswith(tuple(prefixes)))
    if not new:
        return None
    return Gap(
        "whether the destroy removed the stacks' IAM roles",
        f"moto re-created {len(new)} roles of the deleted stacks under new names (e.g. {new[0]}): its CloudFormation "
        "resource map is lazy, and resolving a reference to a resource it has already deleted (while deleting the "
        "resources that refer to it, or when the CLI reads a deleted stack's outputs) creates that resource again. "
        "So of what the destroy deletes, the rehearsal checks only the buckets, keys and log groups its removal "
        "policy governs and the endpoint, its config and model",
    )


def fix_lines() -> list[str]:
    return [f"fixed in the emulator ({name}): {text}" for name, text in FIXES.items()]
