"""Shared by the rehearsal's unit tests: AWS clients against moto in-process."""

from __future__ import annotations

import pytest
from moto import mock_aws

from rehearsal.deployment import Aws
from rehearsal.examples import Outcome, table


@pytest.fixture
def aws():
    """Clients for us-east-1, every call answered by moto in this process (it intercepts the default endpoints)."""
    with mock_aws():
        yield Aws(None, "us-east-1")


# --- `make rehearse-examples`: the table of outcomes, after the run ------------------------------------------------

_outcomes: list[tuple[str, str, str, float]] = []  # (example, result, detail, seconds), as the tests recorded them


def pytest_runtest_logreport(report):
    if report.when == "call":
        _outcomes.extend(value for name, value in report.user_properties if name == "rehearsal_outcome")


def pytest_terminal_summary(terminalreporter):
    if _outcomes:
        outcomes = [Outcome(*fields, output="") for fields in sorted(_outcomes)]
        terminalreporter.section("deploy rehearsal of every example")
        terminalreporter.write_line(table(outcomes))
