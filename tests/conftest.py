"""Session-wide set-up: quiet tooling, and the CDK app synthesized once for every test that reads templates."""

from __future__ import annotations

import os

import pytest

# The same quiet, offline tooling settings the Makefile exports, for runs of pytest outside make.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# In-process synths skip the CDK's built-in template validation (1-2 s each); cfn-lint checks every template
# instead, and tests that run app.py in a subprocess turn it back on.
os.environ.setdefault("CDK_VALIDATION", "false")

from tests.cdk_assembly import REPO, Assembly, synthesize


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """The default config (dev, staging, prod), synthesized once for the whole session."""
    return synthesize(REPO / "config" / "default.yaml", tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def promotion_assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """config/examples/promotion.yaml: three accounts and the promotion pipeline, synthesized once."""
    return synthesize(REPO / "config" / "examples" / "promotion.yaml", tmp_path_factory.mktemp("promotion"))


# --- the bad-input suite: counted, and the counts printed at the end of every run ---------------------------------

BAD_INPUT_KINDS = {
    "config": "invalid configs rejected at synth with the field named",
    "request": "malformed requests answered 4xx with the worker still serving",
    "s3_fault": "S3 faults injected into the artifact handler, nothing half-written",
    "kill": "training runs killed mid-run and resumed to identical weights",
}
_bad_input_passed: dict[str, int] = dict.fromkeys(BAD_INPUT_KINDS, 0)


def pytest_collection_modifyitems(items):
    # The kind travels with the test's report (user_properties), so the count also works when pytest-xdist runs
    # the tests in worker processes and only the reports come back.
    for item in items:
        marker = item.get_closest_marker("bad_input")
        if marker:
            kind = marker.args[0]
            assert kind in BAD_INPUT_KINDS, f"{item.nodeid}: unknown bad_input kind {kind!r}"
            item.user_properties.append(("bad_input", kind))


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        for name, kind in report.user_properties:
            if name == "bad_input":
                _bad_input_passed[kind] += 1


def pytest_terminal_summary(terminalreporter):
    terminalreporter.section("bad-input suite")
    for kind, description in BAD_INPUT_KINDS.items():
        terminalreporter.write_line(f"{_bad_input_passed[kind]:>4} {description}")
