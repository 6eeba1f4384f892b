"""`make rehearse KEEP=1`: the stage stays deployed on the emulator, which keeps running, and llmp works against it
with the commands the rehearsal prints. A whole rehearsal: marked rehearse_examples (make rehearse-examples, CI)."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from typer.testing import CliRunner

from cli.app import app
from rehearsal import rehearse
from rehearsal.server import is_listening

pytestmark = pytest.mark.rehearse_examples


def test_a_kept_stage_answers_llmp_until_its_server_is_stopped(capsys, monkeypatch):
    status = rehearse.main(["--stay-up"])
    output = capsys.readouterr().out
    assert status == 0, output
    exports = re.search(r"^  export (.+)$", output, re.MULTILINE).group(1)
    command = re.search(r"^  \.venv/bin/llmp (status .+)$", output, re.MULTILINE).group(1)
    pid = int(re.search(r"Stop it: kill (\d+)", output).group(1))
    port = int(re.search(r"http://localhost:(\d+)", exports).group(1))
    try:
        assert "destroy:" not in output and is_listening(port)
        env = dict(pair.split("=", 1) for pair in exports.split())
        for name in [n for n in os.environ if n.startswith("AWS_")]:
            monkeypatch.delenv(name)
        result = CliRunner().invoke(app, [*command.split(), "--output", "json"], env=env)
        assert result.exit_code == 0, result.output
        (stage,) = json.loads(result.stdout)["stages"]
        assert set(stage["stacks"].values()) == {"CREATE_COMPLETE"}
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while is_listening(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not is_listening(port)
