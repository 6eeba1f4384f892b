"""The project's pinned CDK CLI, run with an environment that can only reach the emulator."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CDK = REPO_ROOT / "node_modules" / ".bin" / "cdk"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass(frozen=True)
class CliRun:
    args: tuple[str, ...]
    returncode: int
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def environment(*, endpoint_url: str, region: str, work_dir: Path) -> dict[str, str]:
    """The Makefile's quiet-tooling settings, fake credentials and the emulator's endpoint for every service.

    Every inherited AWS_* variable is dropped (a profile, a session token or a per-service endpoint such as
    AWS_ENDPOINT_URL_S3 could send a call to a real account), and the shared config and credentials files point
    at files that do not exist, so nothing from ~/.aws is read.
    """
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {
        **inherited,
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_HOME": str(work_dir / "cdk-home"),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
        "DS_ACCELERATOR": "cpu",
        **FAKE_CREDENTIALS,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_CONFIG_FILE": str(work_dir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(work_dir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def run(args: list[str], *, env: dict[str, str], log: Path, timeout_s: float = 600) -> CliRun:
    """`cdk <args>` from the repository root; its output goes to `log` and is returned.

    The CLI runs in a process group of its own (it starts the app, which starts node for jsii), so a timeout or an
    interrupt stops all of it and leaves no process behind.
    """
    started = time.monotonic()
    process = subprocess.Popen(
        [str(CDK), *args, "--no-notices"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        _stop_group(process)
        output, _ = process.communicate()
        output += f"\n(cdk {' '.join(args)} did not finish within {timeout_s:.0f} s and was stopped)"
        returncode = 124
    except BaseException:
        _stop_group(process)
        process.wait()
        raise
    log.write_text(output)
    return CliRun(tuple(args), returncode, output, time.monotonic() - started)


def _stop_group(process: subprocess.Popen) -> None:
    """SIGKILL to the CLI's process group (the group it leads, started by this module); gone already is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
