"""The run's report, in integ/reports/<UTC timestamp>/ (git-ignored): report.json for machines, report.md for
people, and the commands' logs beside them. Written after teardown, whatever happened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from integ.engine import Run
from integ.estimate import Estimate


def as_json(
    run: Run,
    *,
    config: str,
    stage: str,
    account: str,
    region: str,
    estimate: Estimate,
    ceiling_usd: float,
    deadline_minutes: float,
) -> dict[str, Any]:
    data = {name: result.data for name, result in ((r.name, r) for r in run.results)}
    return {
        "config": config,
        "stage": stage,
        "account": account,
        "region": region,
        "passed": run.passed,
        "stopped": run.stopped,
        "elapsed_minutes": round(run.elapsed_seconds / 60, 1),
        "bill_estimate_usd": round(run.spent_usd, 2),
        "estimate": {"expected_usd": round(estimate.expected_usd, 2), "expected_minutes": estimate.expected_minutes},
        "limits": {"max_usd": ceiling_usd, "deadline_minutes": deadline_minutes},
        "cold_start_seconds": data.get("cold-start", {}).get("cold_start_seconds"),
        "tokens_per_second": data.get("invoke", {}).get("tokens_per_second"),
        "perplexity": data.get("package-pending", {}).get("perplexity"),
        "steps": [
            {"name": r.name, "outcome": r.outcome, "seconds": round(r.seconds, 1), "detail": r.detail, "data": r.data}
            for r in run.results
        ],
        "teardown": {"seconds": round(run.teardown_seconds, 1), **(run.teardown.as_json() if run.teardown else {})},
    }


def markdown(report: dict[str, Any]) -> str:
    verdict = "PASSED" if report["passed"] else f"FAILED ({report['stopped'] or 'teardown left something'})"
    lines = [
        f"# Integration run: {verdict}",
        "",
        f"{report['config']}, stage {report['stage']}, account {report['account']}, {report['region']}: "
        f"{report['elapsed_minutes']} min, about ${report['bill_estimate_usd']:,.2f} (the plan's $/h x each step's "
        f"time; expected ${report['estimate']['expected_usd']:,.2f}, ceiling ${report['limits']['max_usd']:,.2f})",
        "",
        f"- cold start from zero: {_or_dash(report['cold_start_seconds'], ' s')}",
        f"- tokens/s (one 64-token greedy request, end to end): {_or_dash(report['tokens_per_second'])}",
        f"- perplexity of the registered version: {_or_dash(report['perplexity'])}",
        "",
        "| step | outcome | time | detail |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {s['name']} | {s['outcome']} | {s['seconds']:.0f} s | {s['detail'].replace('|', '/')[:300]} |"
        for s in report["steps"]
    ]
    teardown = report["teardown"]
    lines += ["", f"## Teardown ({teardown['seconds']:.0f} s)", ""]
    lines += [f"- {action}" for action in teardown.get("actions", [])]
    lines += [f"- PROBLEM: {problem}" for problem in teardown.get("problems", [])]
    lines += ["", "### Still there: remove with", ""]
    lines += [f"- {x['kind']} {x['name']} ({x['why']}): `{x['command']}`" for x in teardown.get("leftovers", [])] or [
        "- nothing"
    ]
    lines += ["", "### Kept by design", ""]
    lines += [
        f"- {x['name']} {x['why']}".rstrip() + (f": `{x['command']}`" if x["command"] else "")
        for x in teardown.get("kept_by_design", [])
    ]
    return "\n".join(lines) + "\n"


def _or_dash(value: Any, unit: str = "") -> str:
    if value is None or value == {}:
        return "-"
    return f"{value}{unit}"


def write(folder: Path, report: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (folder / "report.md").write_text(markdown(report))
    return folder
