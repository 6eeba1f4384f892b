"""Fixtures for the local endpoint tests: a tiny model folder and an in-process moto S3."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

if not os.environ.get("DS_ACCELERATOR"):
    os.environ["DS_ACCELERATOR"] = "cpu"

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and far faster than two when other processes share the 2 cores."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_gptj_dir(tmp_path_factory) -> Path:
    from local.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-gptj"), arch="gptj")


@pytest.fixture
def moto_s3(monkeypatch):
    """An in-process moto S3 with the bucket `local-endpoint-test`; yields a boto3 client."""
    import boto3
    from moto import mock_aws

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="local-endpoint-test")
        yield client
