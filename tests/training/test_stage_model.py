"""stage_model.py: copies what loading needs, in one weights format. The hub client is stood in for by a local
repository (no downloads in tests); what is tested is the script's choice of files and its errors."""

from __future__ import annotations

import fnmatch
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
import stage_model


class LocalHub:
    """list_repo_files / snapshot_download over a folder, with huggingface_hub's signatures."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.calls: list[tuple] = []

    def list_repo_files(self, repo_id: str, revision: str = "main") -> list[str]:
        return sorted(str(p.relative_to(self.repo)) for p in self.repo.rglob("*") if p.is_file())

    def snapshot_download(self, repo_id: str, revision: str, local_dir: str, allow_patterns: list[str]) -> str:
        self.calls.append((repo_id, revision, tuple(allow_patterns)))
        for name in self.list_repo_files(repo_id):
            if any(fnmatch.fnmatch(Path(name).name, p) for p in allow_patterns):
                target = Path(local_dir) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(self.repo / name, target)
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True)  # as the real client leaves behind
        return local_dir


def make_repo(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * (1000 if "model" in name else 10))
    return root


HF_REPO = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
           "pytorch_model.bin", "flax_model.msgpack", "tf_model.h5", "README.md"]  # fmt: skip


def test_copies_configs_tokenizer_and_safetensors_only(tmp_path):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    staged = stage_model.stage("EleutherAI/gpt-j-6b", "main", tmp_path / "out", hub=hub)
    assert sorted(p.name for p in staged) == [
        "config.json", "generation_config.json", "merges.txt", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
    ]  # fmt: skip
    assert not (tmp_path / "out" / ".cache").exists()
    assert hub.calls == [("EleutherAI/gpt-j-6b", "main", ("*.json", "*.txt", "*.model", "*.tiktoken", "*.safetensors"))]


def test_falls_back_to_pytorch_bin_when_there_are_no_safetensors(tmp_path):
    repo = [f for f in HF_REPO if "safetensors" not in f]
    staged = stage_model.stage("old/model", "v1", tmp_path / "out", hub=LocalHub(make_repo(tmp_path / "repo", repo)))
    assert "pytorch_model.bin" in {p.name for p in staged}
    assert "flax_model.msgpack" not in {p.name for p in staged}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["README.md", "model.safetensors"], "has no config.json"),
        (["config.json", "tf_model.h5"], "neither \\*.safetensors nor pytorch_model\\*.bin"),
    ],
)
def test_repositories_without_a_loadable_model_are_refused(tmp_path, files, message):
    with pytest.raises(stage_model.StagingError, match=message):
        stage_model.stage("some/repo", "main", tmp_path / "out", hub=LocalHub(make_repo(tmp_path / "repo", files)))
