"""cfn-lint over every synthesized template: no errors, no warnings beyond those listed in .cfnlintrc.yaml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cdk_assembly import REPO


def test_every_template_passes_cfn_lint(assembly, promotion_assembly):
    # One cfn-lint process for both assemblies: its start-up (loading every resource schema) is most of its time.
    templates = sorted(
        str(path) for outdir in (assembly.outdir, promotion_assembly.outdir) for path in outdir.rglob("*.template.json")
    )
    assert any("Pipeline" in Path(t).name for t in templates) and len(templates) > 18
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--config-file",
            str(REPO / ".cfnlintrc.yaml"),
            "--",
            *templates,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
