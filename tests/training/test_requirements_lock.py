"""training/requirements.txt: the hashed lock every SageMaker job of the platform installs at start.

The lock must pin what training/requirements.in pins, for both images' Pythons, with hashes, and leave what the
images ship to them. And pip, run as the training toolkit and the processing steps run it, must refuse a file the
lock does not hash: shown here offline, on tiny wheels built in the test, with the project's own pip.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.training_job import TRAINING_REQUIREMENTS, pinned_version, read_requirements

REPO = Path(__file__).resolve().parents[2]
TRAINING = REPO / "training"
SOURCE = TRAINING / "requirements.in"
sys.path.insert(0, str(REPO / "scripts"))
import lock_training_requirements as lock_script  # noqa: E402

# The images' Pythons: the SMP v1 DLC and the processing steps' PyTorch 1.13.1 image (3.9), SMP v2's (3.11).
IMAGE_PYTHONS = ["3.9", "3.11"]


# --- the committed lock ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("python", IMAGE_PYTHONS)
def test_the_lock_pins_exactly_what_requirements_in_pins_for_each_image_python(python):
    wanted = {r.requirement.name for r in read_requirements(SOURCE) if r.applies_to(python)}
    assert {"transformers", "tokenizers", "huggingface-hub", "safetensors"} <= wanted
    for name in wanted:
        assert pinned_version(TRAINING_REQUIREMENTS, name, python) == pinned_version(SOURCE, name, python), name


@pytest.mark.parametrize("python", IMAGE_PYTHONS)
def test_the_lock_installs_one_version_of_each_package_per_image_python(python):
    names = [r.requirement.name for r in read_requirements(TRAINING_REQUIREMENTS) if r.applies_to(python)]
    assert len(names) == len(set(names)), names


def test_every_locked_requirement_is_pinned_exactly_and_hashed():
    lines = read_requirements(TRAINING_REQUIREMENTS)
    assert lines
    for line in lines:
        assert [s.operator for s in line.requirement.specifier] == ["=="], line.requirement
        assert line.hashes, f"{line.requirement} has no --hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in line.hashes), line.hashes


def test_the_lock_turns_on_hash_checking_and_wheels_only_for_whoever_installs_it():
    # The training toolkit passes pip no options (below): the file itself must carry them.
    assert global_options() == ["--require-hashes", "--only-binary :all:"]


def test_the_lock_leaves_what_the_images_ship_to_them():
    locked = {r.requirement.name for r in read_requirements(TRAINING_REQUIREMENTS)}
    assert not locked & set(lock_script.IMAGE_PROVIDED)
    assert {"torch", "numpy", "urllib3"}.isdisjoint(locked)
    # uv lists what --no-emit-package left out: the lock was generated with today's list.
    text = TRAINING_REQUIREMENTS.read_text()
    excluded = text.split("# The following packages were excluded from the output:\n", 1)[1].split()
    assert sorted(name for name in excluded if name != "#") == sorted(lock_script.IMAGE_PROVIDED)


def test_the_generator_resolves_for_both_pythons_with_hashes_and_wheels_only():
    command = lock_script.uv_command("uv")
    for flags in (["--universal"], ["--python-version", "3.9"], ["--generate-hashes"], ["--only-binary", ":all:"]):
        assert any(command[i : i + len(flags)] == flags for i in range(len(command))), flags
    excluded = {command[i + 1] for i, arg in enumerate(command) if arg == "--no-emit-package"}
    assert excluded == set(lock_script.IMAGE_PROVIDED)
    assert lock_script.HEADER.splitlines()[-3:-1] == global_options()


# --- reading requirements files ----------------------------------------------------------------------------------


def test_requirements_are_read_as_pip_reads_them(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text(
        "# a comment\n--require-hashes\n--only-binary :all:\n\n"
        "transformers==4.21.0 ; python_full_version < '3.10' \\\n"
        f"    --hash=sha256:{'a' * 64} \\\n"
        f"    --hash=sha256:{'b' * 64}\n"
        "    # via -r requirements.in\n"
        "transformers==4.46.3 ; python_full_version >= '3.10' --hash sha256:" + "c" * 64 + "\n"
    )
    first, second = read_requirements(path)
    assert (first.number, str(first.requirement.specifier), first.hashes) == (
        5,
        "==4.21.0",
        (f"sha256:{'a' * 64}", f"sha256:{'b' * 64}"),
    )
    assert second.hashes == (f"sha256:{'c' * 64}",)
    assert [pinned_version(path, "transformers", v) for v in ("3.9", "3.10", "3.11")] == ["4.21.0", "4.46.3", "4.46.3"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("transformers==4.21.0 --no-binary :all:", r"requirements\.txt:1: unexpected option '--no-binary'"),
        ("transformers==4.21.0 ; python_full_version < '3.9.7'", r"tells Python 3\.9 patch releases apart"),
    ],
)
def test_requirement_lines_this_reader_cannot_vouch_for_are_refused(tmp_path, line, message):
    (tmp_path / "requirements.txt").write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        pinned_version(tmp_path / "requirements.txt", "transformers", "3.9")


# --- what pip does with it: the training toolkit's command and the processing steps' -----------------------------


def test_the_training_toolkit_installs_requirements_txt_with_plain_pip(monkeypatch, tmp_path):
    """sagemaker-training (the toolkit in every training image) runs `python -m pip install -r requirements.txt`
    for a script entry point, with no pip options of its own: hash checking has to come from the file. A setup.py
    in training/ would make it `pip install .` instead, which hash-checking mode refuses (a directory has no hash).
    """
    from sagemaker_training import _entry_point_type, modules, process

    assert _entry_point_type.get(str(TRAINING), "train.py") is _entry_point_type.PYTHON_PROGRAM
    calls = []
    monkeypatch.delenv("CA_REPOSITORY_ARN", raising=False)  # CodeArtifact only adds an index URL
    monkeypatch.setattr(process, "check_error", lambda cmd, *args, **kwargs: calls.append((cmd, kwargs["cwd"])))
    modules.install_requirements(str(tmp_path))
    assert calls == [([process.python_executable(), "-m", "pip", "install", "-r", "requirements.txt"], str(tmp_path))]


def test_the_toolkit_refuses_a_wheel_whose_hash_the_lock_does_not_list(monkeypatch, tmp_path, capfd):
    env = Sandbox.create(tmp_path, monkeypatch)
    good = env.wheel("tinypkg", "1.0")
    env.lock(f"tinypkg==1.0 --hash=sha256:{tampered(good.sha256)}")
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in env.refused(capfd)
    assert env.installed() == {}
    env.lock(f"tinypkg==1.0 --hash=sha256:{good.sha256}")
    env.toolkit_install()
    assert env.installed() == {"tinypkg": "1.0"}


def test_the_toolkit_refuses_an_sdist_even_one_whose_hash_the_lock_lists(monkeypatch, tmp_path, capfd):
    env = Sandbox.create(tmp_path, monkeypatch)
    env.lock(f"tinypkg==1.0 --hash=sha256:{env.sdist('tinypkg', '1.0')}")
    assert "No matching distribution found for tinypkg==1.0" in env.refused(capfd)


def test_what_the_lock_leaves_to_the_image_is_trusted_when_there_and_refused_when_missing_or_too_old(
    monkeypatch, tmp_path, capfd
):
    # tinypkg needs imagepkg>=1.0, which the lock leaves to the image (as it leaves numpy or requests). The index
    # offers imagepkg 2.0, so any download or upgrade would show.
    env = Sandbox.create(tmp_path, monkeypatch)
    tiny = env.wheel("tinypkg", "1.0", requires=["imagepkg>=1.0"])
    shipped = {version: env.wheel("imagepkg", version) for version in ("0.9", "1.0", "2.0")}
    env.lock(f"tinypkg==1.0 --hash=sha256:{tiny.sha256}")
    refusal = r"must have their versions pinned with ==\. These do not:\s+imagepkg>=1\.0 from "
    assert re.search(refusal, env.refused(capfd))
    assert env.installed() == {}
    env.preinstall(shipped["0.9"])
    assert re.search(refusal, env.refused(capfd))
    assert env.installed() == {"imagepkg": "0.9"}
    env.preinstall(shipped["1.0"])
    env.toolkit_install()
    assert env.installed() == {"imagepkg": "1.0", "tinypkg": "1.0"}  # the image's copy, untouched


def test_the_processing_steps_pip_command_refuses_unhashed_and_sdist_requirements_by_itself(monkeypatch, tmp_path):
    """The processing steps' own pip flags enforce hash checking and wheels only, whatever the file says."""
    from core.catalog.images import processing_image
    from core.config import TrainingConfig
    from infrastructure.constructs.training_pipeline.offline_sdk import offline_session, processor

    with offline_session("us-east-1") as session:
        job = processor(
            session,
            TrainingConfig(),
            region="us-east-1",
            name="x",
            instance_type="ml.m5.2xlarge",
            script="x.py",
            image=processing_image("us-east-1", "ml.m5.2xlarge"),
        )
    install = next(shlex.split(part) for part in job.entrypoint[2].split("&&") if " pip install " in part)
    assert install[0] == "python3"
    env = Sandbox.create(tmp_path, monkeypatch)
    good = env.wheel("tinypkg", "1.0")
    # Bare requirement lines, without the lock's options.
    (env.cwd / "requirements.txt").write_text("tinypkg==1.0\n")
    unhashed = env.run(install[1:])
    assert unhashed.returncode != 0 and "Hashes are required in --require-hashes mode" in unhashed.stderr
    (env.cwd / "requirements.txt").write_text(f"otherpkg==1.0 --hash=sha256:{env.sdist('otherpkg', '1.0')}\n")
    sdist = env.run(install[1:])
    assert sdist.returncode != 0 and "No matching distribution found for otherpkg==1.0" in sdist.stderr
    assert env.installed() == {}
    (env.cwd / "requirements.txt").write_text(f"tinypkg==1.0 --hash=sha256:{good.sha256}\n")
    assert env.run(install[1:]).returncode == 0
    assert env.installed() == {"tinypkg": "1.0"}


# --- helpers -------------------------------------------------------------------------------------------------------


def global_options() -> list[str]:
    """The lock's option lines (a requirement's --hash lines are indented)."""
    return [line for line in TRAINING_REQUIREMENTS.read_text().splitlines() if line.startswith("-")]


def tampered(sha256: str) -> str:
    return sha256[:-1] + ("0" if sha256[-1] != "0" else "1")


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str


@dataclass(frozen=True)
class Sandbox:
    """A Python environment of its own, standing in for an image: no packages but the project's pip (importable,
    not installed), a local package index, and a code dir holding the job's requirements.txt. pip reads no config
    file, no index but the local one, and no PIP_* variable of this machine."""

    root: Path

    @classmethod
    def create(cls, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
        import pip

        sandbox = cls(tmp_path / "sandbox")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(sandbox.root / "env")], check=True)
        for folder in (sandbox.index, sandbox.cwd, sandbox.root / "pip-only"):
            folder.mkdir()
        (sandbox.root / "pip-only" / "pip").symlink_to(Path(pip.__file__).parent)
        (sandbox.site_packages / "_project_pip.pth").write_text(str(sandbox.root / "pip-only") + "\n")
        for name in [k for k in os.environ if k.startswith("PIP_")]:
            monkeypatch.delenv(name)
        for name, value in {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(sandbox.index),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1",
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("CA_REPOSITORY_ARN", raising=False)
        return sandbox

    @property
    def python(self) -> Path:
        return self.root / "env" / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return next((self.root / "env" / "lib").glob("python*/site-packages"))

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def cwd(self) -> Path:
        return self.root / "code"

    def wheel(self, name: str, version: str, requires: list[str] | tuple[str, ...] = ()) -> Wheel:
        """A pure-Python wheel, built by hand (a zip with its dist-info), into the index."""
        dist = f"{name}-{version}.dist-info"
        files = {
            f"{name}/__init__.py": f"VERSION = {version!r}\n",
            f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires),
            f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        }
        record = [f"{p},sha256={_urlsafe_digest(t.encode())},{len(t.encode())}" for p, t in files.items()]
        files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
        path = self.index / f"{name}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            for member, text in files.items():
                archive.writestr(zipfile.ZipInfo(member, (2020, 1, 1, 0, 0, 0)), text)
        return Wheel(path, hashlib.sha256(path.read_bytes()).hexdigest())

    def sdist(self, name: str, version: str) -> str:
        """An sdist in the index (pip must never get as far as building it); its sha256."""
        path = self.index / f"{name}-{version}.tar.gz"
        path.write_bytes(b"an sdist: setup.py would run at install")
        return hashlib.sha256(path.read_bytes()).hexdigest()

    def lock(self, *requirements: str) -> None:
        """The job's requirements.txt: the committed lock's options, then these requirement lines."""
        (self.cwd / "requirements.txt").write_text("\n".join([*global_options(), *requirements]) + "\n")

    def toolkit_install(self) -> None:
        """The training toolkit's own install_requirements, with this environment's interpreter."""
        from sagemaker_training import modules, process

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(process, "python_executable", lambda: str(self.python))
            modules.install_requirements(str(self.cwd), capture_error=True)

    def refused(self, capfd: pytest.CaptureFixture) -> str:
        """What pip printed when the toolkit's install failed (the toolkit streams it; its error keeps little)."""
        from sagemaker_training.errors import InstallRequirementsError

        capfd.readouterr()
        with pytest.raises(InstallRequirementsError):
            self.toolkit_install()
        captured = capfd.readouterr()
        return captured.out + captured.err

    def run(self, args: list[str]) -> subprocess.CompletedProcess:
        """This environment's `python <args>`, in the code dir."""
        return subprocess.run([str(self.python), *args], cwd=self.cwd, capture_output=True, text=True, check=False)

    def preinstall(self, wheel: Wheel) -> None:
        """What an image ships: unpacked into site-packages as the image's build left it, replacing another
        version."""
        name = wheel.path.name.split("-", 1)[0]
        for old in self.site_packages.glob(f"{name}-*.dist-info"):
            shutil.rmtree(old)
        with zipfile.ZipFile(wheel.path) as archive:
            archive.extractall(self.site_packages)

    def installed(self) -> dict[str, str]:
        found = (p.name.removesuffix(".dist-info").split("-", 1) for p in self.site_packages.glob("*.dist-info"))
        return dict(sorted(found))


def _urlsafe_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
