"""stage_model.py: resolves the revision to one commit, copies what loading needs from exactly that commit (configs,
tokenizer, safetensors; PyTorch pickles only when allowed), or a pre-sharded DeepSpeed checkpoint with every file its
ds_inference_config.json lists, into <prefix><commit>/, and writes the commit's record after the last file (and, when
following main, main's record after that). The hub client is stood in for by a local repository (no downloads in
tests), matching files with huggingface_hub's own filter; S3 is moto's. What is tested is the script's choice of
commit and files, the order of its writes, and its errors."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest
from huggingface_hub.hf_api import BlobLfsInfo, RepoSibling
from huggingface_hub.utils import filter_repo_objects
from moto import mock_aws

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
import stage_model
from finetune.staged import MANIFEST

MAIN = "47e169305d2e8376be1d31e765533382721b2cc1"  # what the stand-in's main points at (any 40-hex value)
OTHER = "0123456789abcdef0123456789abcdef01234567"
BUCKET = "models"
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".msgpack", ".h5")  # stored with Git LFS by the stand-in hub


def git_hash(data: bytes) -> str:
    """`git hash-object`: the blob id the hub reports for a file git stores itself (huggingface_hub.utils.sha)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class LocalHub:
    """model_info / list_repo_files / hf_hub_download / snapshot_download over a folder, with huggingface_hub's
    signatures and its pattern matching (filter_repo_objects: fnmatch on the path in the repository, `*` crossing
    folders). `refs` maps branch names to commits; a commit resolves to itself when the repository has it, as the hub
    answers; anything else is the hub's RevisionNotFoundError. With `gated_for`, the repository is gated: every call
    without that token is the hub's GatedRepoError, as huggingface_hub raises it for a 401/403 on a gated repository;
    `tokens` records the token each call carried."""

    def __init__(
        self,
        repo: Path,
        refs: dict[str, str] | None = None,
        commits: tuple[str, ...] = (),
        gated_for: str | None = None,
    ) -> None:
        self.repo = repo
        self.refs = {"main": MAIN} if refs is None else refs
        self.commits = {*self.refs.values(), *commits}
        self.calls: list[tuple] = []
        self.gated_for = gated_for
        self.tokens: list[tuple[str, str | None]] = []

    def _gate(self, call: str, token: str | None) -> None:
        from huggingface_hub.errors import GatedRepoError

        self.tokens.append((call, token))
        if self.gated_for is not None and token != self.gated_for:
            response = SimpleNamespace(headers={}, request=None, status_code=401)
            raise GatedRepoError("401 Client Error: Cannot access gated repo", response=response)

    def _commit(self, revision: str) -> str:
        commit = self.refs.get(revision, revision)
        if commit not in self.commits:
            raise LookupError(f"revision {revision} not found")  # the real client: RevisionNotFoundError
        return commit

    def model_info(
        self, repo_id: str, *, revision: str | None = None, files_metadata: bool = False, token: str | None = None
    ) -> SimpleNamespace:
        """With files_metadata, each file's siblings entry as huggingface_hub's RepoSibling holds it: an LFS file
        (weights, here) with lfs.sha256 of its bytes, a small one with blob_id, its git object id."""
        self._gate("model_info", token)
        commit = self._commit(revision or "main")
        if not files_metadata:
            return SimpleNamespace(id=repo_id, sha=commit, siblings=None)
        siblings = []
        for name in self.list_repo_files(repo_id, revision=commit, token=token):
            data = (self.repo / name).read_bytes()
            if name.endswith(LFS_SUFFIXES):
                lfs = BlobLfsInfo(size=len(data), sha256=hashlib.sha256(data).hexdigest(), pointer_size=130)
                siblings.append(RepoSibling(rfilename=name, size=len(data), blob_id="0" * 40, lfs=lfs))
            else:
                siblings.append(RepoSibling(rfilename=name, size=len(data), blob_id=git_hash(data)))
        return SimpleNamespace(id=repo_id, sha=commit, siblings=siblings)

    def list_repo_files(self, repo_id: str, *, revision: str | None = None, token: str | None = None) -> list[str]:
        self._gate("list_repo_files", token)
        self._commit(revision or "main")
        return sorted(p.relative_to(self.repo).as_posix() for p in self.repo.rglob("*") if p.is_file())

    def hf_hub_download(
        self, repo_id: str, filename: str, *, revision: str, local_dir: str, token: str | None = None
    ) -> str:
        self._gate("hf_hub_download", token)
        if filename not in self.list_repo_files(repo_id, revision=revision, token=token):
            raise FileNotFoundError(f"{repo_id}@{revision} has no {filename}")  # the real client: EntryNotFoundError
        return self._copy(filename, local_dir)

    def snapshot_download(
        self,
        repo_id: str,
        *,
        revision: str,
        local_dir: str,
        allow_patterns: list[str],
        ignore_patterns=None,
        token: str | None = None,
    ) -> str:
        self._gate("snapshot_download", token)
        self.calls.append((repo_id, revision, tuple(allow_patterns), tuple(ignore_patterns or ())))
        files = self.list_repo_files(repo_id, revision=revision, token=token)
        for name in filter_repo_objects(files, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns):
            self._copy(name, local_dir)
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)  # as the real client leaves
        return local_dir

    def _copy(self, name: str, local_dir: str) -> str:
        target = Path(local_dir) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.repo / name, target)
        return str(target)


def test_the_stand_in_hub_takes_what_huggingface_hub_takes():
    import huggingface_hub

    for name in ("model_info", "list_repo_files", "hf_hub_download", "snapshot_download"):
        real = inspect.signature(getattr(huggingface_hub, name)).parameters
        ours = list(inspect.signature(getattr(LocalHub, name)).parameters.values())[1:]  # without self
        for parameter in ours:
            assert parameter.name in real and real[parameter.name].kind == parameter.kind, (name, parameter.name)
    assert "sha" in {f.name for f in dataclasses.fields(huggingface_hub.ModelInfo)}


def make_repo(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * (1000 if "model" in name else 10))
    return root


HF_REPO = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
           "pytorch_model.bin", "flax_model.msgpack", "tf_model.h5", "README.md"]  # fmt: skip
PICKLE_REPO = [f for f in HF_REPO if "safetensors" not in f]


def test_copies_configs_tokenizer_and_safetensors_only(tmp_path):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    staged = stage_model.stage("EleutherAI/gpt-j-6b", MAIN, tmp_path / "out", hub=hub)
    assert sorted(p.name for p in staged) == [
        "config.json", "generation_config.json", "merges.txt", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
    ]  # fmt: skip
    assert not (tmp_path / "out" / ".cache").exists()
    assert hub.calls == [
        (
            "EleutherAI/gpt-j-6b",
            MAIN,
            ("*.json", "*.txt", "*.model", "*.tiktoken", "*.safetensors"),
            (MANIFEST, "ds_inference_config.json"),
        )
    ]


def test_refuses_a_repository_whose_weights_are_only_pickles_unless_allowed(tmp_path):
    hub = LocalHub(make_repo(tmp_path / "repo", PICKLE_REPO))
    with pytest.raises(stage_model.StagingError, match=r"no \*\.safetensors weights, only PyTorch pickles "
                       r"\(pytorch_model\.bin\).*can run code.*allow_pickle: true"):  # fmt: skip
        stage_model.stage("old/model", MAIN, tmp_path / "out", hub=hub)
    assert hub.calls == [] and not (tmp_path / "out").exists()  # refused before any download
    staged = stage_model.stage("old/model", MAIN, tmp_path / "out", hub=hub, allow_pickle=True)
    assert "pytorch_model.bin" in {p.name for p in staged}
    assert "flax_model.msgpack" not in {p.name for p in staged}


def test_prefers_safetensors_even_when_pickles_are_allowed(tmp_path):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    staged = stage_model.stage("EleutherAI/gpt-j-6b", MAIN, tmp_path / "out", hub=hub, allow_pickle=True)
    assert not any(p.suffix == ".bin" for p in staged)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["README.md", "model.safetensors"], "has no config.json"),
        (["config.json", "tf_model.h5"], "neither \\*.safetensors nor pytorch_model\\*.bin"),
    ],
)
def test_repositories_without_a_loadable_model_are_refused(tmp_path, files, message):
    with pytest.raises(stage_model.StagingError, match=message):
        stage_model.stage("some/repo", MAIN, tmp_path / "out", hub=LocalHub(make_repo(tmp_path / "repo", files)))


# --- which commit ------------------------------------------------------------------------------------------------


def test_resolves_a_branch_to_its_commit():
    hub = LocalHub(Path("."), refs={"main": MAIN})
    assert stage_model.resolve(hub, "EleutherAI/gpt-j-6b", "main") == MAIN


def test_a_pinned_commit_is_staged_only_if_the_hub_resolves_it_to_itself():
    hub = LocalHub(Path("."), commits=(OTHER,))
    assert stage_model.resolve(hub, "m/x", OTHER) == OTHER

    class Rewriting(LocalHub):  # a hub (or a proxy in front of it) answering with another commit
        def model_info(self, repo_id, *, revision=None, token=None):
            return SimpleNamespace(id=repo_id, sha=MAIN)

    with pytest.raises(stage_model.StagingError, match=rf"m/x@{OTHER} resolves to commit {MAIN}"):
        stage_model.resolve(Rewriting(Path(".")), "m/x", OTHER)


@pytest.mark.parametrize("revision", ["refs/pr/7", "refs/convert/parquet", "aa00a66", "main; rm -rf /", ""], ids=str)
def test_refuses_revisions_that_are_neither_a_commit_nor_a_branch(revision):
    # Anyone can open a pull request on the hub, and refs/pr/<n> serves its files: never stage one. A short commit
    # could match several.
    with pytest.raises(stage_model.StagingError, match="neither a full 40-hex commit nor a branch name"):
        stage_model.resolve(LocalHub(Path(".")), "m/x", revision)


# --- publishing into the models bucket ---------------------------------------------------------------------------


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield Recording(client)


class Recording:
    """moto's S3 client, recording the keys written, in order."""

    def __init__(self, client) -> None:
        self.client = client
        self.writes: list[str] = []

    def upload_file(self, filename, bucket, key, **kwargs):
        self.client.upload_file(filename, bucket, key, **kwargs)
        self.writes.append(key)

    def put_object(self, **kwargs):
        self.client.put_object(**kwargs)
        self.writes.append(kwargs["Key"])

    def __getattr__(self, name):
        return getattr(self.client, name)

    def stored(self) -> set[str]:
        return {o["Key"] for o in self.client.list_objects_v2(Bucket=BUCKET).get("Contents", [])}

    def record(self, key: str) -> tuple[dict, dict]:
        obj = self.client.get_object(Bucket=BUCKET, Key=key)
        return json.loads(obj["Body"].read()), obj["Metadata"]


def run(hub, s3, tmp_path, revision="main", **kwargs):
    return stage_model.run(
        "EleutherAI/gpt-j-6b",
        revision,
        f"s3://{BUCKET}/pretrained/gpt-j-6b/",
        tmp_path / "work",
        hub=hub,
        s3=s3,
        **kwargs,
    )


def test_following_main_stages_its_commit_and_writes_the_records_after_every_file(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    record = run(hub, s3, tmp_path)
    prefix = "pretrained/gpt-j-6b/"
    files = [k for k in s3.writes if k.startswith(f"{prefix}{MAIN}/")]
    assert sorted(k.removeprefix(f"{prefix}{MAIN}/") for k in files) == sorted([*record["files"], MANIFEST])
    assert files[-1] == f"{prefix}{MAIN}/{MANIFEST}"  # after the files it describes
    assert "model-00001-of-00002.safetensors" in record["files"]
    # The commit's record once every file is there, main's record last: a reader that reads a record first never
    # sees a staging that stopped half-way.
    assert s3.writes == [*files, f"{prefix}{MAIN}.json", f"{prefix}main.json"]
    assert hub.calls[0][1] == MAIN  # downloaded by commit, not by branch: a push meanwhile changes nothing
    body, metadata = s3.record(f"{prefix}main.json")
    assert metadata == {"commit": MAIN, "weights": "safetensors"}  # what the endpoint's deploy-time lookup reads
    assert (body["model_id"], body["commit"], body["revision"], body["weights"]) == (
        "EleutherAI/gpt-j-6b",
        MAIN,
        "main",
        "safetensors",
    )
    assert s3.record(f"{prefix}{MAIN}.json")[1] == metadata


def test_a_pinned_commit_writes_its_own_record_and_leaves_main_alone(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO), commits=(OTHER,))
    run(hub, s3, tmp_path)
    run(hub, s3, tmp_path / "second", revision=OTHER)
    prefix = "pretrained/gpt-j-6b/"
    assert s3.record(f"{prefix}main.json")[1]["commit"] == MAIN
    assert s3.record(f"{prefix}{OTHER}.json")[1]["commit"] == OTHER
    # Staging another commit never touched the first one's files.
    first = {k for k in s3.stored() if k.startswith(f"{prefix}{MAIN}/")}
    assert first and not any(k.startswith(f"{prefix}{MAIN}/") for k in s3.writes[len(first) + 2 :])


def test_main_moves_to_a_new_commit_without_touching_the_one_served_before(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    run(hub, s3, tmp_path)
    before = {k: s3.client.head_object(Bucket=BUCKET, Key=k)["ETag"] for k in s3.stored() if MAIN in k}
    hub.refs["main"] = OTHER
    hub.commits.add(OTHER)
    run(hub, s3, tmp_path / "second")
    assert s3.record("pretrained/gpt-j-6b/main.json")[1]["commit"] == OTHER
    assert {k: s3.client.head_object(Bucket=BUCKET, Key=k)["ETag"] for k in s3.stored() if MAIN in k} == before


def test_a_commit_already_staged_is_not_downloaded_again(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    run(hub, s3, tmp_path)
    written = len(s3.writes)
    run(hub, s3, tmp_path / "again")
    assert len(hub.calls) == 1  # one download in all
    assert s3.writes[written:] == ["pretrained/gpt-j-6b/main.json"]  # only main's record, written again


@pytest.mark.bad_input("s3_fault")
def test_an_upload_that_fails_half_way_leaves_no_record_and_main_where_it_was(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    run(hub, s3, tmp_path)
    hub.refs["main"] = OTHER
    hub.commits.add(OTHER)
    uploads = []

    def failing(filename, bucket, key, **kwargs):
        if len(uploads) == 3:
            raise ConnectionError("connection reset")
        uploads.append(key)
        s3.client.upload_file(filename, bucket, key, **kwargs)

    s3.upload_file = failing
    with pytest.raises(ConnectionError):
        run(hub, s3, tmp_path / "second")
    assert not any(k.startswith(f"pretrained/gpt-j-6b/{OTHER}.json") for k in s3.stored())
    assert s3.record("pretrained/gpt-j-6b/main.json")[1]["commit"] == MAIN  # readers still get the whole old commit


def test_a_record_of_pickles_is_not_reused_when_pickles_are_not_allowed(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", PICKLE_REPO))
    assert run(hub, s3, tmp_path, revision=MAIN, allow_pickle=True)["weights"] == "pickle"
    with pytest.raises(stage_model.StagingError, match=r"staged with PyTorch pickle weights.*allow_pickle"):
        run(hub, s3, tmp_path / "again")


def test_pickles_are_staged_only_from_a_pinned_commit(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", PICKLE_REPO))
    with pytest.raises(
        stage_model.StagingError, match=r"--allow_pickle with --revision 'main': .*pinned 40-hex commit"
    ):
        run(hub, s3, tmp_path, revision="main", allow_pickle=True)
    assert s3.writes == [] and hub.calls == []


def staged_manifest(s3, commit=MAIN) -> dict:
    body = s3.client.get_object(Bucket=BUCKET, Key=f"pretrained/gpt-j-6b/{commit}/{MANIFEST}")["Body"].read()
    return json.loads(body)


def test_records_each_files_sha256_in_the_record_and_in_the_manifest_inside_the_folder(tmp_path, s3):
    repo = make_repo(tmp_path / "repo", PICKLE_REPO)
    record = run(LocalHub(repo), s3, tmp_path, revision=MAIN, allow_pickle=True)
    expected = {name: hashlib.sha256((repo / name).read_bytes()).hexdigest() for name in record["files"]}
    assert "pytorch_model.bin" in expected and "config.json" in expected
    assert record["sha256"] == expected
    assert s3.record(f"pretrained/gpt-j-6b/{MAIN}.json")[0]["sha256"] == expected
    written = staged_manifest(s3)
    assert (written["model_id"], written["commit"], written["sha256"], written["files"]) == (
        "EleutherAI/gpt-j-6b",
        MAIN,
        expected,
        record["files"],
    )


class Altering(LocalHub):
    """A hub (or whatever sits between it and the job) that serves other bytes than its metadata describes."""

    def __init__(self, repo: Path, altered: str) -> None:
        super().__init__(repo)
        self.altered = altered

    def _copy(self, name: str, local_dir: str) -> str:
        target = super()._copy(name, local_dir)
        if name == self.altered:
            Path(target).write_bytes(Path(target).read_bytes()[:-1] + b"!")  # same size, other bytes
        return target


@pytest.mark.parametrize(
    ("altered", "kind"), [("pytorch_model.bin", "sha256"), ("config.json", "git-sha1")], ids=["lfs", "git"]
)
def test_a_download_whose_bytes_differ_from_the_hubs_hash_is_refused_and_nothing_is_recorded(
    tmp_path, s3, altered, kind
):
    hub = Altering(make_repo(tmp_path / "repo", PICKLE_REPO), altered)
    with pytest.raises(stage_model.StagingError, match=rf"the downloaded {altered} has {kind} [0-9a-f]{{40,64}}, but "):
        run(hub, s3, tmp_path, revision=MAIN, allow_pickle=True)
    assert s3.writes == []  # nothing uploaded, no record


def test_a_repositorys_own_manifest_is_never_copied(tmp_path, s3):
    repo = make_repo(tmp_path / "repo", HF_REPO)
    (repo / MANIFEST).write_text(json.dumps({"files": {}, "sha256": {}}))
    run(LocalHub(repo), s3, tmp_path)
    written = staged_manifest(s3)
    assert written["sha256"]["config.json"] == hashlib.sha256((repo / "config.json").read_bytes()).hexdigest()
    assert MANIFEST not in written["files"]


def test_a_record_of_another_repository_is_never_overwritten(tmp_path, s3):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO))
    run(hub, s3, tmp_path)
    with pytest.raises(stage_model.StagingError, match=r"holds the record of EleutherAI/gpt-j-6b@"):
        stage_model.run("someone/else", "main", f"s3://{BUCKET}/pretrained/gpt-j-6b/", tmp_path / "w", hub=hub, s3=s3)


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


def stage_ds(tmp_path, hub, allow_pickle=True):
    return stage_model.stage(
        "microsoft/bloom-deepspeed-inference-int8",
        MAIN,
        tmp_path / "out",
        hub=hub,
        deepspeed=(8, "int8"),
        allow_pickle=allow_pickle,
    )


def test_stages_a_deepspeed_checkpoint_with_every_file_its_description_lists(tmp_path):
    staged = stage_ds(tmp_path, LocalHub(make_ds_repo(tmp_path / "repo")))
    names = {p.relative_to(tmp_path / "out").as_posix() for p in staged}
    assert {"ds_inference_config.json", "config.json", "tokenizer.json", "non-tp.pt", *TP_FILES} <= names
    assert "README.md" not in names
    assert not (tmp_path / "out" / ".cache").exists()


def test_a_deepspeed_checkpoint_of_pickled_shards_needs_pickles_allowed(tmp_path):
    hub = LocalHub(make_ds_repo(tmp_path / "repo"))
    with pytest.raises(stage_model.StagingError, match=r"lists 65 PyTorch pickle file\(s\) \(tp_00_00\.pt, "
                       r".*can run code.*allow_pickle: true"):  # fmt: skip
        stage_ds(tmp_path, hub, allow_pickle=False)
    assert hub.calls == []


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
        stage_ds(tmp_path, hub)


def test_a_deepspeed_checkpoint_needs_its_description(tmp_path):
    files = [f for f in DS_REPO if f != "ds_inference_config.json"]
    with pytest.raises(stage_model.StagingError, match=r"has no ds_inference_config\.json at its top level"):
        stage_ds(tmp_path, LocalHub(make_repo(tmp_path / "repo", files)))


def test_hugging_face_staging_never_copies_a_deepspeed_description_without_its_shards(tmp_path):
    # The handler loads through ds_inference_config.json whenever the folder has one.
    hub = LocalHub(make_ds_repo(tmp_path / "repo", files=HF_REPO))
    staged = stage_model.stage("some/model", MAIN, tmp_path / "out", hub=hub)
    assert "ds_inference_config.json" not in {p.name for p in staged}
    assert "config.json" in {p.name for p in staged}


def test_main_passes_what_the_pipeline_step_says(tmp_path, monkeypatch):
    seen = {}

    def fake_run(
        model_id,
        revision,
        destination,
        output_dir,
        *,
        hub,
        s3,
        deepspeed=None,
        allow_pickle=False,
        token=None,
        token_source=None,
        readers=None,
    ):
        seen.update(model_id=model_id, revision=revision, destination=destination, deepspeed=deepspeed,
                    allow_pickle=allow_pickle, region=s3.meta.region_name, readers=readers)  # fmt: skip
        assert token is None  # no --hf_token_secret: no token, and no call to Secrets Manager
        return {}

    monkeypatch.setattr(stage_model, "run", fake_run)
    argv = ["--model_id", "m/x", "--revision", "main", "--destination", "s3://models/pretrained/x/", "--region",
            "eu-west-1", "--output_dir", str(tmp_path)]  # fmt: skip
    assert stage_model.main([*argv, "--deepspeed_tp_size", "8", "--deepspeed_dtype", "int8", "--allow_pickle",
                             "--readers", "transformers=4.39.0,tokenizers=0.15.2"]) == 0  # fmt: skip
    assert seen == {"model_id": "m/x", "revision": "main", "destination": "s3://models/pretrained/x/",
                    "deepspeed": (8, "int8"), "allow_pickle": True, "region": "eu-west-1",
                    "readers": {"transformers": (4, 39, 0), "tokenizers": (0, 15, 2)}}  # fmt: skip
    assert stage_model.main(argv) == 0 and seen["deepspeed"] is None and seen["allow_pickle"] is False
    assert seen["readers"] == {}
    with pytest.raises(SystemExit):
        stage_model.main([*argv, "--readers", "transformers=latest"])
    with pytest.raises(SystemExit):
        stage_model.main([*argv, "--deepspeed_tp_size", "8"])  # both or neither
    with pytest.raises(SystemExit):
        stage_model.main([*argv[:4], "--destination", "s3://models/pretrained/x", *argv[6:]])  # a prefix ends with '/'


# --- gated repositories: the token from Secrets Manager -----------------------------------------------------------

TOKEN = "hf_" + "Zq8" * 11  # what a Hugging Face token looks like; any value the stand-in hub checks for
SECRET = "llm-platform/dev/huggingface-token"
GATED_ARGV = ["--model_id", "meta-llama/Llama-3.1-8B", "--revision", "main", "--destination",
              f"s3://{BUCKET}/pretrained/llama-3.1-8b/", "--region", "us-east-1"]  # fmt: skip


@pytest.fixture
def aws():
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        session.client("s3").create_bucket(Bucket=BUCKET)
        session.client("secretsmanager").create_secret(Name=SECRET, Description="created empty, as the stack does")
        yield session


def test_a_gated_repository_is_staged_with_the_token_from_its_secret_and_the_token_is_never_printed(
    tmp_path, aws, capsys
):
    aws.client("secretsmanager").put_secret_value(SecretId=SECRET, SecretString=TOKEN + "\n")
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO), gated_for=TOKEN)
    argv = [*GATED_ARGV, "--hf_token_secret", SECRET, "--output_dir", str(tmp_path / "out")]
    assert stage_model.main(argv, hub=hub, session=aws) == 0
    # Every hub call carried the token: resolving the commit, listing the files, the download.
    assert {call for call, _ in hub.tokens} == {"model_info", "list_repo_files", "snapshot_download"}
    assert {token for _, token in hub.tokens} == {TOKEN}
    keys = {o["Key"] for o in aws.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert f"pretrained/llama-3.1-8b/{MAIN}.json" in keys and "pretrained/llama-3.1-8b/main.json" in keys
    out = capsys.readouterr()
    assert SECRET in out.out  # the log says which secret, never what is in it
    assert TOKEN not in out.out + out.err and TOKEN[3:] not in out.out + out.err


def test_a_gated_repository_without_a_token_fails_with_the_config_key_to_set(tmp_path, aws, capsys):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO), gated_for=TOKEN)
    assert stage_model.main([*GATED_ARGV, "--output_dir", str(tmp_path / "out")], hub=hub, session=aws) == 2
    err = capsys.readouterr().err
    assert "meta-llama/Llama-3.1-8B is gated" in err and "huggingface_token_secret" in err
    assert hub.tokens == [("model_info", None)]  # refused before anything is listed or downloaded


def test_a_token_without_access_and_a_secret_without_a_value_each_say_what_to_do(tmp_path, aws, capsys):
    hub = LocalHub(make_repo(tmp_path / "repo", HF_REPO), gated_for=TOKEN)
    argv = [*GATED_ARGV, "--hf_token_secret", SECRET, "--output_dir", str(tmp_path / "out")]
    # The stack creates the secret without a value: the first staging before put-secret-value says how to put it.
    assert stage_model.main(argv, hub=hub, session=aws) == 2
    err = capsys.readouterr().err
    assert f"aws secretsmanager put-secret-value --secret-id {SECRET}" in err
    assert hub.tokens == []  # the hub is not asked anything without the token
    aws.client("secretsmanager").put_secret_value(SecretId=SECRET, SecretString="hf_of_an_account_without_access")
    assert stage_model.main(argv, hub=hub, session=aws) == 2
    err = capsys.readouterr().err
    assert f"the token in secret {SECRET} has no access" in err and "accept the model's terms" in err
    assert "hf_of_an_account_without_access" not in err
