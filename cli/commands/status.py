"""`llmp status`: per stage, the stacks, the endpoint (and, for promoted weights, the version it serves), the last
pipeline runs and the models waiting for approval."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.text import Text

from cli import aws as aws_module
from cli.aws import STACK_PARTS, Aws, Stage, WrongAccount
from cli.errors import Exit, aws_errors, translate
from cli.options import AllStagesOption, ConfigOption, JsonOption, handled, load
from cli.render import Output, key_value_table, styled, when
from core.naming import PROMOTED_FROM_OUTPUT, SERVED_DIGEST_OUTPUT, SERVED_PACKAGE_OUTPUT

RUNS_SHOWN = 3  # per pipeline
PENDING_SHOWN = 10
DIGEST_SHOWN = 12  # hex characters of the served weights' digest in the table; --json has all of it


@handled
def status(config: ConfigOption = None, stage: AllStagesOption = None, json_output: JsonOption = False) -> None:
    """Every stage (or one): its stacks, the endpoint's state and instances, the model version it serves when its
    weights are promoted from another stage, the last runs of its pipelines, and the model versions waiting for
    approval."""
    out = Output(json_mode=json_output)
    platform, config_path = load(config)
    aws = aws_module.connect()
    found = []
    for each in aws_module.stages(platform, config_path, stage):
        try:
            found.append(stage_status(aws, each))
        except WrongAccount as error:
            # One stage in another account does not hide the others; asked for by name, it is the answer.
            if stage is not None:
                raise
            found.append({**_identity(each), "problem": str(error)})
    out.result({"config": config_path, "stages": found}, lambda console: _draw(console, found))


def _identity(stage: Stage) -> dict[str, Any]:
    return {"stage": stage.name, "region": stage.region, "account": stage.account}


def stage_status(aws: Aws, stage: Stage) -> dict[str, Any]:
    account = aws.check_account(stage)
    stacks = {part: aws.describe_stack(stage, part) for part in STACK_PARTS}
    outputs = {part: _outputs(stack) for part, stack in stacks.items()}
    result: dict[str, Any] = {
        **_identity(stage),
        "account": account,
        "stacks": {stage.stack_name(p): s["StackStatus"] if s else None for p, s in stacks.items()},
        "endpoint": None,
        "served": _served(outputs["serving"]),
        "pipelines": {},
        "pending_approval": [],
        "problem": None,
    }
    sagemaker = aws.client("sagemaker", stage.region)
    with aws_errors():
        if endpoint := outputs["serving"].get("EndpointName"):
            result["endpoint"] = _endpoint(sagemaker, endpoint)
        for kind, key in (("finetune", "FinetunePipelineName"), ("staging", "StagingPipelineName")):
            if name := outputs["training"].get(key):
                result["pipelines"][kind] = {"name": name, "runs": _runs(sagemaker, name)}
        if group := outputs["training"].get("ModelPackageGroupName"):
            result["pending_approval"] = _pending(sagemaker, group)
    return result


def _outputs(stack: dict | None) -> dict[str, str]:
    return {o["OutputKey"]: o["OutputValue"] for o in (stack or {}).get("Outputs", [])}


def _served(outputs: dict[str, str]) -> dict[str, str | None] | None:
    """What a stage of promoted weights serves, as its serving stack's outputs record it (each release's): the
    version of its own group, the approved version it was copied from, and the weights' digest. None for a stage
    whose stack has none of these outputs (its weights are not promoted)."""
    keys = {"package": SERVED_PACKAGE_OUTPUT, "promoted_from": PROMOTED_FROM_OUTPUT, "digest": SERVED_DIGEST_OUTPUT}
    served = {field: outputs.get(key) for field, key in keys.items()}
    return served if any(served.values()) else None


def _version(package_arn: str) -> str:
    """arn:aws:sagemaker:...:model-package/llm-platform-prod/3 -> llm-platform-prod/3 (group/version)."""
    return package_arn.partition(":model-package/")[2] or package_arn


def _digest(digest: str) -> str:
    """sha256:3f2a9c1e0b7d... -> sha256:3f2a9c1e0b7d…: enough to tell versions apart at a glance."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}:{hexdigest[:DIGEST_SHOWN]}…" if len(hexdigest) > DIGEST_SHOWN else digest


def _endpoint(sagemaker: Any, name: str) -> dict[str, Any]:
    try:
        endpoint = sagemaker.describe_endpoint(EndpointName=name)
    except sagemaker.exceptions.ClientError as error:
        # DescribeEndpoint answers a missing endpoint with ValidationError "Could not find endpoint ...".
        if "Could not find" in error.response.get("Error", {}).get("Message", ""):
            return {"name": name, "status": None, "instances": 0, "desired_instances": 0, "failure": None}
        raise
    variants = endpoint.get("ProductionVariants", [])
    return {
        "name": name,
        "status": endpoint["EndpointStatus"],
        "instances": sum(v.get("CurrentInstanceCount", 0) for v in variants),
        "desired_instances": sum(v.get("DesiredInstanceCount", 0) for v in variants),
        "failure": endpoint.get("FailureReason"),
    }


def _runs(sagemaker: Any, pipeline: str) -> list[dict[str, Any]] | None:
    """The pipeline's last runs; None when the pipeline does not exist (its stack failed part-way, or was changed
    by hand): one missing pipeline does not hide the rest of the stage."""
    try:
        summaries = sagemaker.list_pipeline_executions(
            PipelineName=pipeline, SortBy="CreationTime", SortOrder="Descending", MaxResults=RUNS_SHOWN
        )["PipelineExecutionSummaries"]
    except sagemaker.exceptions.ClientError as error:
        if translate(error).code != Exit.AWS_STATE:  # not a missing pipeline: the error as every command shows it
            raise
        return None
    return [
        {
            "arn": run["PipelineExecutionArn"],
            "name": run.get("PipelineExecutionDisplayName"),
            "status": run.get("PipelineExecutionStatus"),
            "started": run.get("StartTime"),
            "failure": run.get("PipelineExecutionFailureReason") or None,
        }
        for run in summaries[:RUNS_SHOWN]
    ]


def _pending(sagemaker: Any, group: str) -> list[dict[str, Any]]:
    packages = sagemaker.list_model_packages(
        ModelPackageGroupName=group,
        ModelApprovalStatus="PendingManualApproval",
        SortBy="CreationTime",
        SortOrder="Descending",
        MaxResults=PENDING_SHOWN,
    )["ModelPackageSummaryList"]
    return [
        {
            "arn": p["ModelPackageArn"],
            "version": p.get("ModelPackageVersion"),
            "created": p.get("CreationTime"),
            "description": p.get("ModelPackageDescription"),
        }
        for p in packages
    ]


def _draw(console: Console, stages: list[dict[str, Any]]) -> None:
    for index, found in enumerate(stages):
        if index:
            console.print()
        header = f"[bold]{found['stage']}[/]  {found['region']}, account {found['account'] or '-'}"
        if found["problem"]:
            console.print(Group(Text.from_markup(header), Text(f"  {found['problem']}")))
            continue
        # <project>-<stage>-storage -> storage: the stage is in the header, the full names in --json.
        prefix = f"{found['stage']}-"
        stacks = " · ".join(f"{n.rpartition(prefix)[2]} {styled(s)}" for n, s in found["stacks"].items())
        rows = [("stacks", stacks)]
        endpoint = found["endpoint"]
        if endpoint is None:
            rows.append(("endpoint", styled(None)))
        else:
            count = endpoint["instances"]
            state = f"{endpoint['name']} {styled(endpoint['status'] or 'not found')}"
            state += f", {count} instance{'s' if count != 1 else ''}"
            if endpoint["desired_instances"] != count:
                state += f" (scaling to {endpoint['desired_instances']})"
            if endpoint["failure"]:
                state += f": {endpoint['failure']}"
            rows.append(("endpoint", state))
        if served := found["served"]:
            parts = [_version(served["package"]) if served["package"] else "an unrecorded version"]
            if served["promoted_from"]:
                parts.append(f"promoted from {served['promoted_from']}")
            if served["digest"]:
                parts.append(f"weights {_digest(served['digest'])}")
            rows.append(("serves", ", ".join(parts)))
        for kind, title in (("finetune", "fine-tuning"), ("staging", "weights staging")):
            pipeline = found["pipelines"].get(kind)
            if pipeline is None:
                rows.append((title, styled(None)))
                continue
            if pipeline["runs"] is None:
                rows.append((title, f"{pipeline['name']}: not found (deploy the training stack again)"))
                continue
            runs = "; ".join(f"{styled(r['status'])} {when(r['started'])} ({r['name']})" for r in pipeline["runs"])
            rows.append((title, f"{pipeline['name']}: {runs or 'never run'}"))
        pending = found["pending_approval"]
        rows.append(
            (
                "awaiting approval",
                ", ".join(f"version {p['version']} ({when(p['created'])})" for p in pending) or "none",
            )
        )
        console.print(header)
        console.print(key_value_table(rows))
        if pending:
            version, name = pending[0]["version"], found["stage"]
            # -m: where approvals are guarded (a retained stage, one whose approvals start releases) it is required.
            console.print(
                f'  approve: llmp approve {version} --stage {name} -m "<why>"  (or llmp reject {version})',
                markup=False,
                highlight=False,
            )
