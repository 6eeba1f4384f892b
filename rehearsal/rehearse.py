"""Deploy rehearsal: one stage through the real CDK CLI onto moto's AWS emulator, checked, destroyed, checked.

    make rehearse                                            # the first stage that retains its data (staging)
    .venv/bin/python -m rehearsal.rehearse --stage dev       # a stage with removal_policy destroy: its data goes too
    .venv/bin/python -m rehearsal.rehearse --config path/to/config.yaml --keep
    .venv/bin/python -m rehearsal.rehearse --overlay path/to/overlay.yaml    # your overlay, not a generated one
    make rehearse KEEP=1                                     # --stay-up: after the deploy's checks, leave it running

Steps: generate the overlay for the stage (rehearsal/overlay.py: empty unless the stage serves on an instance type
SageMaker does not host endpoints on); start moto's server, with the emulator's fixes, on 127.0.0.1 (a free port);
`cdk synth` the stage with it; `cdk bootstrap`; `cdk deploy` (asset publishing, change sets); check what the emulator
can represent against the templates; `cdk deploy` again (must change nothing); put an object in the data bucket; for
a stage that deletes its data, empty the buckets its Custom::S3AutoDeleteObjects would (moto cannot run them: printed
as a gap); `cdk destroy`; check what the stage's removal policy promises (retain: every bucket, KMS key and log group
survives, the object too; destroy: the buckets and log groups are gone, the keys pending deletion, the object with its
bucket) and that the endpoint is gone. Prints PASS/FAIL per check and what moto does not emulate. Exit status: 0 all
passed, 1 a check failed, 2 the rehearsal could not be set up (bad arguments, an invalid config or overlay), 3 the
config cannot be rehearsed on moto, for the reason printed (no instance type the emulator accepts passes the config's
checks for the stage). Nothing can reach AWS: see `cdk_cli.environment`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rehearsal import cdk_cli, checks, gaps, overlay, retention
from rehearsal.assembly import StackTemplate, read_stage
from rehearsal.deployment import Aws, Deployment
from rehearsal.findings import Check, Finding, Gap
from rehearsal.server import Emulator, EmulatorError, running_emulator

DEFAULT_CONFIG = "config/default.yaml"
GENERATED_OVERLAY = "moto-overlay.yaml"  # in the work directory: the overlay generated for the stage rehearsed
# Put in the data bucket before the destroy: afterwards it is there, unchanged (retain), or gone with its bucket.
DATA_OBJECT_KEY = "raw/rehearsal/data-object.txt"
DATA_OBJECT_BODY = b"Put by the deploy rehearsal before cdk destroy: a retained bucket keeps it, a destroyed one not.\n"


class SetupError(Exception):
    """The rehearsal cannot start (bad arguments, an invalid config or overlay, a stage that does not exist); exit 2."""


class CannotRehearse(SetupError):
    """The config has nothing moto can deploy, for a reason of the config and moto, not of the arguments; exit 3."""

    def __init__(self, reason: str, details: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.details = reason, details or []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rehearsal.rehearse",
        description="Deploy one stage onto moto's AWS emulator through the real CDK CLI, check it, destroy it.",
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"the platform config (default {DEFAULT_CONFIG})")
    parser.add_argument(
        "--overlay",
        help="overlays merged over the config, comma-separated, used instead of the generated one ('' for none; "
        "default: generated from the config for the stage, rehearsal/overlay.py: what moto cannot take)",
    )
    parser.add_argument(
        "--stage",
        help="the stage to rehearse (default: the first stage that retains its data, else the first stage); it is "
        "checked against its own removal_policy",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, cloud assembly)")
    parser.add_argument(
        "--stay-up",
        action="store_true",
        help="after the checks of the deploy, leave the stage deployed and the emulator running, to try llmp "
        "against it (make rehearse KEEP=1); nothing is destroyed",
    )
    return parser.parse_args(argv)


# --- the stage and why ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageChoice:
    name: str
    why: str
    overlays: tuple[str, ...]  # the overlay files merged over the config, generated or given
    generated: overlay.StageOverlay | None  # what was generated, and why; None when overlays were given
    overlay_changes: list[str]  # `serving.instance_type ml.g5.2xlarge -> ml.g4dn.xlarge`
    real: Any  # the stage's StageConfig as configured
    rehearsed: Any  # the same with the overlays merged over it


def choose_stage(
    config_path: str, requested: str | None, *, overlays: tuple[str, ...] | None, work_dir: Path
) -> StageChoice:
    """The stage to rehearse, why, and what the overlays change in it; with `overlays` None, the overlay is generated
    for the stage into `work_dir`. Raises SetupError (or CannotRehearse) when it cannot be rehearsed."""
    from core import synth_checks
    from core.config import ConfigError, load_config

    try:
        real = load_config(config_path)
    except ConfigError as err:
        raise SetupError(str(err)) from None
    stage, why = _stage(config_path, real, requested)
    generated = None
    if overlays is None:
        generated = overlay.for_stage(config_path, stage)
        if generated.refusal:
            raise CannotRehearse(generated.refusal, [f"{c}: {p}" for c, p in generated.refused.items()])
        path = work_dir / GENERATED_OVERLAY
        path.write_text(overlay.render([generated], config_path=config_path, destination=path))
        overlays = (str(path),)
    try:
        rehearsed = load_config(config_path, only_stage=stage, overlays=overlays)
        synth_checks.check(rehearsed, config_path=config_path)
    except ConfigError as err:
        raise SetupError(str(err)) from None
    changes = _changes(real.stages[stage].model_dump(), rehearsed.stages[stage].model_dump())
    return StageChoice(stage, why, overlays, generated, changes, real.stages[stage], rehearsed.stages[stage])


def _stage(config_path: str, real: Any, requested: str | None) -> tuple[str, str]:
    if requested is None:
        retaining = [name for name, stage in real.stages.items() if stage.removal_policy == "retain"]
        if retaining:
            stage = retaining[0]
            return stage, (
                f"{stage} is the first stage in promotion order that keeps its data (removal_policy: retain), so "
                "'retained data survives cdk destroy' tests the real setting, not one changed for the rehearsal"
            )
        stage = next(iter(real.stages))
        return stage, (
            f"every stage of {config_path} deletes its data with the stack (removal_policy: destroy) and {stage} is "
            "the first; after cdk destroy its buckets and log groups must be gone and its keys pending deletion"
        )
    if requested not in real.stages:
        raise SetupError(f"{config_path}: no stage named {requested!r}; stages: {', '.join(real.stages)}")
    return requested, f"{requested} was asked for (removal_policy: {real.stages[requested].removal_policy})"


def _changes(before: Any, after: Any, path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        return [c for key in before | after for c in _changes(before.get(key), after.get(key), f"{path}.{key}")]
    return [] if before == after else [f"{path.lstrip('.')} {before} -> {after}"]


# --- output --------------------------------------------------------------------------------------------------


class Report:
    """Progress lines with the time since the start, PASS/FAIL lines, and the findings for the summary."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.findings: list[Finding] = []

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)

    def heading(self, text: str) -> None:
        print(text, flush=True)

    def add(self, findings: Finding | list[Finding]) -> None:
        for finding in findings if isinstance(findings, list) else [findings]:
            self.findings.append(finding)
            if isinstance(finding, Check):
                print(f"  {'PASS' if finding.passed else 'FAIL'}  {finding.name}: {finding.detail}", flush=True)

    @property
    def checks(self) -> list[Check]:
        return [f for f in self.findings if isinstance(f, Check)]

    @property
    def gaps(self) -> list[Gap]:
        return [f for f in self.findings if isinstance(f, Gap)]

    @property
    def failed(self) -> bool:
        return any(not c.passed for c in self.checks)

    @property
    def exit_status(self) -> int:
        """0 when checks ran and all passed; 1 otherwise (a run that checked nothing proved nothing)."""
        return 0 if self.checks and not self.failed else 1

    def summary(self) -> str:
        failed = [c.name for c in self.checks if not c.passed]
        seconds = time.monotonic() - self.started
        return (
            f"Result: {len(self.checks)} checks, {len(self.checks) - len(failed)} passed, {len(failed)} failed "
            f"({seconds:.1f} s)" + (f": {', '.join(failed)}" if failed else "")
        )


def run_check(report: Report, name: str, check: Callable[..., Finding | list[Finding]], *args: Any) -> None:
    """A check that raises is a failed check (with the error), and the rehearsal goes on."""
    try:
        report.add(check(*args))
    except Exception as err:  # reported as a failed check, with the error: never swallowed
        report.add(Check(name, False, f"the check itself failed: {type(err).__name__}: {err}"))


def cli_step(report: Report, what: str, run: cdk_cli.CliRun) -> bool:
    if run.ok:
        report.step(f"{what} ({run.seconds:.1f} s)")
        return True
    report.step(f"{what}: FAILED after {run.seconds:.1f} s")
    report.add(Check(what.split(":")[0], False, f"cdk {' '.join(run.args)} exited {run.returncode}:\n{run.tail()}"))
    return False


# --- the rehearsal -------------------------------------------------------------------------------------------


@dataclass
class Rehearsal:
    """What one run needs and learns as it goes (the gaps section reads it, however far the run got)."""

    config: str
    overlays: tuple[str, ...]
    stage: str
    region: str
    removal_policy: str  # the stage's: what the checks after destroy hold it to
    work_dir: Path
    stay_up: bool = False  # leave the stage deployed and the emulator running after the redeploy's check
    stacks: list[StackTemplate] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # stack name -> output key -> value
    stayed_up: bool = False  # deployed, checked and left running (stay_up, and every check passed)

    @property
    def context(self) -> list[str]:
        """The app's context; paths made absolute, since the CLI runs from the repository root."""
        overlays = ",".join(str(Path(p).resolve()) for p in self.overlays)
        return ["-c", f"config={Path(self.config).resolve()}", "-c", f"overlay={overlays}", "-c", f"stage={self.stage}"]


def rehearse(args: argparse.Namespace, work_dir: Path, report: Report) -> None:
    given = None if args.overlay is None else tuple(p for p in args.overlay.split(",") if p)
    choice = choose_stage(args.config, args.stage, overlays=given, work_dir=work_dir)
    run = Rehearsal(
        args.config,
        choice.overlays,
        choice.name,
        choice.real.region,
        choice.real.removal_policy,
        work_dir,
        stay_up=args.stay_up,
    )
    if choice.generated is not None:
        overlay_text = f" + the overlay generated for it, {GENERATED_OVERLAY} in the work directory"
    else:
        overlay_text = f" + overlay {','.join(choice.overlays)}" if choice.overlays else ", no overlay"
    report.heading(f"Deploy rehearsal of stage {run.stage} ({args.config}{overlay_text}) on moto")
    report.heading(f"  why {run.stage}: {choice.why}")
    report.heading(f"  overlay, for this rehearsal only: {'; '.join(choice.overlay_changes) or 'no changes'}")
    if choice.generated is not None:
        for key, reason in choice.generated.why.items():
            report.heading(f"    {key}: {reason}")
    report.heading(f"  work directory (logs, cloud assembly): {work_dir}")

    # A stage that names its account is deployed there (the CLI checks the credentials' account against it).
    # With --stay-up the emulator outlives the rehearsal only if the stage was deployed and checked.
    with running_emulator(
        work_dir / "moto-server.log", account=choice.real.account, stay_up=lambda: run.stayed_up
    ) as emulator:
        report.step(f"emulator: moto's server on 127.0.0.1:{emulator.port} (clients use {emulator.endpoint_url})")
        aws = Aws(emulator.endpoint_url, run.region)
        account = aws("sts").get_caller_identity()["Account"]
        probe = gaps.probe_instance_type(aws, choice.real.serving.instance_type, account=account)
        deploy_check_destroy(run, report, emulator, aws, account)
    report.step("emulator left running" if run.stayed_up else "emulator stopped")
    print_gaps(run, report, emulator.log.read_text(errors="replace"), probe, choice)
    if run.stayed_up:
        report.heading(stay_up_instructions(run, emulator))


@dataclass
class _Cdk:
    """`cdk` against the emulator: each command's output in its own log, and every command after synth reading the
    one synthesized assembly, so that what is deployed and destroyed is exactly what is checked."""

    env: dict[str, str]
    logs: Path
    assembly: Path
    selector: str  # the stage's stacks

    def __call__(self, args: list[str], log: str) -> cdk_cli.CliRun:
        return cdk_cli.run(args, env=self.env, log=self.logs / log)

    @property
    def app(self) -> list[str]:
        return ["--app", str(self.assembly)]

    @property
    def deploy_args(self) -> list[str]:
        return ["deploy", self.selector, *self.app, "--require-approval", "never"]


def deploy_check_destroy(run: Rehearsal, report: Report, emulator: Emulator, aws: Aws, account: str) -> None:
    env = cdk_cli.environment(endpoint_url=emulator.endpoint_url, region=run.region, work_dir=run.work_dir)
    cdk = _Cdk(env, run.work_dir / "logs", run.work_dir / "cdk.out", f"{run.stage}/*")
    cdk.logs.mkdir(exist_ok=True)
    if not _synth_bootstrap_deploy(run, report, cdk, account):
        return
    deployment = _check_deployed(run, report, aws, account)
    if not _redeploy_and_check(run, report, aws, cdk):
        return
    if run.stay_up:
        run.stayed_up = report.exit_status == 0
        return
    _destroy_and_check(run, report, aws, cdk, deployment)


def _synth_bootstrap_deploy(run: Rehearsal, report: Report, cdk: _Cdk, account: str) -> bool:
    """Synth the stage into the work directory, bootstrap the account, deploy; whether every step succeeded."""
    synth = cdk(["synth", "--quiet", "--output", str(cdk.assembly), *run.context], "synth.log")
    if not cli_step(report, f"synth: cdk synth of stage {run.stage}, into the work directory", synth):
        return False
    run.stacks = read_stage(cdk.assembly, run.stage)
    environment = f"aws://{account}/{run.region}"
    bootstrap = cdk(["bootstrap", environment, *cdk.app], "bootstrap.log")
    if not cli_step(report, f"bootstrap: cdk bootstrap {environment}", bootstrap):
        return False
    deploy = cdk(cdk.deploy_args, "deploy.log")
    return cli_step(report, f"deploy: cdk deploy '{cdk.selector}' ({len(run.stacks)} stacks)", deploy)


def _check_deployed(run: Rehearsal, report: Report, aws: Aws, account: str) -> Deployment:
    """The checks of what the deploy made; the deployment they read."""
    report.heading("checks after deploy:")
    deployment = Deployment.read(aws, run.stacks, account=account, region=run.region)
    run.outputs = _deployed_outputs(aws, run.stacks)
    for check in checks.AFTER_DEPLOY:
        run_check(report, check.__name__, check, deployment)
    return deployment


def _redeploy_and_check(run: Rehearsal, report: Report, aws: Aws, cdk: _Cdk) -> bool:
    """Deploy again, unchanged, and check that nothing changed; whether the redeploy itself succeeded."""
    events_before = checks.stack_event_counts(aws, run.stacks)
    redeploy = cdk(cdk.deploy_args, "redeploy.log")
    if not cli_step(report, f"redeploy: cdk deploy '{cdk.selector}' again, nothing changed", redeploy):
        return False
    events_after = checks.stack_event_counts(aws, run.stacks)
    run_check(
        report, "redeploy", checks.redeploy_changed_nothing, run.stacks, redeploy.output, events_before, events_after
    )
    return True


def _destroy_and_check(run: Rehearsal, report: Report, aws: Aws, cdk: _Cdk, deployment: Deployment) -> None:
    """Put an object in the data bucket, destroy the stage, and check that what remains is what the removal policy
    promises."""
    data_bucket = next((o["DataBucketName"] for o in run.outputs.values() if "DataBucketName" in o), None)
    if data_bucket is None:
        report.add(Check("data", False, "no stack has the output DataBucketName, where the object goes"))
        return
    aws("s3").put_object(Bucket=data_bucket, Key=DATA_OBJECT_KEY, Body=DATA_OBJECT_BODY)
    report.step(f"put s3://{data_bucket}/{DATA_OBJECT_KEY} (the data bucket)")
    # Read before the destroy: afterwards the stacks' resource lists are gone.
    promised = retention.promised(deployment, run.removal_policy)
    billing = _billing_resources(deployment)
    roles_before = _role_names(aws)
    auto_deleted = retention.auto_deleted_buckets(deployment)
    if auto_deleted:
        report.add(retention.empty_auto_deleted_buckets(aws, auto_deleted))
        report.step(f"emptied {len(auto_deleted)} buckets, the work of {retention.AUTO_DELETE} (moto cannot run it)")

    destroy = cdk(["destroy", cdk.selector, *cdk.app, "--force"], "destroy.log")
    if not cli_step(report, f"destroy: cdk destroy --force '{cdk.selector}'", destroy):
        return
    report.heading(f"checks after destroy (removal_policy: {run.removal_policy}):")
    run_check(report, "stacks deleted", retention.stacks_deleted, aws, run.stacks)
    run_check(report, "removal policy kept", retention.promise_kept, aws, run.removal_policy, promised)
    run_check(
        report,
        "data as the removal policy promises",
        retention.data_as_promised,
        aws,
        run.removal_policy,
        data_bucket,
        DATA_OBJECT_KEY,
        DATA_OBJECT_BODY,
    )
    run_check(report, "endpoint deleted", retention.billing_resources_deleted, aws, billing)
    recreated = gaps.recreated_roles_gap(roles_before, _role_names(aws), [s.stack_name for s in run.stacks])
    if recreated:
        report.add(recreated)


def _billing_resources(deployment: Deployment) -> dict[str, str]:
    """The name of each SageMaker resource that bills while it exists, by its type."""
    return {
        resource_type: physical_id.rsplit("/", 1)[-1]
        for resource_type in ("AWS::SageMaker::Endpoint", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Model")
        for _, _, _, physical_id in deployment.resources(resource_type)
    }


def _deployed_outputs(aws: Aws, stacks: list[StackTemplate]) -> dict[str, dict[str, str]]:
    cloudformation = aws("cloudformation")
    return {
        s.stack_name: {
            o["OutputKey"]: o["OutputValue"]
            for o in cloudformation.describe_stacks(StackName=s.stack_name)["Stacks"][0].get("Outputs", [])
        }
        for s in stacks
    }


def _role_names(aws: Aws) -> set[str]:
    return {r["RoleName"] for page in aws("iam").get_paginator("list_roles").paginate() for r in page["Roles"]}


def print_gaps(
    run: Rehearsal, report: Report, server_log: str, probe: gaps.InstanceTypeProbe, choice: StageChoice
) -> None:
    skipped = gaps.skipped_types(server_log)
    report.heading("\nWhat moto does not emulate (so no check above covers it):")
    lines = [gaps.instance_type_line(probe, choice.rehearsed.serving.instance_type, choice.overlay_changes)]
    if skipped:
        lines.append(
            "resource types moto skips (its log: 'Tried to parse ... but it's not supported'; the stack still says "
            "CREATE_COMPLETE and nothing is created): " + "; ".join(gaps.skipped_type_lines(run.stacks, server_log))
        )
    outputs = {name: set(values) for name, values in run.outputs.items()}
    lines += gaps.custom_resource_lines(run.stacks, outputs, skipped) if run.outputs else []
    lines += [f"{gap.what}: {gap.why}" for gap in report.gaps]
    lines += gaps.fix_lines()
    for line in lines:
        first, *rest = line.split("\n")
        report.heading(f"  - {first}")
        for more in rest:
            report.heading(f"    {more}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(prefix="rehearsal-"))
    report = Report()
    try:
        rehearse(args, work_dir, report)
    except CannotRehearse as err:
        print(f"rehearsal: cannot rehearse {args.config} on moto: {err.reason}", file=sys.stderr)
        for detail in err.details:
            print(f"  - {detail}", file=sys.stderr)
        shutil.rmtree(work_dir, ignore_errors=True)
        return 3
    except SetupError as err:
        print(f"rehearsal: {err}", file=sys.stderr)
        shutil.rmtree(work_dir, ignore_errors=True)
        return 2
    except EmulatorError as err:
        print(f"rehearsal: {err}\n(work directory kept: {work_dir})", file=sys.stderr)
        return 2
    except Exception as err:  # an answer nothing above expected (moto's, a client's): a failed step, not a traceback
        report.add(Check("rehearsal", False, f"stopped by {type(err).__name__}: {err} (the server log is kept)"))
    return finish(report, work_dir, keep=args.keep or args.stay_up)


def stay_up_instructions(run: Rehearsal, emulator: Emulator) -> str:
    """How to use llmp against the stage left on the emulator, and how to stop it."""
    config = Path(run.config).resolve()
    overlays = ",".join(str(Path(p).resolve()) for p in run.overlays)
    exports = " ".join(
        f"{name}={value}"
        for name, value in {
            "AWS_ENDPOINT_URL": emulator.endpoint_url,
            **cdk_cli.FAKE_CREDENTIALS,
            "AWS_DEFAULT_REGION": run.region,
        }.items()
    )
    return "\n".join(
        [
            f"\nStage {run.stage} stays deployed on moto's server (pid {emulator.pid}, {emulator.endpoint_url}).",
            "Use llmp against it (only the emulator: these credentials are fake, the endpoint is loopback):",
            f"  export {exports}",
            f"  .venv/bin/llmp status --config {config} --stage {run.stage}",
            *([f"  (deployed with the overlay {overlays}: llmp reads the config without it)"] if overlays else []),
            f"Stop it: kill {emulator.pid}    (its work directory: {run.work_dir})",
        ]
    )


def finish(report: Report, work_dir: Path, *, keep: bool) -> int:
    """Print the summary; keep the work directory when a check failed or it was asked for; the exit status."""
    print(f"\n{report.summary()}", flush=True)
    if report.exit_status or keep:
        print(f"Kept the work directory for inspection: {work_dir}", flush=True)
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main())
