"""cfn-lint over every synthesized template: no errors, and no warnings beyond those listed in .cfnlintrc.yaml, each
for the reason given there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.cdk_assembly import REPO

# W3005 ("DependsOn already enforced by a GetAtt") is ignored because aws-cdk-lib writes these DependsOn:
# lambda.Function and CustomResourceProvider on their roles, CDK Pipelines' CodePipeline on its role.
CDK_GENERATED_DEPENDS_ON = {"AWS::Lambda::Function", "AWS::CodePipeline::Pipeline", "AWS::StepFunctions::StateMachine"}


def test_every_template_passes_cfn_lint(assembly, promotion_assembly, tmp_path):
    # One cfn-lint process for both assemblies: its start-up (loading every resource schema) is most of its time.
    templates = sorted(
        str(path) for outdir in (assembly.outdir, promotion_assembly.outdir) for path in outdir.rglob("*.template.json")
    )
    assert any("Pipeline" in Path(t).name for t in templates) and len(templates) > 18
    # Run without the ignore list, so every ignored finding can be checked against the reason given for it.
    no_ignores = tmp_path / "cfnlintrc.yaml"
    no_ignores.write_text("ignore_checks: []\n")
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--config-file",
            str(no_ignores),
            "--format",
            "json",
            "--",
            *templates,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    ignored = yaml.safe_load((REPO / ".cfnlintrc.yaml").read_text())["ignore_checks"]
    # E3703 (a pipeline action's configuration, its RoleArn a role ARN) is an error rule: it is never ignored.
    assert ignored == ["W3005"]
    assert [f for f in findings if f["Rule"]["Id"] not in ignored] == [], result.stderr
    # Every W3005 is a DependsOn aws-cdk-lib writes, none this project's (the reason .cfnlintrc.yaml gives).
    types = {}
    for finding in findings:
        resources = json.loads(Path(finding["Filename"]).read_text())["Resources"]
        resource_id = finding["Location"]["Path"][1]
        types[(Path(finding["Filename"]).name, resource_id)] = resources[resource_id]["Type"]
    assert types and set(types.values()) <= CDK_GENERATED_DEPENDS_ON, types
