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


def test_default_stage_is_the_first_that_keeps_its_data_and_is_rehearsed_as_configured(tmp_path):
    choice = choose_stage(CONFIG, None, overlays=None, work_dir=tmp_path)
    assert choice.name == "staging"
    assert "first stage in promotion order that keeps its data (removal_policy: retain)" in choice.why
    assert choice.overlay_changes == []  # the emulator takes ml.g5.2xlarge, as SageMaker does
    assert choice.overlays == (str(tmp_path / "moto-overlay.yaml"),)  # generated for this config and stage
    assert choice.rehearsed.serving.instance_type == choice.real.serving.instance_type == "ml.g5.2xlarge"


def test_an_overlay_given_is_used_instead_of_a_generated_one(tmp_path):
    changing = tmp_path / "overlay.yaml"
    changing.write_text("stages:\n  prod:\n    serving: {max_batch_size: 2}\n")
    choice = choose_stage(CONFIG, "prod", overlays=(str(changing),), work_dir=tmp_path)
    assert choice.overlays == (str(changing),) and choice.generated is None
    assert choice.overlay_changes == ["serving.max_batch_size 4 -> 2"]
    assert list(tmp_path.iterdir()) == [changing]
    assert choose_stage(CONFIG, "prod", overlays=(OVERLAY,), work_dir=tmp_path).overlay_changes == []


def test_an_overlay_the_config_checks_refuse_is_refused_before_anything_starts(tmp_path, capsys):
    bad = tmp_path / "overlay.yaml"
    bad.write_text("stages:\n  staging:\n    serving: {instance_type: ml.g4dn.xlarge}\n")
    assert rehearse.main(["--config", CONFIG, "--overlay", str(bad)]) == 2
    assert "gpt-j-6b fp16 with tensor_parallel_degree 1 does not fit ml.g4dn.xlarge" in capsys.readouterr().err


def test_a_config_whose_every_stage_deletes_its_data_rehearses_the_first_against_that_promise(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("stages:\n  dev: {region: us-east-1, removal_policy: destroy}\n")
    choice = choose_stage(str(config), None, overlays=None, work_dir=tmp_path)
    assert choice.name == "dev" and choice.real.removal_policy == "destroy"
    assert "deletes its data with the stack (removal_policy: destroy) and dev is the first" in choice.why
    assert "its buckets and log groups must be gone and its keys pending deletion" in choice.why


def test_a_stage_whose_data_is_deleted_with_its_stack_can_be_asked_for(tmp_path):
    choice = choose_stage(CONFIG, "dev", overlays=(OVERLAY,), work_dir=tmp_path)
    assert choice.name == "dev" and choice.why == "dev was asked for (removal_policy: destroy)"


def test_a_model_no_accepted_instance_type_holds_cannot_be_rehearsed_and_says_why_per_candidate(monkeypatch, capsys):
    from rehearsal import overlay
    from tests.rehearsal.test_overlay import MOTOS_OWN_LIST

    monkeypatch.setattr(overlay, "emulator_endpoint_instance_types", lambda: MOTOS_OWN_LIST)
    assert rehearse.main(["--config", str(REPO / "config/examples/opt-30b-g5.yaml")]) == 3
    error = capsys.readouterr().err
    assert "no instance type the emulator accepts for an endpoint passes the config's checks for stage prod" in error
    assert "  - ml.g4dn.12xlarge: stages.prod.serving: opt-30b fp16 with tensor_parallel_degree 4 does not fit" in error


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
    report.add(Check("data as the removal policy promises", False, "retain: s3://data/raw/x: NoSuchKey"))
    assert report.exit_status == 1
    assert report.summary().startswith("Result: 2 checks, 1 passed, 1 failed (")
    assert report.summary().endswith("): data as the removal policy promises")


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


def test_an_answer_nothing_expected_is_a_failed_step_not_a_traceback(monkeypatch, capsys, tmp_path):
    from botocore.parsers import ResponseParserError

    def moto_answers_html(args, work_dir, report):
        raise ResponseParserError("Unable to parse response, invalid XML received: b'<!doctype html>...'")

    monkeypatch.setattr(rehearse, "rehearse", moto_answers_html)
    monkeypatch.setattr(rehearse.tempfile, "mkdtemp", lambda prefix: str(tmp_path))  # the kept work directory
    assert rehearse.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL  rehearsal: stopped by ResponseParserError: Unable to parse response" in out
    assert f"Kept the work directory for inspection: {tmp_path}" in out
