"""Run the steps in order, each within its limit, and tear down whatever happens.

Before each step the budget is checked (integ/estimate.py): a step that the dollar ceiling or the deadline would not
cover is not started. A step that raises is a failure and the steps after it do not run. Ctrl-C (SIGINT) or SIGTERM
stops the step under way. In every case teardown runs next; a second signal during teardown is noted and ignored,
so the stage is never left half-deleted by an impatient key press.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from integ import steps as step_kinds
from integ.estimate import Budget, LimitReached
from integ.steps import Step
from integ.teardown import TeardownResult

PASSED, FAILED, STOPPED, INTERRUPTED, NOT_RUN = "passed", "failed", "stopped by a limit", "interrupted", "not run"
Body = Callable[[float], "dict[str, Any] | None"]


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while a step ran (a BaseException, like KeyboardInterrupt: no step swallows it)."""


@dataclass
class StepResult:
    name: str
    outcome: str = NOT_RUN
    seconds: float = 0.0
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    results: list[StepResult]
    teardown: TeardownResult | None = None
    teardown_seconds: float = 0.0
    stopped: str = ""  # why the run ended early: a limit, a failure, a signal; "" when every step passed
    spent_usd: float = 0.0
    elapsed_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        clean = self.teardown is not None and not self.teardown.problems and not self.teardown.leftovers
        return not self.stopped and all(r.outcome == PASSED for r in self.results) and clean


def execute(
    steps: tuple[Step, ...],
    bodies: dict[str, Body],
    budget: Budget,
    finish: Callable[[float], TeardownResult],
    *,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = print,
) -> Run:
    """Run `steps` with `bodies` (each takes its time limit in seconds and returns what the report records), then
    `finish` (teardown, given its time limit), whatever happened."""
    run = Run([StepResult(s.name) for s in steps])
    start = clock()
    begun: list[Step] = []  # kept here: a signal between two steps must not lose which steps began
    previous = _install(_raise_interrupted)
    try:
        _run_steps(steps, bodies, budget, run, begun, start=start, clock=clock, say=say)
    except (Interrupted, KeyboardInterrupt) as signal_:  # between two steps
        run.stopped = f"{_signal_name(signal_)} between steps"
    finally:
        _install(_note_and_go_on(say))
        try:
            endpoint_billed = any(step.bills == step_kinds.ENDPOINT for step in begun)
            _teardown(run, finish, budget, endpoint_billed=endpoint_billed, clock=clock, say=say)
        finally:
            _install(previous)
    run.spent_usd, run.elapsed_seconds = budget.spent_usd, clock() - start
    return run


def _run_steps(
    steps: tuple[Step, ...],
    bodies: dict[str, Body],
    budget: Budget,
    run: Run,
    begun: list[Step],
    *,
    start: float,
    clock: Callable[[], float],
    say: Callable[[str], None],
) -> None:
    """Each step in turn, appended to `begun` as it starts, until one does not pass or the budget would not cover
    the next."""
    for step, result in zip(steps, run.results, strict=True):
        try:
            budget.check_before(step, clock() - start)
        except LimitReached as limit:
            result.outcome, result.detail, run.stopped = STOPPED, str(limit), str(limit)
            say(f"STOP {step.name}: {limit}")
            break
        say(f"---- {step.name}: {step.what}")
        begun.append(step)
        _run_step(step, bodies, budget, run, result, start=start, clock=clock)
        say(
            f"{'ok  ' if result.outcome == PASSED else 'FAIL'} {step.name} ({result.seconds:.0f} s)"
            + (f": {result.detail}" if result.detail else "")
        )
        if result.outcome != PASSED:
            break


def _run_step(
    step: Step,
    bodies: dict[str, Body],
    budget: Budget,
    run: Run,
    result: StepResult,
    *,
    start: float,
    clock: Callable[[], float],
) -> None:
    """One step's body within its limit, its outcome and time into `result`, its cost charged whatever happened."""
    began = clock()
    try:
        result.data = bodies[step.name](budget.step_limit_seconds(step, began - start)) or {}
        result.outcome = PASSED
    except (Interrupted, KeyboardInterrupt) as signal_:
        result.outcome, result.detail = INTERRUPTED, _signal_name(signal_)
        run.stopped = f"{result.detail} during {step.name}"
    except Exception as error:  # a failed step is reported, and teardown still runs
        result.outcome, result.detail = FAILED, f"{type(error).__name__}: {error}"
        run.stopped = f"{step.name} failed"
    finally:
        result.seconds = clock() - began
        budget.charge(step, result.seconds)


def _teardown(
    run: Run,
    finish: Callable[[float], TeardownResult],
    budget: Budget,
    *,
    endpoint_billed: bool,
    clock: Callable[[], float],
    say: Callable[[str], None],
) -> None:
    """`finish` within the teardown's limit, its result and time into `run`; charged (at its endpoint rate) only once
    a step that bills an endpoint has begun."""
    say("---- teardown: always")
    began = clock()
    limit = step_kinds.TEARDOWN.timeout_minutes * 60
    try:
        run.teardown = finish(limit)
    except Exception as error:  # reported as the teardown's own problem
        run.teardown = TeardownResult(problems=[f"teardown: {type(error).__name__}: {error}"])
    run.teardown_seconds = clock() - began
    if endpoint_billed:
        budget.charge(step_kinds.TEARDOWN, run.teardown_seconds)


def _signal_name(error: BaseException) -> str:
    return str(error) if isinstance(error, Interrupted) and str(error) else "SIGINT (Ctrl-C)"


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name + (" (Ctrl-C)" if signum == signal.SIGINT else ""))


def _note_and_go_on(say: Callable[[str], None]) -> Callable[[int, Any], None]:
    def handler(signum: int, frame: Any) -> None:
        say(f"{signal.Signals(signum).name}: teardown goes on (it leaves nothing running when it ends)")

    return handler


def _install(handler: Any) -> Any:
    """Set the SIGINT and SIGTERM handlers (the main thread only can); the previous ones, to restore."""
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        # ValueError: not the main thread; KeyError: nothing to restore for this signal.
        with contextlib.suppress(ValueError, TypeError, KeyError):
            previous[signum] = signal.signal(signum, handler if callable(handler) else handler[signum])
    return previous
