"""Which stage is rehearsed and why, what is refused before anything starts, and the exit status."""

from __future__ import annotations

from pathlib import Path

from rehearsal import rehearse
from rehearsal.cdk_cli import CliRun
from rehearsal.findings import Check, Gap
from rehearsal.rehearse import Report, choose_stage, cli_step, run_check

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "config" / "default.yaml")
OVERLAY = str(REPO / "config" / "overlays" / "moto-rehearsal.yaml")


def test_default_stage_is_the_first_that_keeps_its_data_and_the_overlay_changes_only_what_moto_rejects():
    choice = choose_stage(CONFIG, (OVERLAY,), None)
    assert choice.name == "staging"
    assert "first stage in promotion order that keeps its data (removal_policy: retain)" in choice.why
    assert choice.overlay_changes == [
        "serving.instance_type ml.g5.2xlarge -> ml.g4dn.xlarge",
        "serving.max_batch_size 4 -> 1",
    ]
    assert choice.real.serving.instance_type == "ml.g5.2xlarge"  # what the overlay hides from moto


def test_refuses_a_stage_whose_data_is_deleted_with_its_stack(capsys):
    assert rehearse.main(["--config", CONFIG, "--overlay", OVERLAY, "--stage", "dev"]) == 2
    error = capsys.readouterr().err
    assert "stage dev deletes its data with the stack (removal_policy: destroy" in error
    assert "choose a stage with removal_policy retain: staging, prod" in error


def test_refuses_an_unknown_stage(capsys):
    assert rehearse.main(["--config", CONFIG, "--overlay", OVERLAY, "--stage", "qa"]) == 2
    assert "no stage named 'qa'; stages: dev, staging, prod" in capsys.readouterr().err


def test_an_invalid_config_is_refused_with_its_file_and_field(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("stages:\n  staging: {region: us-east-1, removal_policy: keep}\n")
    assert rehearse.main(["--config", str(config), "--overlay", ""]) == 2
    error = capsys.readouterr().err
    assert f"{config}: invalid configuration" in error and "stages.staging.removal_policy" in error


def test_exit_status_is_zero_only_when_checks_ran_and_all_passed():
    report = Report()
    assert report.exit_status == 1  # nothing checked proves nothing
    report.add([Check("stacks created", True, "3 stacks"), Gap("bucket policies", "moto skips them")])
    assert report.exit_status == 0
    report.add(Check("retained data survives", False, "s3://data/raw/x: NoSuchKey"))
    assert report.exit_status == 1
    assert report.summary().startswith("Result: 2 checks, 1 passed, 1 failed (")
    assert report.summary().endswith("): retained data survives")


def test_a_failed_cli_step_is_a_failed_check_with_the_end_of_its_output(capsys):
    report = Report()
    run = CliRun(("deploy", "staging/*"), 1, "publishing...\n❌ llm-platform-staging-serving failed\n", 4.2)
    assert not cli_step(report, "deploy: cdk deploy 'staging/*'", run)
    [check] = report.checks
    assert check.name == "deploy" and not check.passed
    assert check.detail.startswith("cdk deploy staging/* exited 1:\n")
    assert check.detail.endswith("❌ llm-platform-staging-serving failed")
    assert "FAIL  deploy: cdk deploy staging/* exited 1" in capsys.readouterr().out


def test_a_check_that_raises_is_a_failed_check():
    report = Report()

    def broken(_):
        raise KeyError("Outputs")

    run_check(report, "stacks created", broken, None)
    assert report.checks == [Check("stacks created", False, "the check itself failed: KeyError: 'Outputs'")]
    assert report.failed
