"""The commands the run starts are the user's (the CDK CLI with make deploy's context, llmp --json), stopped at
their timeout, and their failures carry the end of their log."""

from __future__ import annotations

import sys

import pytest

from integ import dataset
from integ.commands import CDK, CommandFailed, Commands, CommandTimedOut


@pytest.fixture
def commands(tmp_path, monkeypatch):
    made = Commands("integ/config.yaml", "integ", tmp_path / "logs")
    ran = []
    monkeypatch.setattr(made, "run", lambda name, argv, timeout_s: ran.append((name, argv)) or '{"status": "ok"}')
    made.ran = ran
    return made


def test_deploy_and_destroy_run_the_cdk_cli_with_make_deploys_context(commands):
    commands.deploy(["Storage", "Training"], 60)
    commands.deploy(["*"], 60)
    commands.destroy(60)

    context = ["-c", "config=integ/config.yaml", "-c", "stage=integ"]
    assert [argv for _, argv in commands.ran] == [
        [str(CDK), "deploy", "integ/Storage", "integ/Training", *context, "--require-approval", "never"],
        [str(CDK), "deploy", "integ/*", *context, "--require-approval", "never"],
        [str(CDK), "destroy", "integ/*", *context, "--force"],
    ]


def test_llmp_runs_with_the_stage_and_json_and_returns_its_document(commands):
    assert commands.llmp(["approve", "1", "-m", "ok"], 60) == {"status": "ok"}
    [(_, argv)] = commands.ran
    assert argv == [
        sys.executable,
        "-m",
        "cli",
        "approve",
        "1",
        "-m",
        "ok",
        "--config",
        "integ/config.yaml",
        "--stage",
        "integ",
        "--json",
    ]


def test_a_command_past_its_timeout_is_stopped(tmp_path):
    commands = Commands("integ/config.yaml", "integ", tmp_path)
    with pytest.raises(CommandTimedOut, match="ran past 1 s"):
        commands.run("sleepy", [sys.executable, "-c", "import time; time.sleep(60)"], 1)


def test_a_failing_command_says_its_status_and_the_end_of_its_log(tmp_path):
    commands = Commands("integ/config.yaml", "integ", tmp_path)
    script = "import sys; print('llmp: stage integ is not deployed', file=sys.stderr); sys.exit(3)"
    with pytest.raises(CommandFailed, match="exited 3") as failure:
        commands.run("failing", [sys.executable, "-c", script], 30)
    assert "stage integ is not deployed" in str(failure.value)
    assert (tmp_path / "failing.log").is_file()


def test_the_dataset_fills_both_splits_and_is_the_same_every_time(tmp_path):
    first = dataset.documents()
    assert first == dataset.documents()
    # At least ~1.3 tokens per word for this text: every document alone is more than one 256-token block.
    assert min(len(text.split()) for text in first) > 256
    assert int(len(first) * 0.05) >= 1  # the prepare step's validation split gets a whole document
    lines = dataset.write(tmp_path / "d.jsonl").read_text().splitlines()
    assert len(lines) == dataset.DOCUMENTS
