"""The runner's promises: steps in order, each within its limit; the dollar ceiling and the deadline stop a run before
the next step; a failure, Ctrl-C or SIGTERM ends the steps; teardown runs every time, and the report says what
remains and how to remove it."""

from __future__ import annotations

import os
import signal
import time

import pytest

from integ import report as reporting
from integ.engine import FAILED, INTERRUPTED, NOT_RUN, PASSED, STOPPED, execute
from integ.estimate import Budget, Estimate
from integ.run import exit_status
from integ.steps import CPU_JOB, ENDPOINT, NOTHING, TRAINING, Step
from integ.teardown import TeardownResult, teardown
from tests.integ.conftest import COMPONENTS, NAMES, cdk_destroy, deploy

RATES = {NOTHING: 0.0, CPU_JOB: 0.5, TRAINING: 6.0, ENDPOINT: 12.0}
STEPS = (
    Step("deploy", "", 10, 30, NOTHING),
    Step("fine-tune", "", 30, 60, TRAINING),
    Step("serve", "", 10, 30, ENDPOINT),
)


class Clock:
    """Time that passes only when a step says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """Bodies that record their calls (and limits), each taking `minutes` of the fake clock."""

    def __init__(self, clock: Clock, minutes: dict[str, float] | None = None) -> None:
        self.clock, self.minutes, self.calls = clock, minutes or {}, []

    def bodies(self, **overrides):
        def body(name):
            def run(limit_s):
                self.calls.append((name, limit_s))
                self.clock.now += self.minutes.get(name, 1) * 60
                return {"ran": name}

            return run

        made = {step.name: body(step.name) for step in STEPS}
        made.update(overrides)
        return made


def finish_recording(calls: list):
    def finish(limit_s):
        calls.append(limit_s)
        return TeardownResult(actions=["cdk destroy integ/*"])

    return finish


def quiet(_line: str) -> None:
    pass


def test_every_step_runs_in_order_then_teardown():
    clock, torn = Clock(), []
    recorder = Recorder(clock)

    run = execute(STEPS, recorder.bodies(), Budget(100, 600, RATES), finish_recording(torn), clock=clock, say=quiet)

    assert [name for name, _ in recorder.calls] == ["deploy", "fine-tune", "serve"]
    assert [r.outcome for r in run.results] == [PASSED] * 3
    assert run.results[1].data == {"ran": "fine-tune"}
    assert len(torn) == 1 and run.passed and exit_status(run) == 0
    # 1 minute at $6/h, 1 at $12/h, and teardown at $12/h (the endpoint bills until it is deleted): 0 minutes here.
    assert run.spent_usd == pytest.approx(6 / 60 + 12 / 60)


def test_a_step_that_fails_ends_the_run_and_teardown_still_runs():
    clock, torn = Clock(), []
    recorder = Recorder(clock)

    def broken(limit_s):
        raise RuntimeError("the fine-tuning run failed: Train: AlgorithmError")

    run = execute(
        STEPS,
        recorder.bodies(**{"fine-tune": broken}),
        Budget(100, 600, RATES),
        finish_recording(torn),
        clock=clock,
        say=quiet,
    )

    assert [r.outcome for r in run.results] == [PASSED, FAILED, NOT_RUN]
    assert "AlgorithmError" in run.results[1].detail
    assert [name for name, _ in recorder.calls] == ["deploy"]
    assert len(torn) == 1 and not run.passed and exit_status(run) == 1


def test_the_dollar_ceiling_stops_the_run_before_the_next_step():
    clock, torn = Clock(), []
    # fine-tune takes 50 minutes at $6/h = $5.00; serve would add 10 minutes at $12/h = $2.00: $7.00 > $6.50.
    recorder = Recorder(clock, {"deploy": 1, "fine-tune": 50})

    run = execute(STEPS, recorder.bodies(), Budget(6.5, 600, RATES), finish_recording(torn), clock=clock, say=quiet)

    assert [r.outcome for r in run.results] == [PASSED, PASSED, STOPPED]
    assert "dollar ceiling" in run.results[2].detail and "$5.00 spent" in run.results[2].detail
    assert [name for name, _ in recorder.calls] == ["deploy", "fine-tune"]
    assert len(torn) == 1 and exit_status(run) == 3


def test_the_deadline_stops_the_run_before_a_step_that_would_pass_it():
    clock, torn = Clock(), []
    # 100 min elapsed + serve's expected 10 + teardown's expected 20 = 130 > 120.
    recorder = Recorder(clock, {"deploy": 40, "fine-tune": 60})

    run = execute(STEPS, recorder.bodies(), Budget(100, 120, RATES), finish_recording(torn), clock=clock, say=quiet)

    assert [r.outcome for r in run.results] == [PASSED, PASSED, STOPPED]
    assert "deadline: 100 min elapsed" in run.results[2].detail
    assert "serve" not in [name for name, _ in recorder.calls]
    assert len(torn) == 1


def test_each_step_is_given_its_timeout_cut_to_leave_teardown_time_before_the_deadline():
    clock = Clock()
    recorder = Recorder(clock, {"deploy": 40})

    execute(STEPS, recorder.bodies(), Budget(100, 130, RATES), finish_recording([]), clock=clock, say=quiet)

    limits = dict(recorder.calls)
    assert limits["deploy"] == 30 * 60  # its own timeout
    # fine-tune: (130 - 20 of teardown) - 40 elapsed = 70 min left, above its own 60.
    assert limits["fine-tune"] == 60 * 60
    tight = Recorder(Clock(), {"deploy": 75})
    execute(STEPS, tight.bodies(), Budget(100, 130, RATES), finish_recording([]), clock=tight.clock, say=quiet)
    # fine-tune after 75 min: 75 + 30 expected + 20 teardown fits 130, but only (130 - 20) - 75 = 35 min are left.
    assert dict(tight.calls)["fine-tune"] == 35 * 60


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_step_stops_it_and_teardown_runs(signum):
    clock, torn = Clock(), []
    recorder = Recorder(clock)

    def interrupted(limit_s):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("the signal did not stop the step")

    run = execute(
        STEPS,
        recorder.bodies(**{"fine-tune": interrupted}),
        Budget(100, 600, RATES),
        finish_recording(torn),
        clock=clock,
        say=quiet,
    )

    assert [r.outcome for r in run.results] == [PASSED, INTERRUPTED, NOT_RUN]
    assert signal.Signals(signum).name in run.results[1].detail
    assert len(torn) == 1 and exit_status(run) == 130
    # The handlers are the caller's again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_keyboard_interrupt_raised_in_a_step_is_an_interruption_too():
    torn = []

    def ctrl_c(limit_s):
        raise KeyboardInterrupt

    run = execute(
        STEPS, Recorder(Clock()).bodies(deploy=ctrl_c), Budget(100, 600, RATES), finish_recording(torn), say=quiet
    )

    assert run.results[0].outcome == INTERRUPTED and len(torn) == 1


def test_a_second_ctrl_c_during_teardown_does_not_stop_it():
    said, finished = [], []

    def finish(limit_s):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        finished.append(True)
        return TeardownResult()

    def ctrl_c(limit_s):
        raise KeyboardInterrupt

    run = execute(STEPS, Recorder(Clock()).bodies(deploy=ctrl_c), Budget(100, 600, RATES), finish, say=said.append)

    assert finished == [True] and run.teardown is not None
    assert any("teardown goes on" in line for line in said)


def test_a_failure_halfway_tears_down_on_moto_and_the_report_lists_what_remains(aws, tmp_path):
    """The whole path on moto: a deploy, a failing step, teardown, the report with the commands."""
    clock = Clock()

    def deployed(limit_s):
        deploy(aws)
        return {}

    def fails(limit_s):
        raise RuntimeError("llmp finetune exited 1")

    run = execute(
        STEPS,
        Recorder(clock).bodies(deploy=deployed, **{"fine-tune": fails}),
        Budget(100, 600, RATES),
        lambda limit: teardown(aws, cdk_destroy(aws), NAMES, COMPONENTS, timeout_s=limit, poll_s=0),
        clock=clock,
        say=quiet,
    )

    assert [r.outcome for r in run.results] == [PASSED, FAILED, NOT_RUN]
    assert aws.stack_status(NAMES.stack("serving")) is None
    assert aws.package_arns(NAMES.pipelines.model_package_group) == []
    data = reporting.as_json(
        run,
        config="integ/config.yaml",
        stage="integ",
        account="123456789012",
        region="us-east-1",
        estimate=Estimate(2.0, 160, 7.5, 550),
        ceiling_usd=15,
        deadline_minutes=300,
    )
    folder = reporting.write(tmp_path / "report", data)
    text = (folder / "report.md").read_text()
    assert text.startswith("# Integration run: FAILED (fine-tune failed)")
    assert "| fine-tune | failed |" in text and "| serve | not run |" in text
    assert "bucket integ-data (retained): `python -c" in text
    assert f"`aws logs delete-log-group --log-group-name /aws/sagemaker/Endpoints/{NAMES.endpoint}" in text
    assert (folder / "report.json").is_file()
    assert exit_status(run) == 1


def test_teardown_only_runs_no_step_and_takes_down_what_an_earlier_run_left(aws):
    deploy(aws)

    run = execute(
        (),
        {},
        Budget(100, 600, RATES),
        lambda limit: teardown(aws, cdk_destroy(aws), NAMES, COMPONENTS, timeout_s=limit, poll_s=0),
        say=quiet,
    )

    assert run.results == [] and run.teardown.problems == []
    assert aws.stack_status(NAMES.stack("storage")) is None
