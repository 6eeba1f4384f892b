"""Nothing is installed when the container starts: the handler runs on what the LMI 0.27.0 image ships
(tests/model_artifacts/lmi_image.py records it, from the image's build files)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from lmi_image import IMAGE_PACKAGES, IMPORT_NAMES, MOVES_IMAGE_PACKAGES, start_up_install_problems

HANDLER_DIR = Path(__file__).resolve().parents[2] / "model_artifacts" / "deepspeed"
# DJL's Python engine puts its own djl_python on the path (PyEnv extracts it into the engine cache).
PROVIDED_BY_DJL = {"djl_python"}


def test_the_handler_asks_djl_to_install_nothing_at_start_up():
    """DJL 0.27.0 pip-installs <model_dir>/requirements.txt before the first call (PyEnv.installDependency), from
    PyPI, over the image's packages. Every line is refused: see start_up_install_problems."""
    requirements = HANDLER_DIR / "requirements.txt"
    text = requirements.read_text() if requirements.is_file() else ""
    assert start_up_install_problems(text) == []
    assert not (HANDLER_DIR / "requirements").exists()  # DJL's offline wheel folder (pip -f)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("boto3>=1.28,<2", "installing boto3 moves the image's botocore, s3transfer"),
        ("botocore==1.35.0", "the image ships botocore"),
        ("Transformers[torch]==4.40.0", "the image ships transformers"),
        ("awscli", "the image ships awscli"),
        ("tenacity==8.2.3  # retries", "start-up would need PyPI"),
    ],
)
def test_each_kind_of_start_up_install_is_named(line, reason):
    (problem,) = start_up_install_problems(f"# a comment\n\n{line}\n")
    assert reason in problem


def test_every_module_the_handler_imports_is_in_the_image():
    siblings = {path.stem for path in HANDLER_DIR.glob("*.py")}
    imported = {}
    for path in sorted(HANDLER_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                imported.setdefault(name.split(".")[0], path.name)
    outside = {
        top: where
        for top, where in imported.items()
        if top not in sys.stdlib_module_names and top not in siblings and top not in PROVIDED_BY_DJL
    }
    missing = {top: where for top, where in outside.items() if IMPORT_NAMES.get(top) not in IMAGE_PACKAGES}
    assert missing == {}, f"imported by the handler but not shipped by the LMI 0.27.0 image: {missing}"
    # EnableNetworkIsolation: the handler reaches nothing, so it imports no AWS or HTTP client at all.
    assert not {"boto3", "botocore", "s3transfer", "urllib3", "requests", "httpx"} & set(outside)
    assert "boto3" in MOVES_IMAGE_PACKAGES and "boto3" not in IMAGE_PACKAGES
