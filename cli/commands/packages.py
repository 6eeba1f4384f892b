"""`llmp approve` and `llmp reject`: a person's decision on a fine-tuned model version (UpdateModelPackage)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import aws as aws_module
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output

PackageArgument = Annotated[
    str, typer.Argument(help="the model version in the stage's group (a number, as llmp status lists it) or its ARN")
]
ReasonOption = Annotated[
    str | None, typer.Option("--reason", "-m", help="why, kept with the package as its approval description")
]


@handled
def approve(
    package: PackageArgument,
    reason: ReasonOption = None,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Approve a model version: endpoints serving the latest approved model pick it up on their next deploy."""
    decide("Approved", package, reason, config, stage, json_output)


@handled
def reject(
    package: PackageArgument,
    reason: ReasonOption = None,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Reject a model version: it is never deployed as the latest approved model."""
    decide("Rejected", package, reason, config, stage, json_output)


def decide(status: str, package: str, reason: str | None, config: Any, stage: str | None, json_output: bool) -> None:
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
        if previous != status:
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
    }
    releases = platform.pipeline is not None and platform.pipeline.trigger_on_model_approval

    def human(console: Any) -> None:
        version = f"version {data['version']} of {group}"
        if not data["changed"]:
            console.print(f"{version} was already {status}; nothing changed", markup=False)
            return
        console.print(f"{version}: {previous} -> {status}", markup=False)
        if status == "Approved" and releases:
            console.print("the promotion pipeline starts a release with it", markup=False)

    out.result(data, human)


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
