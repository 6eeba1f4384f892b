"""The CDK's template validation through the synth cache (infrastructure/template_validation.py): the report is the one the
CDK's own plugin writes, whether the engine ran (a miss) or the report came from the cache (a hit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.cdk_assembly import REPO, cdk_context

# Three stages not in alphabetical order and a stack of the app's own, each with a resource CloudFormation refuses
# (51 tags: rule F3032), so that the report lists violations from several templates, in the CDK's order.
SYNTHESIZE_THREE_WAYS = """
import json, os, sys
sys.path.insert(0, {repo!r})
import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from core import synth_cache
from infrastructure import template_validation

def build(app):
    tags = [cdk.CfnTag(key=f"k{{i}}", value="v") for i in range(51)]
    for stage in ("dev", "prod", "beta"):
        cloudwatch.CfnDashboard(cdk.Stack(cdk.Stage(app, stage), "Tiny"), "Board", dashboard_body="{{}}", tags=tags)
    cloudwatch.CfnDashboard(cdk.Stack(app, "Top"), "Board", dashboard_body="{{}}", tags=tags)

reports = {{}}
for way in sys.argv[3].split(","):
    outdir = os.path.join(sys.argv[1], way)
    props = dict(context=json.loads(sys.argv[2]), outdir=outdir)
    app = cdk.App(**props) if way == "built-in" else template_validation.new_app(**props)
    build(app)
    if way != "built-in":
        template_validation.install(app)
    try:
        app.synth()
    except RuntimeError:  # the report has errors; it is written first
        pass
    report = os.path.join(outdir, "validation-report.json")  # written only when a plugin ran
    reports[way] = open(report).read() if os.path.exists(report) else None
print(json.dumps({{"reports": reports, "counts": [dict(synth_cache.counts.hits), dict(synth_cache.counts.misses)]}}))
"""


def run_script(tmp_path, ways: str = "built-in,miss,hit", **env: str) -> dict:
    script = tmp_path / "three_ways.py"
    script.write_text(textwrap.dedent(SYNTHESIZE_THREE_WAYS.format(repo=str(REPO))))
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("CDK_VALIDATION", "PYTEST_CURRENT_TEST")},
        "SYNTH_CACHE_DIR": str(tmp_path / "cache"),
        **env,
    }
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), json.dumps(cdk_context()), ways],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_cached_report_is_the_one_the_cdks_own_validation_writes(tmp_path):
    found = run_script(tmp_path)
    reports = found["reports"]
    assert reports["miss"] == reports["built-in"]  # the engine's report, passed on unchanged
    assert reports["hit"] == reports["built-in"]  # and read back from the cache byte for byte
    hits, misses = found["counts"]
    assert (hits.get("engine_report"), misses.get("engine_report")) == (1, 1)
    # It has something to compare: one violation in each of the four templates, the stages in the CDK's order.
    (plugin,) = json.loads(reports["built-in"])["pluginReports"]
    assert plugin["pluginName"] == "CloudFormation Validate" and plugin["conclusion"] == "failure"
    paths = [c["constructPath"] for v in plugin["violations"] for c in v["violatingConstructs"]]
    assert paths == ["dev/Tiny/Board", "prod/Tiny/Board", "beta/Tiny/Board", "Top/Board"]


def test_turning_validation_off_turns_the_cached_one_off_too(tmp_path):
    # `cdk synth --no-validation` passes CDK_VALIDATION=false to the app: no plugin runs, none is cached.
    found = run_script(tmp_path, "miss", CDK_VALIDATION="false")
    assert found["reports"] == {"miss": None}
    hits, misses = found["counts"]
    assert "engine_report" not in hits and "engine_report" not in misses
