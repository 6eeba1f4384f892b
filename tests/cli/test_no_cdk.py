"""`llmp` reads the config through the core alone: it never starts the CDK's jsii runtime, so it needs no Node.js."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_command_loads_the_config_without_the_cdk_or_node():
    # No Node.js on PATH at all: a jsii start would fail, and a CDK import would show in sys.modules.
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "node" not in p)
    script = (
        "import pkgutil, importlib, sys\n"
        "import cli.app, cli.commands\n"
        "for info in pkgutil.walk_packages(cli.__path__, 'cli.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "from cli.options import load\n"
        "load(None)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'constructs', 'jsii', 'infrastructure')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
