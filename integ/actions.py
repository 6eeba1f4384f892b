"""The body of each step (integ/steps.py names them): what it runs, what it asserts, what the report keeps.

Deploying goes through the CDK CLI, staging, fine-tuning and approving through `llmp` (integ/commands.py); the
requests and their checks are scripts/smoke_test.py's own; every other AWS call goes through integ/aws.py.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import StageConfig
from core.naming import StageNames, component_name, component_policy_name, scale_from_zero_policy_name
from integ import dataset
from integ.aws import IntegAws
from integ.commands import Commands
from scripts import smoke_test

DATA_UNDER = "integ"  # raw/integ/ in the data bucket
TOKENS_PER_SECOND_REQUEST = {
    "inputs": smoke_test.PROMPT,
    "parameters": {"max_new_tokens": 64, "do_sample": False, "details": True},
}


class StepFailed(Exception):
    """An assertion of a step did not hold."""


class StepTimeout(StepFailed):
    """What a step waits for did not happen within its limit."""


def wait_for(what: str, probe: Callable[[], Any], limit_s: float, *, poll_s: float = 20) -> Any:
    """`probe()` until it returns something truthy; StepTimeout after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while True:
        if found := probe():
            return found
        if time.monotonic() + poll_s > deadline:
            raise StepTimeout(f"{what}: not within {limit_s:.0f} s")
        time.sleep(poll_s)


class Actions:
    def __init__(self, commands: Commands, aws: IntegAws, stage: StageConfig, names: StageNames) -> None:
        self.commands, self.aws, self.stage, self.names = commands, aws, stage, names
        self.state: dict[str, Any] = {}
        self.poll_s = 20.0

    def bodies(self) -> dict[str, Callable[[float], dict[str, Any] | None]]:
        return {
            "synth-checks": lambda limit: self.commands.synth(limit),
            "deploy": lambda limit: self.commands.deploy(["Storage", "Training"], limit),
            "stage-weights": self.stage_weights,
            "upload-data": self.upload_data,
            "fine-tune": self.fine_tune,
            "package-pending": self.package_pending,
            "approve": self.approve,
            "deploy-serving": lambda limit: self.commands.deploy(["*"], limit),
            "in-service": self.in_service,
            "invoke": self.invoke,
            "stream": self.stream,
            "bad-request": self.bad_request,
            "alarms-and-scaling": self.alarms_and_scaling,
            "cold-start": self.cold_start,
        }

    # --- training ---------------------------------------------------------------------------------------------

    def stage_weights(self, limit: float) -> dict[str, Any]:
        run = self.commands.llmp(["stage-weights"], limit)
        return {"run": run.get("arn"), "status": run.get("status")}

    def upload_data(self, limit: float) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as folder:
            path = dataset.write(Path(folder) / "integ.jsonl")
            uploaded = self.commands.llmp(["upload-data", str(path), "--under", DATA_UNDER], limit)
        self.state["input_data"] = uploaded["input_data"]
        return {"input_data": uploaded["input_data"], "files": len(uploaded.get("files", []))}

    def fine_tune(self, limit: float) -> dict[str, Any]:
        parameters = [f"MaxSteps={self.stage.training.max_steps}", f"InputData={self.state['input_data']}"]
        run = self.commands.llmp(["finetune", *[a for p in parameters for a in ("--param", p)]], limit)
        steps = {s["name"]: s["status"] for s in run.get("steps", [])}
        return {"run": run.get("arn"), "status": run.get("status"), "steps": steps}

    def package_pending(self, limit: float) -> dict[str, Any]:
        group = self.names.pipelines.model_package_group
        newest = self.aws.newest_package(group)
        if newest is None:
            raise StepFailed(f"{group} has no model package: the fine-tuning run registered nothing")
        if newest.get("ModelApprovalStatus") != "PendingManualApproval":
            raise StepFailed(f"{newest['ModelPackageArn']} is {newest.get('ModelApprovalStatus')}, not pending")
        described = self.aws.describe_package(newest["ModelPackageArn"])
        reports = evaluation_reports(described.get("ModelMetrics", {}))
        if not reports:
            raise StepFailed(f"{newest['ModelPackageArn']} carries no evaluation report (ModelMetrics)")
        perplexity = self.aws.read_s3_json(reports[0]).get("metrics", {}).get("perplexity", {}).get("value")
        if not isinstance(perplexity, (int, float)) or not math.isfinite(perplexity) or perplexity <= 0:
            raise StepFailed(f"the evaluation report {reports[0]} has no finite perplexity: {perplexity!r}")
        self.state["version"] = newest.get("ModelPackageVersion")
        return {"package": newest["ModelPackageArn"], "report": reports[0], "perplexity": perplexity}

    def approve(self, limit: float) -> dict[str, Any]:
        decided = self.commands.llmp(
            ["approve", str(self.state["version"]), "-m", "make integ: approved by the run"], limit
        )
        if decided.get("status") != "Approved":
            raise StepFailed(f"llmp approve answered {decided}")
        return {"package": decided.get("package")}

    # --- serving ----------------------------------------------------------------------------------------------

    def in_service(self, limit: float) -> dict[str, Any]:
        def probe() -> str | None:
            endpoint = self.aws.endpoint(self.names.endpoint) or {}
            status = endpoint.get("EndpointStatus")
            if status == "Failed":
                raise StepFailed(f"endpoint {self.names.endpoint} Failed: {endpoint.get('FailureReason')}")
            return status if status == "InService" else None

        return {"status": wait_for(f"endpoint {self.names.endpoint} InService", probe, limit, poll_s=self.poll_s)}

    def targets(self) -> list[smoke_test.SageMakerEndpoint]:
        """What answers requests: the endpoint itself, or each inference component (adapters too) by its name."""
        endpoint = smoke_test.SageMakerEndpoint(self.names.endpoint, self.aws.session)
        shorts = [c.name for c in self.stage.serving.components]
        shorts += [a.name for c in self.stage.serving.components for a in c.adapters]
        return [endpoint.of_component(component_name(self.names.endpoint, s)) for s in shorts] or [endpoint]

    def invoke(self, limit: float) -> dict[str, Any]:
        answers, speeds = {}, {}
        for target in self.targets():
            reply = target.invoke(smoke_test.GOOD_REQUEST)
            if problem := smoke_test.check_generation(reply):
                raise StepFailed(f"{target.component or target.name}: {problem}")
            answers[target.component or target.name] = json.loads(reply.body)["generated_text"]
            began = time.monotonic()
            timed = target.invoke(TOKENS_PER_SECOND_REQUEST)
            seconds = time.monotonic() - began
            tokens = (json.loads(timed.body).get("details") or {}).get("generated_tokens") if timed.status == 200 else 0
            speeds[target.component or target.name] = round(tokens / seconds, 1) if tokens and seconds else None
        self.state["answers"] = answers
        return {"answers": answers, "tokens_per_second": speeds}

    def stream(self, limit: float) -> dict[str, Any]:
        for target in self.targets():
            expected = self.state["answers"][target.component or target.name]
            if problem := smoke_test.check_stream(target.invoke_stream(smoke_test.STREAM_REQUEST), expected):
                raise StepFailed(f"{target.component or target.name}: {problem}")
        return {}

    def bad_request(self, limit: float) -> dict[str, Any]:
        statuses = {}
        for target in self.targets():
            reply = target.invoke(smoke_test.BAD_REQUEST)
            if not 400 <= reply.status < 500:
                raise StepFailed(f"{target.component or target.name}: a malformed request answered {reply.status}")
            statuses[target.component or target.name] = reply.status
        return {"statuses": statuses}

    def alarms_and_scaling(self, limit: float) -> dict[str, Any]:
        resources = self.aws.stack_resources(self.names.stack("serving"))
        alarm_names = [r["physical_id"] for r in resources if r["type"] == "AWS::CloudWatch::Alarm"]
        if not alarm_names:
            raise StepFailed(f"{self.names.stack('serving')} has no CloudWatch alarm")
        found = {a["AlarmName"] for a in self.aws.alarms(alarm_names)}
        if missing := sorted(set(alarm_names) - found):
            raise StepFailed(f"alarms of the stack that CloudWatch does not know: {missing}")
        policies = expected_policies(self.stage, self.names)
        present = {p["PolicyName"] for p in self.aws.scaling_policies(policies)} if policies else set()
        if missing := sorted(set(policies) - present):
            raise StepFailed(f"scaling policies missing: {missing}")
        return {"alarms": len(alarm_names), "scaling_policies": sorted(present)}

    def cold_start(self, limit: float) -> dict[str, Any]:
        """Every component that may scale to zero set to zero copies; once the endpoint has no instance, requests
        until one is answered: the first fails with a no-capacity error and wakes it (the stack's step policy)."""
        deadline = time.monotonic() + limit
        zeroable = [c for c in self.stage.serving.components if c.min_copies == 0]
        for component in zeroable:
            self.aws.set_copy_count(component_name(self.names.endpoint, component.name), 0)

        def no_instance() -> bool:
            variants = (self.aws.endpoint(self.names.endpoint) or {}).get("ProductionVariants", [])
            return bool(variants) and sum(v.get("CurrentInstanceCount", 0) for v in variants) == 0

        wait_for("the endpoint at zero instances", no_instance, deadline - time.monotonic(), poll_s=self.poll_s)
        target = smoke_test.SageMakerEndpoint(self.names.endpoint, self.aws.session).of_component(
            component_name(self.names.endpoint, zeroable[0].name)
        )
        began, attempts = time.monotonic(), 0

        def answered() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                return target.invoke(smoke_test.GOOD_REQUEST).status == 200
            except Exception:  # the no-capacity error is what wakes it; keep asking
                return False

        wait_for("a first answer after zero", answered, deadline - time.monotonic(), poll_s=self.poll_s)
        return {"cold_start_seconds": round(time.monotonic() - began), "requests": attempts}


def evaluation_reports(metrics: dict[str, Any]) -> list[str]:
    """Every S3Uri a package's ModelMetrics names (the SDK's model_statistics lands in ModelQuality.Statistics)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("S3Uri"), str):
                found.append(value["S3Uri"])
            for item in value.values():
                walk(item)

    walk(metrics)
    return found


def expected_policies(stage: StageConfig, names: StageNames) -> list[str]:
    """The scaling policies the serving stack creates for its components (infrastructure/constructs/
    endpoint_scaling.py names them with core/naming.py)."""
    serving, policies = stage.serving, []
    for component in serving.components:
        full = component_name(names.endpoint, component.name)
        if component.scales:
            policies.append(component_policy_name(full, serving.autoscaling.scaling_metric))
        if component.min_copies == 0:
            policies.append(scale_from_zero_policy_name(full))
    return policies
