"""The report: each step's outcome and time, the cold start, tokens/s, the perplexity and the bill estimate, in JSON
and in markdown."""

from __future__ import annotations

import json

from integ import report as reporting
from integ.engine import PASSED, Run, StepResult
from integ.estimate import Estimate
from integ.teardown import Leftover, TeardownResult


def test_a_passing_run_reports_the_figures_it_measured(tmp_path):
    run = Run(
        [
            StepResult("package-pending", PASSED, 3.2, data={"perplexity": 6.8}),
            StepResult("invoke", PASSED, 41.0, data={"tokens_per_second": {"llmp-integ-integ-tuned": 23.5}}),
            StepResult("cold-start", PASSED, 900.0, data={"cold_start_seconds": 512, "requests": 26}),
        ],
        teardown=TeardownResult(
            actions=["cdk destroy integ/*"],
            kept_by_design=[Leftover("kept by design", "the stage key", "scheduled for deletion", "")],
        ),
        teardown_seconds=600,
        spent_usd=2.4049,
        elapsed_seconds=9000,
    )

    data = reporting.as_json(
        run,
        config="integ/config.yaml",
        stage="integ",
        account="123456789012",
        region="us-east-1",
        estimate=Estimate(2.43, 161, 7.9, 550),
        ceiling_usd=15,
        deadline_minutes=300,
    )
    folder = reporting.write(tmp_path / "r", data)

    saved = json.loads((folder / "report.json").read_text())
    assert saved["passed"] is True and saved["bill_estimate_usd"] == 2.4 and saved["elapsed_minutes"] == 150.0
    assert saved["cold_start_seconds"] == 512 and saved["perplexity"] == 6.8
    assert saved["tokens_per_second"] == {"llmp-integ-integ-tuned": 23.5}
    assert [s["name"] for s in saved["steps"]] == ["package-pending", "invoke", "cold-start"]
    text = (folder / "report.md").read_text()
    assert text.startswith("# Integration run: PASSED")
    assert "- cold start from zero: 512 s" in text
    assert "| cold-start | passed | 900 s |" in text
    assert "### Still there: remove with\n\n- nothing" in text
