"""Shared fixtures for the LMI DeepSpeed handler tests: tiny models on disk, the handler loaded like DJL loads it,
moto S3 with a model folder uploaded, and a helper that sends one request through the handler."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

# deepspeed reads this at import: unset prints a warning, set-but-empty crashes.
if not os.environ.get("DS_ACCELERATOR"):
    os.environ["DS_ACCELERATOR"] = "cpu"

# DeepSpeed before 0.14.1 (the LMI 0.27.0 image's 0.12.6) builds its CPU accelerator only if two Intel packages
# import: accelerator/real_accelerator.py gates on intel_extension_for_pytorch and cpu_accelerator.py imports
# oneccl_bindings_for_pytorch at its top; neither is used further (the handler joins gloo groups itself, and runs no
# DeepSpeed op on CPU). PyPI has no oneCCL bindings and only yanked IPEX 2.1 releases, and the image has neither (it
# runs the CUDA accelerator), so empty modules stand in for the two, and only where that DeepSpeed is installed.
_CPU_ACCELERATOR_GATES = ("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch")
_LAST_DEEPSPEED_WITH_GATES = (0, 14, 0)


def _stand_in_cpu_accelerator_gates() -> None:
    import importlib.machinery
    import importlib.metadata
    import types

    try:
        version = importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return
    if tuple(int(part) for part in version.split(".")[:3] if part.isdigit()) > _LAST_DEEPSPEED_WITH_GATES:
        return
    for name in _CPU_ACCELERATOR_GATES:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            module = types.ModuleType(name)
            # transformers probes packages with find_spec, which needs a spec; with no installed distribution it
            # still reports the package as absent (is_ipex_available() is False).
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module


if os.environ["DS_ACCELERATOR"] == "cpu":
    _stand_in_cpu_accelerator_gates()

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLER_DIR = REPO_ROOT / "model_artifacts" / "deepspeed"
# As in the container: the handler folder is importable (DJL puts the model dir on the path) and so is djl_python
# (here our stand-in in local/djl_python).
for path in (REPO_ROOT / "local", HANDLER_DIR, REPO_ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from local.tiny import save_tiny_model  # noqa: E402

TEST_BUCKET = "lmi-test-weights"


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and far faster than two when other processes share the 2 cores."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def handler_module():
    """model.py imported under its own name, as DJL's service loader imports the entry point."""
    spec = importlib.util.spec_from_file_location("lmi_test_handler_model", HANDLER_DIR / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """tiny_model_dir(arch) -> an HF model folder of a tiny random model, written once per session."""
    folders: dict[str, Path] = {}

    def build(arch: str = "gptj") -> Path:
        if arch not in folders:
            folders[arch] = save_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch=arch)
        return folders[arch]

    return build


@pytest.fixture(scope="session")
def loaded_service(handler_module, tiny_model_dir):
    """loaded_service(arch) -> a TextGenerationService initialized from the tiny model folder, fp32 on CPU."""
    services = {}

    def load(arch: str = "gptj"):
        if arch not in services:
            service = handler_module.TextGenerationService()
            service.initialize(
                {"weights_dir": str(tiny_model_dir(arch)), "dtype": "fp32", "model_dir": str(HANDLER_DIR)}
            )
            services[arch] = service
        return services[arch]

    return load


@pytest.fixture(scope="session")
def reference_model(tiny_model_dir):
    """reference_model(arch) -> (model, tokenizer) loaded with plain transformers, set up as a user would."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = {}

    def load(arch: str = "gptj"):
        if arch not in loaded:
            folder = tiny_model_dir(arch)
            model = AutoModelForCausalLM.from_pretrained(folder, **float32_argument()).eval()
            tokenizer = AutoTokenizer.from_pretrained(folder)
            tokenizer.pad_token = tokenizer.eos_token
            tokenizer.padding_side = "left"
            loaded[arch] = (model, tokenizer)
        return loaded[arch]

    return load


def float32_argument() -> dict:
    """fp32 for from_pretrained: `dtype` in transformers 5, `torch_dtype` before (so this suite also runs on 4.3x)."""
    import torch
    import transformers

    name = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    return {name: torch.float32}


def _make_input(body: bytes | str | dict | None, properties: dict | None = None):
    """A djl_python Input carrying `body` as its "data" content, as DJL builds it from an HTTP request."""
    from djl_python import Input

    request = Input()
    request.properties = dict(properties or {})
    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    request.content.add(key="data", value=body)
    return request


def _read_output(output) -> tuple[int, object]:
    """(status code, decoded JSON body) of a djl_python Output."""
    return output.code, json.loads(bytes(output.content.value_at(0)).decode())


@pytest.fixture
def s3(monkeypatch):
    """An in-process moto S3 with one empty bucket; yields a boto3 client."""
    import boto3
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=TEST_BUCKET)
        yield client


def _upload_folder(client, folder: Path, prefix: str, bucket: str = TEST_BUCKET) -> dict[str, bytes]:
    """Upload every file of `folder` under `prefix`; return {relative path: content}."""
    uploaded = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            relative = path.relative_to(folder).as_posix()
            client.put_object(Bucket=bucket, Key=prefix + relative, Body=path.read_bytes())
            uploaded[relative] = path.read_bytes()
    return uploaded


@pytest.fixture(scope="session")
def make_input():
    return _make_input


@pytest.fixture(scope="session")
def read_output():
    return _read_output


@pytest.fixture(scope="session")
def upload_folder():
    return _upload_folder
