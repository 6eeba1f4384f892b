"""make test-containers: the code that runs inside SageMaker, tested under each image's own library versions.

    .venv/bin/python scripts/test_containers.py [--only smp-v1,lmi-0.27] [--rebuild]

Each environment stands for one image: its Python (one of this machine's, never downloaded), what the image ships
(requirements/images/<name>.txt, hash-locked like every lock of the project), then what the job or endpoint itself
installs at start, installed the way it installs it (plain `pip install -r training/requirements.txt`, as the
SageMaker training toolkit does). The venv must then hold exactly those pins (scripts/venv_sync.py), and the tests
the image runs (tests/*/image_environments.py) must pass in it.

A venv takes minutes to build (GBs of torch CUDA builds to unpack; PyPI's copies run on CPU) and is kept, outside
any clone so that CI's fresh clone finds it too, in ~/.cache/llm-platform/image-venvs/<name> (XDG_CACHE_HOME
moves it); it is rebuilt when its interpreter or a lock it installs changes, or with --rebuild.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts import locks  # noqa: E402


def venvs() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-platform" / "image-venvs"


@dataclass(frozen=True)
class Install:
    """One `pip install -r` of a lock, with the options the image's own build uses for it."""

    lock: str  # relative to the repository
    options: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageEnvironment:
    name: str
    image: str  # the image it stands for
    installs: tuple[Install, ...]  # the first is the image's own lock, requirements/images/<name>.txt
    selections: str  # the module whose SELECTIONS[name] lists the tests this image runs

    @property
    def python(self) -> str:
        """The image's Python version: the one its lock is resolved for."""
        return locks.BY_NAME[f"images/{self.name}"].python

    def locks(self) -> list[Path]:
        return [REPO / install.lock for install in self.installs]


# What a training job installs at start, as the toolkit's own command does: `python -m pip install -r requirements.txt`.
AS_THE_TRAINING_TOOLKIT_DOES = Install("training/requirements.txt")
ENVIRONMENTS = (
    ImageEnvironment(
        "smp-v1",
        "pytorch-training:1.13.1-gpu-py39-cu117-ubuntu20.04-sagemaker (SMP v1 jobs, prepare, evaluate, staging)",
        (Install("requirements/images/smp-v1.txt"), AS_THE_TRAINING_TOOLKIT_DOES),
        "tests/training/image_environments.py",
    ),
    ImageEnvironment(
        "smp-v2",
        "smdistributed-modelparallel 2.x, PyTorch 2.4.1 (SMP v2, LoRA and QLoRA jobs)",
        (Install("requirements/images/smp-v2.txt"), AS_THE_TRAINING_TOOLKIT_DOES),
        "tests/training/image_environments.py",
    ),
    ImageEnvironment(
        "lmi-0.27",
        "djl-inference:0.27.0-deepspeed0.12.6-cu121 (the DeepSpeed inference handler)",
        (
            Install("requirements/images/lmi-0.27.txt"),
            # DeepSpeed is source-only: built after torch, without CUDA ops, against the image's torch.
            Install(
                "requirements/images/lmi-0.27-deepspeed.txt",
                ("--no-deps", "--no-build-isolation"),
                {"DS_BUILD_OPS": "0"},
            ),
        ),
        "tests/model_artifacts/image_environments.py",
    ),
)
BY_NAME = {environment.name: environment for environment in ENVIRONMENTS}


# What a candidate interpreter says of itself: its version, and the interpreter a venv of it is built on (a
# virtualenv's or a pyenv shim's python stands for the installation under it, so each resolves to one path).
BASE_INTERPRETER = (
    "import os, sys; print('%d.%d' % sys.version_info[:2]); "
    "print(os.path.realpath(sys.executable) if sys.prefix == sys.base_prefix "
    "else os.path.join(sys.base_prefix, 'bin', 'python%d.%d' % sys.version_info[:2]))"
)


def interpreter(version: str) -> str:
    """This machine's Python `version`, as the path of the installation itself: a PYTHON_3_9-style override,
    `python3.9` on PATH (even a virtualenv's), or pyenv's."""
    override = os.environ.get(f"PYTHON_{version.replace('.', '_')}")
    candidates = [override] if override else []
    candidates.append(shutil.which(f"python{version}") or "")
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    for candidate in filter(None, candidates):
        result = subprocess.run([candidate, "-c", BASE_INTERPRETER], capture_output=True, text=True, check=False)
        said = result.stdout.split()
        if result.returncode == 0 and len(said) == 2 and said[0] == version:
            return said[1]
    raise SystemExit(
        f"no Python {version} here: install it (`pyenv install {version}`) or point "
        f"PYTHON_{version.replace('.', '_')} at one; the image's tests need its own Python"
    )


def selection(environment: ImageEnvironment) -> list[str]:
    spec = importlib.util.spec_from_file_location("image_environments", REPO / environment.selections)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # In path order, as the dev suite runs them: the order pytest gets does not change with how a table is written.
    # A test the module lists in DESELECTED for this image (with the reason) is left out: an open defect, not a pass.
    deselected = getattr(module, "DESELECTED", {}).get(environment.name, {})
    return [*sorted(set(module.SELECTIONS[environment.name])), *(f"--deselect={test}" for test in sorted(deselected))]


def fingerprint(environment: ImageEnvironment, python: str) -> str:
    """What the venv is built from: the interpreter and every lock it installs."""
    digest = hashlib.sha256(python.encode())
    for lock in environment.locks():
        digest.update(lock.read_bytes())
    return digest.hexdigest()


def run(command: list[str], environment: dict[str, str] | None = None) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=REPO, env={**os.environ, **(environment or {})})


def pip_install(venv: Path, install: Install) -> None:
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *install.options, "-r", install.lock],
        install.environment)  # fmt: skip


def build(environment: ImageEnvironment, rebuild: bool) -> Path:
    """The environment's venv, built unless one from the same files is there; then checked against the locks."""
    python = interpreter(environment.python)
    venv = venvs() / environment.name
    stamp, wanted = venv / ".built-from", fingerprint(environment, python)
    if rebuild or not stamp.is_file() or stamp.read_text() != wanted:
        shutil.rmtree(venv, ignore_errors=True)
        run([python, "-m", "venv", str(venv)])
        for install in environment.installs:
            pip_install(venv, install)
        stamp.write_text(wanted)
    # What `python -m venv` put there itself and no lock pins (Python 3.11's setuptools) goes; then nothing may differ.
    run([str(venv / "bin" / "python"), "scripts/venv_sync.py", "--prune", *(i.lock for i in environment.installs)])
    return venv


def test(environment: ImageEnvironment, venv: Path) -> None:
    # The dev venv's settings for the tests (the Makefile's), and no bytecode left in the source folders.
    run([str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", *selection(environment)],
        {"DS_ACCELERATOR": "cpu", "PYTHONDONTWRITEBYTECODE": "1"})  # fmt: skip


def run_environment(environment: ImageEnvironment, rebuild: bool) -> tuple[bool, float, float]:
    """Build and test one environment: (passed, set-up seconds, test seconds)."""
    print(f"== {environment.name}: {environment.image}", flush=True)
    started = time.monotonic()
    try:
        venv = build(environment, rebuild)
    except subprocess.CalledProcessError:
        return False, time.monotonic() - started, 0.0
    built = time.monotonic()
    try:
        test(environment, venv)
    except subprocess.CalledProcessError:
        return False, built - started, time.monotonic() - built
    return True, built - started, time.monotonic() - built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma-separated environments (default: all of {', '.join(BY_NAME)})")
    parser.add_argument("--rebuild", action="store_true", help="build every venv anew, even from unchanged locks")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(BY_NAME)
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        raise SystemExit(f"--only: unknown environment(s) {', '.join(unknown)}; expected some of {', '.join(BY_NAME)}")
    timings, failed = [], []
    for name in names:
        passed, set_up_s, tests_s = run_environment(BY_NAME[name], args.rebuild)
        timings.append(f"{name}: set-up {set_up_s:.0f} s, tests {tests_s:.0f} s" + ("" if passed else ", FAILED"))
        if not passed:
            failed.append(name)
    print("\n".join(["== test-containers", *timings]))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
