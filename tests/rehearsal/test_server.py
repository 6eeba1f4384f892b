"""The emulator process: on loopback, reachable through the endpoint the CLI gets, always stopped."""

from __future__ import annotations

import os
import signal
import time

import boto3
import pytest

from rehearsal import server
from rehearsal.server import EmulatorError, is_listening, running_emulator


def test_emulator_serves_on_loopback_in_the_given_account_and_is_stopped_after_the_block(tmp_path):
    with running_emulator(tmp_path / "moto.log", account="111111111111") as emulator:
        assert is_listening(emulator.port)
        assert emulator.endpoint_url == f"http://localhost:{emulator.port}"
        credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
        s3 = boto3.client("s3", endpoint_url=emulator.endpoint_url, **credentials)
        s3.create_bucket(Bucket="rehearsal-probe")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["rehearsal-probe"]
        sts = boto3.client("sts", endpoint_url=emulator.endpoint_url, **credentials)
        assert sts.get_caller_identity()["Account"] == "111111111111"
    assert not is_listening(emulator.port)
    assert f"Running on http://127.0.0.1:{emulator.port}" in (tmp_path / "moto.log").read_text()


def test_emulator_is_stopped_when_the_block_fails(tmp_path):
    with pytest.raises(ValueError, match="a check blew up"), running_emulator(tmp_path / "moto.log") as emulator:
        port = emulator.port
        raise ValueError("a check blew up")
    assert not is_listening(port)


def test_an_emulator_that_cannot_start_is_reported_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(server.sys, "executable", "/bin/false")
    expected = r"the emulator exited with status 1 before listening on 127\.0\.0\.1:"
    with pytest.raises(EmulatorError, match=expected), running_emulator(tmp_path / "moto.log"):
        pytest.fail("the block must not run when the emulator did not start")


def test_an_emulator_asked_to_stay_up_outlives_its_block_and_one_failing_does_not(tmp_path):
    with running_emulator(tmp_path / "kept.log", stay_up=lambda: True) as kept:
        pass
    try:
        assert is_listening(kept.port)
    finally:
        os.kill(kept.pid, signal.SIGTERM)
    with pytest.raises(RuntimeError), running_emulator(tmp_path / "failed.log", stay_up=lambda: True) as failed:
        raise RuntimeError("a check broke")
    deadline = time.monotonic() + 10
    while is_listening(failed.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_listening(failed.port)
