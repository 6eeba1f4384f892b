"""Every environment the project installs is locked: each lock pins what its input asks for, every line exactly and
with hashes, and each venv holds exactly what its locks pin (pip freeze against the lock, transitive packages too).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infrastructure.pipeline_stack import BOTO3_VERSION
from scripts import locks, venv_sync
from tests.cdk_assembly import REPO

REQUIREMENTS = REPO / "requirements"


LINUX_PY311 = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}  # fmt: skip


def input_requirements(path: Path) -> list[Requirement]:
    """The requirements an input file names, following `-r` includes."""
    found = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found += input_requirements(path.parent / line[3:].strip())
        elif line:
            found.append(Requirement(line))
    return found


def locked(*names: str, environment: dict[str, str] | None = None) -> dict[str, str]:
    texts = [(REQUIREMENTS / f"{name}.txt").read_text() for name in names]
    return venv_sync.locked(texts, environment)


def pip_freeze(python: Path) -> dict[str, str]:
    """{name: version} as `pip freeze --all` prints it, the project's own editable install left out."""
    result = subprocess.run([python, "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True)
    pins = {}
    for line in result.stdout.splitlines():
        if line.startswith(("#", "-e ")):  # the project's own editable install, and pip's comment on it
            continue
        name, separator, version = line.partition("==")
        assert separator, f"{python}: not installed from an index: {line}"
        pins[venv_sync.normalize(name)] = version
    return pins


# --- the committed locks -------------------------------------------------------------------------------------------


def test_every_input_file_has_a_lock_and_every_lock_an_input():
    inputs = {path.relative_to(REQUIREMENTS).with_suffix("").as_posix() for path in REQUIREMENTS.rglob("*.in")}
    assert inputs == set(locks.BY_NAME), "each requirements/*.in needs its row in scripts/locks.py LOCKS"
    for name in inputs:
        assert (REQUIREMENTS / f"{name}.txt").is_file(), f"requirements/{name}.txt is missing: run `make lock`"


@pytest.mark.parametrize("lock", locks.LOCKS, ids=lambda lock: lock.name)
def test_every_lock_line_is_an_exact_pin_with_hashes_in_hash_checking_mode(lock):
    text = lock.path.read_text()
    assert "\n--require-hashes\n" in text, f"{lock.path.name}: the header turns on pip's hash-checking mode"
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("--require-hashes\n", 1)[1].strip())
    for entry in entries:
        assert venv_sync.PIN.match(entry), f"{lock.path.name}: not an exact pin: {entry.splitlines()[0]}"
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"{lock.path.name}: no hash: {entry.splitlines()[0]}"


@pytest.mark.parametrize("lock", locks.LOCKS, ids=lambda lock: lock.name)
def test_every_lock_pins_what_its_input_asks_for(lock):
    python = {"python_version": lock.python, "python_full_version": f"{lock.python}.0"}
    environment = None if lock.universal else LINUX_PY311 | python
    pins = venv_sync.locked([lock.path.read_text()], environment)
    for requirement in input_requirements(lock.source):
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        name = venv_sync.normalize(requirement.name)
        if name in lock.omit:
            continue
        assert name in pins, f"{lock.path.name} lacks {requirement}: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock.path.name} pins {name} {pins[name]}, but {lock.source.name} asks for {requirement}: run `make lock`"
        )


def test_the_dev_lock_keeps_every_synth_pin_so_make_test_never_moves_what_make_synth_installed():
    synth, dev = locked("synth", environment=LINUX_PY311), locked("dev", environment=LINUX_PY311)
    assert {name: (version, dev.get(name)) for name, version in synth.items() if dev.get(name) != version} == {}


def test_the_promotion_pipelines_smoke_test_installs_the_locked_boto3():
    assert locked("synth")["boto3"] == BOTO3_VERSION


# --- the venvs against their locks ---------------------------------------------------------------------------------


def test_the_test_venv_holds_exactly_the_dev_and_deepspeed_locks():
    """This interpreter is make test's .venv: `pip freeze` equals the locks' pins, nothing more, nothing less."""
    freeze = pip_freeze(Path(sys.executable))
    assert venv_sync.differences(freeze, locked("dev", "deepspeed")) == []


def test_the_checkov_venv_holds_exactly_its_lock():
    python = REPO / ".venv-checkov" / "bin" / "python"
    assert python.exists(), "make test installs .venv-checkov before it runs the tests"
    assert venv_sync.differences(pip_freeze(python), locked("checkov")) == []


def test_differences_name_the_unpinned_the_missing_and_the_moved():
    have = {"boto3": "1.44.8", "botocore": "1.44.9", "stray": "1.0"}
    want = {"boto3": "1.44.8", "botocore": "1.44.8", "s3transfer": "0.19.3"}
    assert venv_sync.differences(have, want) == [
        "stray 1.0 is installed but no lock pins it",
        "s3transfer 0.19.3 is locked but not installed",
        "botocore 1.44.9 is installed; the lock pins 1.44.8",
    ]


def test_a_universal_lock_takes_the_fork_whose_marker_holds():
    text = "numpy==2.4.6 ; python_full_version < '3.12' \\\nnumpy==2.5.5 ; python_full_version >= '3.12' \\\n"
    assert venv_sync.locked([text], {"python_full_version": "3.11.7"}) == {"numpy": "2.4.6"}
    assert venv_sync.locked([text], {"python_full_version": "3.13.0"}) == {"numpy": "2.5.5"}
    windows_only = "colorama==0.4.6 ; sys_platform == 'win32' \\\n"
    assert venv_sync.locked([windows_only], {"sys_platform": "linux"}) == {}
