"""cfn-lint over every synthesized template: no errors, no warnings beyond those listed in .cfnlintrc.yaml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cdk_assembly import REPO


def test_every_template_passes_cfn_lint(assembly):
    templates = sorted(str(p) for p in assembly.outdir.glob("assembly-*/*.template.json"))
    assert templates
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
