"""The stage a command works on, the credentials it runs with, and the deployed stacks' outputs.

Stack names and output keys are the ones infrastructure/stage.py and the stacks create (tests/cli/test_outputs.py checks
them against a synthesized assembly); the values come from CloudFormation, never from a guess.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

from cli.errors import CliError, Exit, aws_errors, shorten
from core.config import PlatformConfig, StageConfig
from core.naming import StageNames

# The stacks of a stage, named <project>-<stage>-<part> (infrastructure/stage.py).
STACK_PARTS = ("storage", "training", "serving")
# What the CLI reads from each stack's outputs (CfnOutputs of infrastructure/storage_stack.py, training_stack.py,
# serving_stack.py).
OUTPUTS = {
    "storage": ("DataBucketName", "ModelsBucketName", "KeyArn"),
    "training": ("FinetunePipelineName", "StagingPipelineName", "ModelPackageGroupName"),
    "serving": ("EndpointName",),
}
# A stack in one of these has no usable outputs: its creation failed, or it is being created or deleted.
UNUSABLE = {
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "DELETE_COMPLETE",
}
# Standard retries with backoff on throttling: a followed run polls for hours. Each retry is announced on stderr
# (announce_retries), so a slow answer is never silence.
MAX_ATTEMPTS = 8
CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS}, user_agent_extra="llmp")


@dataclass(frozen=True)
class Choice:
    """What --profile and --region chose for this command (None: boto3's own choice, the stage's region)."""

    profile: str | None = None
    region: str | None = None


# Set by the options of the command being run (cli/options.py), reset at the start of each command line.
chosen = Choice()


def choose(*, profile: str | None = None, region: str | None = None, reset: bool = False) -> None:
    """Record --profile / --region (the last one given wins)."""
    global chosen
    base = Choice() if reset else chosen
    chosen = Choice(profile=profile or base.profile, region=region or base.region)


class WrongAccount(CliError):
    """The credentials are for another account than the config gives the stage."""


@dataclass(frozen=True)
class Stage:
    """One stage of the config, as the CLI addresses it."""

    name: str
    project: str
    config: StageConfig
    account: str | None  # None: environment-agnostic, deployed into whatever account deployed it
    config_path: str

    @property
    def region(self) -> str:
        return self.config.region

    def stack_name(self, part: str) -> str:
        return StageNames(self.project, self.name).stack(part)


def stages(config: PlatformConfig, config_path: str, only: str | None = None) -> list[Stage]:
    """The config's stages in promotion order, or just `only` (exit 2 when the config has no such stage)."""
    if only is not None and only not in config.stages:
        raise CliError(f"no stage named {only!r} in {config_path}; its stages: {', '.join(config.stages)}", Exit.USAGE)
    return [
        Stage(name, config.project, stage, config.stage_account(name), config_path)
        for name, stage in config.stages.items()
        if only is None or name == only
    ]


def one_stage(config: PlatformConfig, config_path: str, name: str | None) -> Stage:
    """`name`, or the first stage of the config when none is given."""
    return stages(config, config_path, name or next(iter(config.stages)))[0]


class Aws:
    """Clients per service and region, made once, with the credentials boto3 finds (AWS_PROFILE, SSO, keys...)."""

    def __init__(self, *, profile: str | None = None, region: str | None = None) -> None:
        self.clients: dict[tuple[str, str], Any] = {}
        self._sessions: dict[str, boto3.Session] = {}
        self.profile = profile
        self.region = region  # --region: instead of the stage's

    def client(self, service: str, region: str) -> Any:
        if (service, region) not in self.clients:
            with aws_errors():
                session = self._sessions.setdefault(region, session_for(self.region or region, self.profile))
                made = session.client(service, config=CLIENT_CONFIG)
                announce_retries(made)
                self.clients[service, region] = made
        return self.clients[service, region]

    @functools.cache  # noqa: B019 - one identity per region for the life of one command
    def caller_account(self, region: str) -> str:
        with aws_errors():
            return self.client("sts", region).get_caller_identity()["Account"]

    def check_account(self, stage: Stage) -> str:
        """The credentials' account; exit 4 when the config puts the stage in another one."""
        actual = self.caller_account(stage.region)
        if stage.account and stage.account != actual:
            raise WrongAccount(
                f"stage {stage.name} is in account {stage.account} ({stage.config_path}), but your credentials are "
                f"for {actual}: use credentials for {stage.account} (e.g. AWS_PROFILE=<its profile>)",
                Exit.ACCESS,
            )
        return actual

    def describe_stack(self, stage: Stage, part: str) -> dict | None:
        """The stack as CloudFormation describes it, or None when it does not exist."""
        cloudformation = self.client("cloudformation", stage.region)
        with aws_errors():
            try:
                return cloudformation.describe_stacks(StackName=stage.stack_name(part))["Stacks"][0]
            except ClientError as error:
                # "If the stack doesn't exist, a ValidationError is returned" (CloudFormation API reference,
                # DescribeStacks); a deleted stack is found only by its id, not by its name. The name is ours and
                # valid, so a ValidationError here means just that.
                if error.response.get("Error", {}).get("Code") == "ValidationError":
                    return None
                raise

    def outputs(self, stage: Stage, part: str) -> dict[str, str]:
        """The stack's outputs; exit 3 when it is not deployed, not usable, or lacks one the CLI reads."""
        name = stage.stack_name(part)
        stack = self.describe_stack(stage, part)
        deploy = f"make deploy STAGE={stage.name}" + (
            f" CONFIG={stage.config_path}" if not stage.config_path.endswith("config/default.yaml") else ""
        )
        if stack is None:
            raise CliError(
                f"stage {stage.name} is not deployed: no stack {name} in {stage.region}: run `{deploy}`",
                Exit.AWS_STATE,
            )
        status = stack["StackStatus"]
        if status in UNUSABLE:
            raise CliError(
                f"stack {name} is {status}: wait for it to finish, or see its events (aws cloudformation "
                f"describe-stack-events --stack-name {name} --region {stage.region}) and run `{deploy}` again",
                Exit.AWS_STATE,
            )
        found = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        missing = [key for key in OUTPUTS[part] if key not in found]
        if missing:
            raise CliError(
                f"stack {name} ({status}) has no output {', '.join(missing)}: it was deployed from an older "
                f"version of this repository; run `{deploy}`",
                Exit.AWS_STATE,
            )
        return found


@functools.cache
def _service_models() -> botocore.loaders.Loader:
    return botocore.loaders.create_loader()


def session_for(region: str, profile: str | None = None) -> boto3.Session:
    """A boto3 session with the process's one loader of API models (SageMaker's takes most of a second to parse)."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _service_models())
    return boto3.Session(botocore_session=core, region_name=region, profile_name=profile)


def announce_retries(client: Any) -> None:
    """Say on stderr each time botocore retries a call, and why, instead of sleeping in silence.

    botocore's retry handler (standard mode) answers the `needs-retry` event of each attempt; when it asks for a
    retry, the endpoint sleeps and sends the request again, emitting `request-created` with the attempt number in
    the request's context (botocore/endpoint.py, _send_request). So: `needs-retry` notes what the attempt got, in
    that context, and `request-created` of attempt 2 and later says it, before the request goes out again."""
    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register_first(f"needs-retry.{service}", _note_outcome, unique_id=f"llmp-note-{service}")
    client.meta.events.register(f"request-created.{service}", _say_retrying, unique_id=f"llmp-retrying-{service}")


def _note_outcome(request_dict: dict[str, Any], response: Any = None, caught_exception: Any = None, **_: Any) -> None:
    if caught_exception is not None:
        reason = f"{type(caught_exception).__name__}: {shorten(str(caught_exception))}"
    elif response is not None:
        http, parsed = response
        error = parsed.get("Error", {}) if isinstance(parsed, dict) else {}
        code = error.get("Code") or ""
        reason = f"HTTP {http.status_code}" + (f" {code}" if code and code != str(http.status_code) else "")
        if error.get("Message"):
            reason += f": {shorten(str(error['Message']))}"
    else:
        return
    request_dict["context"]["llmp_last_outcome"] = reason


def _say_retrying(request: Any, operation_name: str, **_: Any) -> None:
    retries = request.context.get("retries", {})
    attempt = retries.get("attempt", 1)
    if attempt < 2:
        return
    reason = request.context.get("llmp_last_outcome", "an error")
    sys.stderr.write(
        f"llmp: {operation_name} got {reason}; retrying (attempt {attempt} of {retries.get('max', MAX_ATTEMPTS)})\n"
    )
    sys.stderr.flush()


def connect() -> Aws:
    """The AWS access of one command, with --profile and --region if given (tests replace it)."""
    return Aws(profile=chosen.profile, region=chosen.region)
