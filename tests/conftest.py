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
