"""Make a virtualenv hold exactly what its locks pin: report (and with --prune, uninstall) what they do not.

    <venv>/bin/python scripts/venv_sync.py [--prune] LOCK [LOCK ...]

Run with the venv's own interpreter, after `pip install -r LOCK` for each lock: pip adds and upgrades, but never
removes a package a lock no longer names, so a venv kept across a lock bump would drift from the lock. With
--prune the leftovers are uninstalled first; then every installed distribution must be pinned by a lock, at its
exact version, and every pin that applies to this interpreter must be installed. Exit 1, with each difference and
the fix, when they are not. The project itself (an editable install) is not a locked package.

Stdlib and pip only (every venv has pip; this also runs in the Python 3.9 image environments of
make test-containers).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

try:
    from packaging.markers import Marker
except ImportError:  # a venv with pip alone: pip vendors packaging
    from pip._vendor.packaging.markers import Marker

PROJECT = "llm-platform"
# `name==version` with an optional `; marker`, as uv writes a lock line (hashes follow on continuation lines).
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>[^\s;\\]+)\s*(;(?P<marker>[^\\]*))?")


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, tuple[str, str | None]]:
    """Every `name==version` line of a lock: {name: (version, marker or None)}. A name may appear twice with
    exclusive markers (a universal lock's forks): the first whose marker holds here wins, in locked()."""
    pins: dict[str, list[tuple[str, str | None]]] = {}
    for line in text.splitlines():
        found = PIN.match(line)
        if found:
            marker = (found["marker"] or "").strip() or None
            pins.setdefault(normalize(found["name"]), []).append((found["version"], marker))
    return {name: tuple(options) for name, options in pins.items()}  # type: ignore[misc]


def locked(lock_texts: list[str], environment: dict[str, str] | None = None) -> dict[str, str]:
    """{name: version} of every pin whose marker holds for `environment` (default: this interpreter)."""
    versions: dict[str, str] = {}
    for text in lock_texts:
        for name, options in read_pins(text).items():
            for version, marker in options:  # type: ignore[misc]
                if marker is None or Marker(marker).evaluate(environment):
                    versions[name] = version
                    break
    return versions


def installed() -> dict[str, str]:
    """{name: version} of every distribution this interpreter's environment holds, the project excepted."""
    found = {normalize(dist.metadata["Name"]): dist.version for dist in metadata.distributions()}
    found.pop(PROJECT, None)
    return found


def differences(have: dict[str, str], want: dict[str, str]) -> list[str]:
    """One line per way `have` (installed) differs from `want` (locked)."""
    lines = [f"{name} {version} is installed but no lock pins it" for name, version in sorted(have.items())
             if name not in want]  # fmt: skip
    lines += [f"{name} {want[name]} is locked but not installed" for name in sorted(want) if name not in have]
    lines += [
        f"{name} {have[name]} is installed; the lock pins {want[name]}"
        for name in sorted(set(have) & set(want))
        if have[name] != want[name]
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("locks", nargs="+", type=Path, help="the lock files this venv installs")
    parser.add_argument("--prune", action="store_true", help="uninstall what no lock pins before checking")
    args = parser.parse_args(argv)
    want = locked([path.read_text() for path in args.locks])
    extra = sorted(set(installed()) - set(want))
    if args.prune and extra:
        print(f"uninstalling what no lock pins: {', '.join(extra)}")
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", *extra], check=True)
    problems = differences(installed(), want)
    if problems:
        names = " ".join(str(path) for path in args.locks)
        print(f"{sys.prefix} does not hold exactly what {names} pin:", file=sys.stderr)
        print("".join(f"  - {line}\n" for line in problems), end="", file=sys.stderr)
        print(f"  fix: delete {sys.prefix} and run make again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
