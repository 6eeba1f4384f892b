"""The commands a user runs, run for them: `make synth`, the CDK CLI with the arguments `make deploy` and
`make destroy` give it, and `llmp --json`. Each runs in its own process group (a Ctrl-C at the terminal reaches the
runner, which stops the command and tears down), with a timeout, its output kept in the report's folder.

`cdk deploy` gets `--require-approval never` and `cdk destroy` gets `--force`: the person confirmed the whole run
before it started (or passed --yes), and a CI job has no terminal to answer the CDK's own questions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CDK = REPO / "node_modules" / ".bin" / "cdk"
# What the Makefile exports for every target (quiet, offline-friendly CDK; the project's Node.js first on PATH).
ENVIRONMENT = {
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "CDK_DISABLE_VERSION_CHECK": "1",
    "CDK_HOME": str(REPO / ".cdk-home"),
    "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
}


class CommandFailed(Exception):
    """A command exited with a status other than 0; the message ends with its last lines of output."""


class CommandTimedOut(CommandFailed):
    """A command ran past its time and was stopped."""


@dataclass
class Commands:
    config: str  # as given to make: a path relative to the repository
    stage: str
    log_dir: Path

    @property
    def context(self) -> list[str]:
        return ["-c", f"config={self.config}", "-c", f"stage={self.stage}"]

    def synth(self, timeout_s: float) -> None:
        self.run("synth", ["make", "synth", f"CONFIG={self.config}", f"STAGE={self.stage}"], timeout_s)

    def deploy(self, stacks: list[str], timeout_s: float) -> None:
        """cdk deploy as `make deploy STAGE=...` runs it, for some stacks of the stage ("Storage") or all ("*")."""
        patterns = [f"{self.stage}/{stack}" for stack in stacks]
        self.run(
            "deploy-" + "-".join(s.strip("*").lower() or "all" for s in stacks),
            [str(CDK), "deploy", *patterns, *self.context, "--require-approval", "never"],
            timeout_s,
        )

    def destroy(self, timeout_s: float) -> None:
        """cdk destroy as `make destroy STAGE=...` runs it, without the question."""
        self.run("destroy", [str(CDK), "destroy", f"{self.stage}/*", *self.context, "--force"], timeout_s)

    def llmp(self, arguments: list[str], timeout_s: float) -> dict[str, Any]:
        """`llmp ARGUMENTS --config ... --stage ... --json`: its one JSON document."""
        argv = [sys.executable, "-m", "cli", *arguments, "--config", self.config, "--stage", self.stage, "--json"]
        output = self.run("llmp-" + arguments[0], argv, timeout_s)
        try:
            return json.loads(output)
        except ValueError:
            raise CommandFailed(f"llmp {arguments[0]} printed no JSON document: {output[-300:]!r}") from None

    def run(self, name: str, argv: list[str], timeout_s: float) -> str:
        """Run `argv` from the repository's root; its stdout (stderr goes to the log and the terminal)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        env = {**os.environ, **{k: v for k, v in ENVIRONMENT.items() if k not in os.environ}}
        env["PATH"] = os.pathsep.join([str(CDK.parent), env.get("PATH", "")])
        print(f"  $ {' '.join(argv)}", flush=True)
        with open(log, "w") as errors:
            process = subprocess.Popen(
                argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True
            )
            try:
                stdout, _ = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                stop(process)
                raise CommandTimedOut(
                    f"{' '.join(argv[:3])} ran past {timeout_s:.0f} s and was stopped; log: {log}"
                ) from None
            except BaseException:  # Ctrl-C, SIGTERM, a deadline: the command goes with the runner
                stop(process)
                raise
        (self.log_dir / f"{name}.out").write_text(stdout or "")
        if process.returncode != 0:
            tail = "\n".join(log.read_text().splitlines()[-15:])
            raise CommandFailed(f"{' '.join(argv[:3])} exited {process.returncode}; log: {log}\n{tail}")
        return stdout or ""


def stop(process: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM to the command's process group (the CDK CLI stops its deploy and exits), SIGKILL after `grace_s`."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    except ProcessLookupError:
        pass
