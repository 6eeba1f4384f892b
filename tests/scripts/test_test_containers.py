"""make test-containers: each image's environment is declared once, and every container test runs in one of them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scripts import locks, test_containers
from tests.cdk_assembly import REPO

# The folders of the code that runs inside SageMaker containers, and the tables of which image runs which test.
CONTAINER_TEST_FOLDERS = {
    "tests/training": "tests/training/image_environments.py",
    "tests/model_artifacts": "tests/model_artifacts/image_environments.py",
}


def table(path: str):
    namespace: dict = {}
    exec((REPO / path).read_text(), namespace)  # a plain literal module, as the runner reads it
    return namespace


@pytest.mark.parametrize("environment", test_containers.ENVIRONMENTS, ids=lambda e: e.name)
def test_each_environment_installs_locked_files_starting_with_its_image_lock(environment):
    first = environment.installs[0]
    assert first.lock == f"requirements/images/{environment.name}.txt"
    for install in environment.installs:
        name = install.lock.removeprefix("requirements/").removesuffix(".txt")
        assert name in locks.BY_NAME or install.lock == "training/requirements.txt", install.lock
        assert "--require-hashes" in (REPO / install.lock).read_text()


def test_every_image_lock_belongs_to_an_environment():
    installed = {install.lock for environment in test_containers.ENVIRONMENTS for install in environment.installs}
    image_locks = {f"requirements/{lock.name}.txt" for lock in locks.LOCKS if lock.name.startswith("images/")}
    assert image_locks <= installed


@pytest.mark.parametrize("folder", CONTAINER_TEST_FOLDERS)
def test_every_container_test_file_runs_in_an_image_or_says_why_not(folder):
    declared = table(CONTAINER_TEST_FOLDERS[folder])
    selected = {path for paths in declared["SELECTIONS"].values() for path in paths}
    dev_only = declared.get("DEV_ONLY", {})
    files = {f"{folder}/{path.name}" for path in (REPO / folder).glob("test_*.py")}
    assert files - selected - set(dev_only) == set(), "add the file to a SELECTIONS list, or to DEV_ONLY with why"
    assert (selected | set(dev_only)) - files == set(), "a selection names a file that does not exist"
    assert all(reason.strip() for reason in dev_only.values())


def test_every_environment_has_a_selection_in_its_table():
    for environment in test_containers.ENVIRONMENTS:
        assert test_containers.selection(environment), environment.name


def test_an_environment_is_rebuilt_when_a_lock_it_installs_changes(tmp_path, monkeypatch):
    lock = tmp_path / "image.txt"
    lock.write_text("--require-hashes\n")
    environment = test_containers.ImageEnvironment("x", "an image", (test_containers.Install(str(lock)),), "")
    before = test_containers.fingerprint(environment, "/usr/bin/python3.9")
    assert test_containers.fingerprint(environment, "/usr/bin/python3.9") == before
    assert test_containers.fingerprint(environment, "/opt/python3.9") != before
    lock.write_text("--require-hashes\nsix==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    assert test_containers.fingerprint(environment, "/usr/bin/python3.9") != before


def test_a_virtualenvs_python_stands_for_the_installation_it_was_made_from(monkeypatch):
    """So the venv of an image and its fingerprint are the same whoever runs the target (make, a venv, bench)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    installation = os.path.realpath(os.path.join(sys.base_prefix, "bin", f"python{version}"))
    monkeypatch.setenv(f"PYTHON_{version.replace('.', '_')}", sys.executable)  # this test venv's python
    assert sys.prefix != sys.base_prefix
    assert os.path.realpath(test_containers.interpreter(version)) == installation
    monkeypatch.delenv(f"PYTHON_{version.replace('.', '_')}")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert os.path.realpath(test_containers.interpreter(version)) == installation


def test_a_missing_python_is_refused_with_the_way_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PYTHON_3_7", raising=False)
    with pytest.raises(
        SystemExit, match=r"no Python 3\.7 here: install it \(`pyenv install 3\.7`\) or point PYTHON_3_7"
    ):
        test_containers.interpreter("3.7")


def test_the_venvs_live_outside_the_clone_where_a_rerun_finds_them(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert test_containers.venvs() == tmp_path / "llm-platform" / "image-venvs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert test_containers.venvs() == Path(os.path.expanduser("~")) / ".cache" / "llm-platform" / "image-venvs"


def test_a_deselected_test_is_named_with_its_reason_and_exists():
    for folder, path in CONTAINER_TEST_FOLDERS.items():
        for environment, tests in table(path).get("DESELECTED", {}).items():
            assert environment in test_containers.BY_NAME
            for test, reason in tests.items():
                file, _, name = test.partition("::")
                assert reason.strip() and file.startswith(folder) and f"def {name}(" in (REPO / file).read_text()
