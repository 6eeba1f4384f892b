"""`llmp approve` and `llmp reject`: a person's decision on a fine-tuned model version (UpdateModelPackage).

In a stage that keeps its data (removal_policy: retain) or whose approvals start releases (the promotion pipeline's
trigger_on_model_approval, for a group of core.config.promotion.approval_groups), approving, or changing an Approved
version, is guarded: it needs -m/--message (kept as the package's ApprovalDescription), asks on a terminal, and
without a terminal needs --yes.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import aws as aws_module
from cli.commands.data import YesOption, confirm, on_terminal
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output
from core.config import PlatformConfig
from core.config.promotion import approval_groups
from core.naming import promotion_pipeline

PackageArgument = Annotated[
    str, typer.Argument(help="the model version in the stage's group (a number, as llmp status lists it) or its ARN")
]
ReasonOption = Annotated[
    str | None,
    typer.Option(
        "--message",
        "--reason",
        "-m",
        help="why, kept with the package as its approval description (required where the change is guarded)",
    ),
]


@handled
def approve(
    package: PackageArgument,
    reason: ReasonOption = None,
    yes: YesOption = False,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Approve a model version: endpoints serving the latest approved model pick it up on their next deploy; where
    the promotion pipeline watches the stage's group, the approval starts a release. In a retained stage, or one whose
    approvals start releases, it needs -m and asks first (--yes when not on a terminal)."""
    decide("Approved", package, reason, config, stage, json_output, yes=yes)


@handled
def reject(
    package: PackageArgument,
    reason: ReasonOption = None,
    yes: YesOption = False,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Reject a model version: it is never deployed as the latest approved model. Rejecting an Approved version in a
    retained stage, or one whose approvals start releases, needs -m and asks first (--yes when not on a terminal)."""
    decide("Rejected", package, reason, config, stage, json_output, yes=yes)


def decide(
    status: str,
    package: str,
    reason: str | None,
    config: Any,
    stage: str | None,
    json_output: bool,
    *,
    yes: bool = False,
) -> None:
    out = Output(json_mode=json_output)
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    group = aws.outputs(target, "training")["ModelPackageGroupName"]
    sagemaker = aws.client("sagemaker", target.region)
    with aws_errors():
        found = find_package(sagemaker, group, package, target.name)
        previous = found.get("ModelApprovalStatus")
        releases = release_pipeline(platform, group)
        starts = releases if status == "Approved" else None
        if previous != status:
            version = f"version {found.get('ModelPackageVersion')} of {group}"
            guard(target, version, previous, status, reason, releases, yes=yes)
            update = {"ModelPackageArn": found["ModelPackageArn"], "ModelApprovalStatus": status}
            if reason:
                update["ApprovalDescription"] = reason
            sagemaker.update_model_package(**update)
    data = {
        "package": found["ModelPackageArn"],
        "group": group,
        "version": found.get("ModelPackageVersion"),
        "status": status,
        "previous_status": previous,
        "changed": previous != status,
        "message": reason,
        "starts_release_of": starts if previous != status else None,
    }

    def human(console: Any) -> None:
        version = f"version {data['version']} of {group}"
        if not data["changed"]:
            console.print(f"{version} was already {status}; nothing changed", markup=False)
            return
        console.print(f"{version}: {previous} -> {status}", markup=False)
        if starts:
            console.print(f"this approval starts a release of {starts}", markup=False)
        elif status == "Approved":
            console.print(
                "stages that serve the newest approved version serve it from their next deploy: "
                f"make deploy STAGE={target.name}",
                markup=False,
            )

    out.result(data, human)


def release_pipeline(platform: PlatformConfig, group: str) -> str | None:
    """The promotion pipeline an approval in `group` starts, or None: it starts one only when the config has a
    pipeline that triggers on approvals and `group` is one it watches (core.config.promotion.approval_groups)."""
    pipeline = platform.pipeline
    if pipeline is None or not pipeline.trigger_on_model_approval or group not in approval_groups(platform):
        return None
    return promotion_pipeline(platform.project)


def guard(
    target: aws_module.Stage,
    version: str,
    previous: str | None,
    status: str,
    reason: str | None,
    releases: str | None,
    *,
    yes: bool,
) -> None:
    """Go on, or exit: approving, or changing an Approved version, in a stage that keeps its data or whose approvals
    start releases needs a message, and a yes (asked on a terminal, --yes elsewhere)."""
    retained = target.config.removal_policy == "retain"
    if not (status == "Approved" or previous == "Approved") or not (retained or releases):
        return
    why = [f"stage {target.name} keeps its data (removal_policy: retain)"] if retained else []
    if status == "Approved" and releases:
        why.append(f"this approval starts a release of {releases}")
    elif releases:
        why.append(f"its approvals start releases of {releases}")
    if previous == "Approved":
        why.append("endpoints that deploy the latest approved version will serve another one on their next deploy")
    change = f"{version}: {previous} -> {status}"
    if not reason:
        # Off a terminal nobody can answer the question either: name both at once, not one per try.
        needed = 'say why with -m/--message "..."' + ("" if yes or on_terminal() else " and pass --yes")
        raise CliError(f"{change}: {'; '.join(why)}: {needed}; nothing changed", Exit.USAGE)
    confirm(f"{change}: {'; '.join(why)}", yes=yes)


def find_package(sagemaker: Any, group: str, package: str, stage: str) -> dict[str, Any]:
    """The package `package` names (a version of `group`, or an ARN in it); exit 3 if there is none, 2 if the ARN
    is of another group."""
    listed = "llmp status --stage " + stage + " lists the versions awaiting approval"
    if package.isdigit():
        for page in sagemaker.get_paginator("list_model_packages").paginate(ModelPackageGroupName=group):
            for summary in page["ModelPackageSummaryList"]:
                if summary.get("ModelPackageVersion") == int(package):
                    return summary
        raise CliError(f"{group} has no version {package}: {listed}", Exit.AWS_STATE)
    if not package.startswith("arn:"):
        raise CliError(f"{package!r} is neither a version number nor a model package ARN: {listed}", Exit.USAGE)
    try:
        described = sagemaker.describe_model_package(ModelPackageName=package)
    except sagemaker.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("ValidationException", "ValidationError"):
            raise CliError(f"no model package {package}: {listed}", Exit.AWS_STATE) from None
        raise
    if described.get("ModelPackageGroupName") != group:
        raise CliError(
            f"{package} is in group {described.get('ModelPackageGroupName')}, not stage {stage}'s {group}: give "
            "--stage for its stage",
            Exit.USAGE,
        )
    return described
