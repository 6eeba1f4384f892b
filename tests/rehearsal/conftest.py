"""Shared by the rehearsal's unit tests: AWS clients against moto in-process."""

from __future__ import annotations

import pytest
from moto import mock_aws

from rehearsal.deployment import Aws


@pytest.fixture
def aws():
    """Clients for us-east-1, every call answered by moto in this process (it intercepts the default endpoints)."""
    with mock_aws():
        yield Aws(None, "us-east-1")
