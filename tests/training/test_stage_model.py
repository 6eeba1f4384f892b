"""stage_model.py: copies what loading needs, in one weights format, or a pre-sharded DeepSpeed checkpoint with every
file its ds_inference_config.json lists. The hub client is stood in for by a local repository (no downloads in
tests), matching files with huggingface_hub's own filter; what is tested is the script's choice of files and its
errors."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from huggingface_hub.utils import filter_repo_objects

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
import stage_model


class LocalHub:
    """list_repo_files / hf_hub_download / snapshot_download over a folder, with huggingface_hub's signatures and its
    pattern matching (filter_repo_objects: fnmatch on the path in the repository, `*` crossing folders)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.calls: list[tuple] = []

    def list_repo_files(self, repo_id: str, revision: str = "main") -> list[str]:
        return sorted(p.relative_to(self.repo).as_posix() for p in self.repo.rglob("*") if p.is_file())

    def hf_hub_download(self, repo_id: str, filename: str, *, revision: str, local_dir: str) -> str:
        if filename not in self.list_repo_files(repo_id):
            raise FileNotFoundError(f"{repo_id}@{revision} has no {filename}")  # the real client: EntryNotFoundError
        return self._copy(filename, local_dir)

    def snapshot_download(
        self, repo_id: str, *, revision: str, local_dir: str, allow_patterns: list[str], ignore_patterns=None
    ) -> str:
        self.calls.append((repo_id, revision, tuple(allow_patterns), tuple(ignore_patterns or ())))
        files = self.list_repo_files(repo_id)
        for name in filter_repo_objects(files, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns):
            self._copy(name, local_dir)
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)  # as the real client leaves
        return local_dir

    def _copy(self, name: str, local_dir: str) -> str:
        target = Path(local_dir) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.repo / name, target)
        return str(target)


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
    assert hub.calls == [
        (
            "EleutherAI/gpt-j-6b",
            "main",
            ("*.json", "*.txt", "*.model", "*.tiktoken", "*.safetensors"),
            ("ds_inference_config.json",),
        )
    ]


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


# --- pre-sharded DeepSpeed inference checkpoints -----------------------------------------------------------------

# As DeepSpeed writes it (deepspeed@v0.12.6:deepspeed/module_inject/replace_module.py, save_mp_checkpoint_path) and as
# microsoft/bloom-deepspeed-inference-int8 ships it: 8 ranks x 8 parts, one non-tp file, no base_dir.
TP_FILES = [f"tp_{rank:0>2d}_{part:0>2d}.pt" for part in range(8) for rank in range(8)]
DS_DESCRIPTION = {
    "type": "BLOOM",
    "checkpoints": {"non_tp": ["non-tp.pt"], "tp": TP_FILES},
    "version": 1.0,
    "parallelization": "tp",
    "tp_size": 8,
    "dtype": "int8",
}
DS_REPO = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "README.md",
           "BLOOM_ds-inference_config.json", "non-tp.pt", *TP_FILES]  # fmt: skip


def make_ds_repo(root: Path, description: dict | None = None, files: list[str] = DS_REPO) -> Path:
    repo = make_repo(root, files)
    (repo / "ds_inference_config.json").write_text(json.dumps(DS_DESCRIPTION if description is None else description))
    return repo


def test_stages_a_deepspeed_checkpoint_with_every_file_its_description_lists(tmp_path):
    hub = LocalHub(make_ds_repo(tmp_path / "repo"))
    staged = stage_model.stage(
        "microsoft/bloom-deepspeed-inference-int8", "aa00a66", tmp_path / "out", hub=hub, deepspeed=(8, "int8")
    )
    names = {p.relative_to(tmp_path / "out").as_posix() for p in staged}
    assert {"ds_inference_config.json", "config.json", "tokenizer.json", "non-tp.pt", *TP_FILES} <= names
    assert "README.md" not in names
    assert not (tmp_path / "out" / ".cache").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"checkpoints": {"non_tp": ["non-tp.pt"], "tp": [*TP_FILES[:-1], "tp_07_08.pt"]}},
         r"lists 1 file\(s\) the repository does not have: tp_07_08\.pt"),
        ({"tp_size": 4}, r"split for 4 tensor-parallel ranks, not 8"),
        ({"mp_size": 4}, r"split for 4 tensor-parallel ranks, not 8"),  # DeepSpeed lets mp_size override tp_size
        ({"dtype": "float16"}, r"holds float16 weights, not int8"),
        ({"dtype": None}, r"states no dtype"),
        ({"base_dir": "/data/bloom-int8"}, r"sets base_dir '/data/bloom-int8'"),
        ({"parallelization": "pp"}, r"parallelization 'pp'"),
        ({"type": "Megatron"}, r"type 'Megatron'"),
        ({"version": None}, r"has no version"),
        ({"checkpoints": {"tp": TP_FILES[:60]}}, r"60 tensor-parallel files do not divide into 8 ranks"),
    ],
    ids=["missing-shard", "other-tp", "mp_size", "other-dtype", "no-dtype", "base_dir", "pp", "type", "version",
         "uneven"],
)  # fmt: skip
def test_refuses_a_deepspeed_checkpoint_it_cannot_serve_as_cataloged(tmp_path, change, message):
    description = {k: v for k, v in {**DS_DESCRIPTION, **change}.items() if v is not None}
    hub = LocalHub(make_ds_repo(tmp_path / "repo", description))
    with pytest.raises(stage_model.StagingError, match=message):
        stage_model.stage(
            "microsoft/bloom-deepspeed-inference-int8", "main", tmp_path / "out", hub=hub, deepspeed=(8, "int8")
        )


def test_a_deepspeed_checkpoint_needs_its_description(tmp_path):
    files = [f for f in DS_REPO if f != "ds_inference_config.json"]
    with pytest.raises(stage_model.StagingError, match=r"has no ds_inference_config\.json at its top level"):
        stage_model.stage(
            "x/y", "main", tmp_path / "out", hub=LocalHub(make_repo(tmp_path / "repo", files)), deepspeed=(8, "int8")
        )


def test_hugging_face_staging_never_copies_a_deepspeed_description_without_its_shards(tmp_path):
    # The handler loads through ds_inference_config.json whenever the folder has one.
    hub = LocalHub(make_ds_repo(tmp_path / "repo", files=HF_REPO))
    staged = stage_model.stage("some/model", "main", tmp_path / "out", hub=hub)
    assert "ds_inference_config.json" not in {p.name for p in staged}
    assert "config.json" in {p.name for p in staged}


def test_main_passes_the_deepspeed_expectations(tmp_path, monkeypatch):
    seen = {}

    def fake_stage(model_id, revision, output_dir, hub=None, deepspeed=None):
        seen.update(model_id=model_id, revision=revision, deepspeed=deepspeed)
        return []

    monkeypatch.setattr(stage_model, "stage", fake_stage)
    argv = ["--model_id", "m/x", "--revision", "abc", "--output_dir", str(tmp_path)]
    assert stage_model.main([*argv, "--deepspeed_tp_size", "8", "--deepspeed_dtype", "int8"]) == 0
    assert seen == {"model_id": "m/x", "revision": "abc", "deepspeed": (8, "int8")}
    assert stage_model.main(argv) == 0 and seen["deepspeed"] is None
    with pytest.raises(SystemExit):
        stage_model.main([*argv, "--deepspeed_tp_size", "8"])  # both or neither
