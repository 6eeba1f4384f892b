"""`python -m integ.run` (make integ): the dry run prints the plan, the estimate and the steps with no credentials and
no AWS call; a real run asks first, refuses without --yes off a terminal, and refuses an estimate above the ceiling."""

from __future__ import annotations

from pathlib import Path

import botocore.client
import pytest

from core.config import load_config
from generators import plan as planning
from integ import run as runner
from integ.steps import steps_for

HERE = Path(__file__).parent
EXPECTED = HERE / "dry_run.txt"  # the rates, the steps table, the estimate and the limits, exactly


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """No credentials anywhere, and any AWS call fails the test."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    calls: list[str] = []

    def refuse(self, operation, params):
        calls.append(operation)
        raise AssertionError(f"the dry run called AWS: {operation}")

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", refuse)
    return calls


def test_dry_run_prints_plan_steps_estimate_and_limits_without_aws(no_aws, capsys):
    assert runner.main(["--dry-run"]) == 0

    out = capsys.readouterr().out
    assert no_aws == []
    plan, _, rest = out.partition("\nRates while steps run")
    config = load_config(runner.REPO / "integ" / "config.yaml")
    stage = config.stages["integ"]
    expected_plan = [
        planning.describe_stage("integ", stage),
        *planning.describe_training(stage.training),
        *planning.describe_serving(stage.serving),
    ]
    assert plan.splitlines()[2:] == expected_plan
    assert "Rates while steps run" + rest == EXPECTED.read_text()


def test_dry_run_lists_every_step_in_order_with_teardown_last(no_aws, capsys):
    runner.main(["--dry-run"])
    out = capsys.readouterr().out
    stage = load_config(runner.REPO / "integ" / "config.yaml").stages["integ"]
    names = [step.name for step in steps_for(stage)] + ["teardown"]
    rows = [line.split()[1] for line in out.splitlines() if line[:2].strip().isdigit()]
    assert rows == names
    assert names[-2] == "cold-start"  # the integ stage scales to zero


def test_the_estimate_is_the_plans_rates_times_the_expected_minutes(capsys):
    text, _, cost = runner.preview("integ/config.yaml", None, 15, 300)
    stage = load_config(runner.REPO / "integ" / "config.yaml").stages["integ"]
    fine_tune = next(s for s in steps_for(stage) if s.name == "fine-tune")
    assert f"{stage.training.catalog_instance.hourly_usd * fine_tune.expected_minutes / 60:8.2f}" in text
    assert f"estimated cost: ${cost.expected_usd:,.2f}" in text
    assert cost.expected_usd < cost.worst_usd


def test_a_real_run_off_a_terminal_without_yes_is_refused_before_anything_is_deployed(monkeypatch, capsys):
    monkeypatch.setattr(runner.IntegAws, "caller_account", lambda self: "123456789012")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    started = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: started.append(a))

    assert runner.main([]) == 2

    assert started == []
    assert "no --yes" in capsys.readouterr().err


def test_a_person_who_does_not_answer_yes_deploys_nothing(monkeypatch):
    monkeypatch.setattr(runner.IntegAws, "caller_account", lambda self: "123456789012")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda question: "n")
    started = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: started.append(a))

    assert runner.main([]) == 2
    assert started == []


def test_an_estimate_above_the_ceiling_is_refused_before_any_aws_call(no_aws, capsys):
    assert runner.main(["--max-usd", "1", "--yes"]) == 2
    assert no_aws == []
    assert "above --max-usd 1" in capsys.readouterr().err


def test_a_real_run_without_credentials_says_how_to_get_them_and_deploys_nothing(monkeypatch, tmp_path, capsys):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr("botocore.credentials.ContainerProvider.load", lambda self: None)
    started = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: started.append(a))

    assert runner.main(["--yes"]) == 2

    assert started == []
    assert "no AWS credentials found" in capsys.readouterr().err
