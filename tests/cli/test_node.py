"""`llmp` runs the CDK's jsii on the Node.js that set-up pinned, whatever Node the machine's PATH finds first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_pinned_node_comes_first_on_path_and_jsii_runs_on_it_without_a_banner():
    # The machine's PATH without the project's node_modules: what a person's shell has when they type `llmp`.
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "node_modules" not in p)
    script = (
        "import os, subprocess\n"
        "from cli.app import pinned_node_first\n"
        "pinned_node_first()\n"
        "print(os.environ['PATH'].split(os.pathsep)[0])\n"
        "print(subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip())\n"
        "from aws_cdk import region_info\n"
        "region_info.RegionInfo.regions\n"
    )
    env = {**os.environ, "PATH": path}
    env.pop("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    first, version = done.stdout.split()[:2]
    assert first == str(REPO / "node_modules" / ".bin")
    assert int(version.lstrip("v").split(".")[0]) >= 22
    assert "end-of-life" not in done.stderr
