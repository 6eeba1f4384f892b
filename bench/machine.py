"""The machine a benchmark ran on: CPU, cores, memory, OS and the versions of what was measured."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{line.split('=', 1)[1].strip(chr(34))} (kernel {platform.release()})"
    except OSError:
        pass
    return platform.platform()


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _node_version() -> str:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not found"


def _cdk_cli_version() -> str:
    package = REPO_ROOT / "node_modules" / "aws-cdk" / "package.json"
    try:
        return json.loads(package.read_text())["version"]
    except (OSError, KeyError, ValueError):
        return "not installed"


def usable_cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def describe() -> dict[str, str]:
    """What BENCHMARKS.md prints about the machine, as ordered name -> value."""
    memory = _memory_gib()
    return {
        "CPU": _cpu_model(),
        "cores": f"{usable_cores()} usable ({os.cpu_count()} online)",
        "memory": f"{memory:.1f} GiB" if memory is not None else "unknown",
        "OS": _os_name(),
        "Python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "deepspeed": _version("deepspeed"),
        "aws-cdk-lib": _version("aws-cdk-lib"),
        "cdk-nag": _version("cdk-nag"),
        "sagemaker": _version("sagemaker"),
        "CDK CLI": _cdk_cli_version(),
        "Node.js": _node_version(),
    }
