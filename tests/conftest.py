"""Session-wide set-up: quiet tooling, and the CDK app synthesized once for every test that reads templates."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

# The same quiet, offline tooling settings the Makefile exports, for runs of pytest outside make: the project's
# Node.js first on PATH (jsii's runtime starts `node` from it; the machine's own may be older than jsii supports).
os.environ["PATH"] = os.pathsep.join(
    dict.fromkeys(
        [str(Path(__file__).resolve().parents[1] / "node_modules" / ".bin"), *os.environ["PATH"].split(os.pathsep)]
    )
)
os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# In-process synths skip the CDK's built-in template validation (1-2 s each); cfn-lint checks every template
# instead, and tests that run app.py in a subprocess turn it back on.
os.environ.setdefault("CDK_VALIDATION", "false")

from tests.cdk_assembly import REPO, Assembly, read_assembly, synthesize


def synthesized_once(tmp_path_factory: pytest.TempPathFactory, name: str, config: Path) -> Assembly:
    """`config` synthesized once per test run, however many pytest-xdist workers ask: the first synthesizes into a
    folder they share while holding a lock, the others read what it wrote (a synthesis costs 5-8 s)."""
    # Under xdist each worker's base temp is a folder of the run's own; without it, the base temp is the run's.
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
    outdir, error_file = shared / name, shared / f"{name}.error"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (outdir / "manifest.json").is_file():
            return read_assembly(outdir, error_file.read_text() if error_file.is_file() else None)
        assembly = synthesize(config, outdir)
        if assembly.error is not None:
            error_file.write_text(assembly.error)
        return assembly


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """The default config (dev, staging, prod), synthesized once for the whole run."""
    return synthesized_once(tmp_path_factory, "default-assembly", REPO / "config" / "default.yaml")


@pytest.fixture(scope="session")
def promotion_assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """config/examples/promotion.yaml: three accounts and the promotion pipeline, synthesized once."""
    return synthesized_once(tmp_path_factory, "promotion-assembly", REPO / "config" / "examples" / "promotion.yaml")


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
