"""The CLI's environment reaches only the emulator; a CLI run that hangs is stopped with everything it started."""

from __future__ import annotations

import os
import time

from rehearsal import cdk_cli


def test_environment_reaches_only_the_emulator(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-real-session")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.amazonaws.com")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREALKEY")
    env = cdk_cli.environment(endpoint_url="http://localhost:5123", region="eu-west-1", work_dir=tmp_path)

    aws = {k: v for k, v in env.items() if k.startswith("AWS_")}
    assert aws == {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://localhost:5123",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    assert not (tmp_path / "no-aws-config").exists()
    # The Makefile's quiet, offline tooling settings, with the CLI's cache in the work directory.
    assert env["CDK_DISABLE_CLI_TELEMETRY"] == "true"
    assert env["CDK_DISABLE_VERSION_CHECK"] == "1"
    assert env["CDK_HOME"] == str(tmp_path / "cdk-home")


def test_a_cli_run_that_hangs_is_stopped_with_the_processes_it_started(tmp_path, monkeypatch):
    fake_cdk = tmp_path / "cdk"
    grandchild_pid = tmp_path / "grandchild.pid"
    # Like the CLI running the app: a child that starts a grandchild, and neither ends.
    fake_cdk.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {grandchild_pid}\necho started\nsleep 300\n")
    fake_cdk.chmod(0o755)
    monkeypatch.setattr(cdk_cli, "CDK", fake_cdk)

    run = cdk_cli.run(["deploy"], env=dict(os.environ), log=tmp_path / "deploy.log", timeout_s=2)

    assert run.returncode == 124 and not run.ok
    assert "started" in run.output
    assert "did not finish within 2 s and was stopped" in (tmp_path / "deploy.log").read_text()
    pid = int(grandchild_pid.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_cli_run_returns_its_status_and_output(tmp_path, monkeypatch):
    fake_cdk = tmp_path / "cdk"
    fake_cdk.write_text('#!/bin/sh\necho "args: $*"\necho "something failed" >&2\nexit 3\n')
    fake_cdk.chmod(0o755)
    monkeypatch.setattr(cdk_cli, "CDK", fake_cdk)

    run = cdk_cli.run(["destroy", "staging/*", "--force"], env=dict(os.environ), log=tmp_path / "destroy.log")

    assert run.returncode == 3
    assert run.output == "args: destroy staging/* --force --no-notices\nsomething failed\n"
    assert run.tail(1) == "something failed"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited, which is what matters.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
