"""Every file in config/examples/ through the whole deploy rehearsal (`make rehearse-examples`; about a minute per
example that deploys, on 2 cores). Marked rehearse_examples, which `make test` leaves out (pyproject.toml addopts):
run it with `make rehearse-examples`, which prints the table of outcomes."""

from __future__ import annotations

import pytest

from rehearsal import examples
from tests.rehearsal.example_outcomes import REHEARSED_STAGE, UNREHEARSABLE

pytestmark = pytest.mark.rehearse_examples


@pytest.mark.parametrize("config", examples.EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_the_rehearsal_or_gives_its_documented_reason(config, request):
    outcome = examples.rehearse_example(config)
    # The table at the end of the run (tests/rehearsal/conftest.py) reads it from here, also from an xdist worker.
    request.node.user_properties.append(
        ("rehearsal_outcome", (outcome.example, outcome.result, outcome.detail, outcome.seconds))
    )
    documented = UNREHEARSABLE.get(config.name)
    if documented is None:
        assert outcome.result == "PASS", outcome.output
        # Deployed as configured, and held after destroy to its stage's own removal policy.
        stage, removal_policy = REHEARSED_STAGE[config.name]
        assert outcome.detail.startswith(f"stage {stage}: "), outcome.output
        assert "overlay, for this rehearsal only: no changes" in outcome.output
        assert f"PASS  removal policy kept: {removal_policy}: " in outcome.output
    else:
        assert outcome.result == "SKIP", outcome.output
        assert documented.reason in outcome.detail, outcome.output
        for detail in documented.details:
            assert detail in outcome.output, detail
