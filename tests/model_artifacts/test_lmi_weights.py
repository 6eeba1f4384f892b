"""Weights from S3 (moto, and the s5cmd stand-in): a download is complete only when every object is on disk as S3
holds it now (ETags, not sizes), resumable, verified before DONE, and done once per host."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter

import lmi_weights
import pytest
from botocore.exceptions import ClientError
from lmi_weights import DONE_MARKER, MANIFEST, WeightsDownloadError, fetch_weights, local_weights_dir, resolve_weights
from s3_standins import FakeS3, install_s5cmd, s5cmd_copied_keys, s5cmd_environment, s5cmd_invocations

BUCKET = "lmi-test-weights"  # created by the s3 fixture
PREFIX = "models/tiny/"
URI = f"s3://{BUCKET}/{PREFIX}"
FILES = {
    "config.json": b'{"model_type": "gptj"}',
    "tokenizer.json": b"{}" * 300,
    "model-00001-of-00003.safetensors": os.urandom(4096),
    "model-00002-of-00003.safetensors": os.urandom(5000),
    "model-00003-of-00003.safetensors": os.urandom(3000),
    "model.safetensors.index.json": b'{"weight_map": {}}',
    "extra/notes.txt": b"nested files keep their folder",
}
SHARD = "model-00002-of-00003.safetensors"


@pytest.fixture
def bucket(s3, tmp_path):
    fake = FakeS3(s3, BUCKET, tmp_path / "s3-mirror")
    for relative, content in FILES.items():
        fake.put(PREFIX + relative, content)
    fake.put(PREFIX, b"")  # a console "folder" marker, not a file
    fake.put("models/tiny-v2/config.json", b"{}")  # a sibling prefix, not ours
    return fake


@pytest.fixture
def fetched_keys(s3):
    """Keys of every GetObject the moto client serves (s3transfer's downloads), in call order."""
    keys: list[str] = []
    lock = threading.Lock()

    def record(params, **_):
        with lock:
            keys.append(params["Key"])

    s3.meta.events.register("before-parameter-build.s3.GetObject", record)
    return keys


@pytest.fixture
def s5cmd(tmp_path, monkeypatch, bucket):
    """The s5cmd stand-in on PATH, serving the bucket's mirror; returns its invocation log."""
    log = tmp_path / "s5cmd.log"
    install_s5cmd(tmp_path / "bin")
    for name, value in s5cmd_environment(tmp_path / "bin", bucket.mirror, log).items():
        monkeypatch.setenv(name, value)
    return log


def _fail_downloads_of(client, *keys):
    def refuse(params, **_):
        if params["Key"] in keys:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "connection reset by peer"}}, "GetObject")

    client.meta.events.register("before-parameter-build.s3.GetObject", refuse)
    return refuse


def _assert_downloaded(target, bucket, files=FILES):
    for relative, content in files.items():
        assert (target / relative).read_bytes() == content, relative
    expected = {
        "source": URI,
        "files": {
            relative: {"size": len(content), "etag": bucket.etag(PREFIX + relative)}
            for relative, content in files.items()
        },
    }
    assert json.loads((target / DONE_MARKER).read_text()) == expected
    assert json.loads((target / MANIFEST).read_text()) == expected


def test_downloads_the_prefix_verifies_it_and_then_writes_done(bucket, tmp_path):
    target = fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert target == tmp_path / BUCKET / "models" / "tiny" == local_weights_dir(URI, tmp_path)
    _assert_downloaded(target, bucket)
    assert not (tmp_path / BUCKET / "models" / "tiny-v2").exists()
    assert sorted(path.name for path in target.iterdir() if path.name.startswith(".")) == [".download.lock", MANIFEST]


@pytest.mark.parametrize("downloader", ["s3transfer", "s5cmd"])
def test_an_object_overwritten_in_s3_with_the_same_size_is_fetched_again(
    downloader, bucket, tmp_path, request, fetched_keys
):
    """Retrained weights of the same size under the same prefix: the sizes match, the ETag does not."""
    use_s5cmd = "auto" if downloader == "s5cmd" else None
    log = request.getfixturevalue("s5cmd") if downloader == "s5cmd" else None
    target = fetch_weights(URI, tmp_path / "weights", client=bucket.client, s5cmd=use_s5cmd)
    retrained = os.urandom(len(FILES[SHARD]))
    old_etag = bucket.etag(PREFIX + SHARD)
    assert bucket.put(PREFIX + SHARD, retrained) != old_etag
    fetched_keys.clear()
    if log:
        log.unlink()

    fetch_weights(URI, tmp_path / "weights", client=bucket.client, s5cmd=use_s5cmd)

    assert (target / SHARD).read_bytes() == retrained
    _assert_downloaded(target, bucket, {**FILES, SHARD: retrained})
    copied = s5cmd_copied_keys(log, BUCKET) if log else sorted(set(fetched_keys))
    assert copied == [PREFIX + SHARD]  # only what changed


def test_a_restart_lists_s3_again_and_fetches_nothing_when_nothing_changed(bucket, tmp_path, fetched_keys):
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    fetched_keys.clear()
    target = fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert fetched_keys == []
    _assert_downloaded(target, bucket)


def test_multipart_etags_are_compared_as_listed_never_as_an_md5_of_the_file(bucket, tmp_path, fetched_keys):
    """A multipart object's ETag is "<md5 of the parts' md5s>-<parts>": a restart must not take the mismatch with the
    file's MD5 for a change, and a same-size re-upload (other parts, other ETag) must be fetched again."""
    part = 5 * 2**20  # S3's smallest part but the last
    first = [os.urandom(part), os.urandom(1000)]
    etag = bucket.put_multipart(PREFIX + "big.bin", first)
    assert etag.strip('"').endswith("-2")
    target = fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert (target / "big.bin").read_bytes() == b"".join(first)

    fetched_keys.clear()
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert fetched_keys == []

    second = [os.urandom(part), os.urandom(1000)]
    assert bucket.put_multipart(PREFIX + "big.bin", second) != etag
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert set(fetched_keys) == {PREFIX + "big.bin"}
    assert (target / "big.bin").read_bytes() == b"".join(second)


def test_files_s3_no_longer_lists_are_removed_and_others_left_alone(bucket, tmp_path):
    target = fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    (target / "notes-of-the-operator.txt").write_text("not ours")
    bucket.delete(PREFIX + "model-00003-of-00003.safetensors")
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert not (target / "model-00003-of-00003.safetensors").exists()
    assert (target / "notes-of-the-operator.txt").read_text() == "not ours"
    remaining = {k: v for k, v in FILES.items() if k != "model-00003-of-00003.safetensors"}
    _assert_downloaded(target, bucket, remaining)


def test_a_failure_leaves_no_done_and_the_retry_fetches_only_what_is_missing_or_changed(bucket, tmp_path, fetched_keys):
    target = fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    changed = {SHARD: os.urandom(len(FILES[SHARD])), "tokenizer.json": b"[]" * 300}
    for relative, content in changed.items():
        bucket.put(PREFIX + relative, content)
    refuse = _fail_downloads_of(bucket.client, PREFIX + SHARD)
    fetched_keys.clear()
    with pytest.raises(WeightsDownloadError, match=r"1 of 2 downloads failed: .*connection reset by peer"):
        fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None, threads=1)
    assert not (target / DONE_MARKER).exists()
    assert (target / "tokenizer.json").read_bytes() == changed["tokenizer.json"]
    assert not list(target.glob(f"{SHARD}.*"))  # no temporary file left behind

    bucket.client.meta.events.unregister("before-parameter-build.s3.GetObject", refuse)
    fetched_keys.clear()
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None, threads=1)
    assert fetched_keys == [PREFIX + SHARD]
    _assert_downloaded(target, bucket, {**FILES, **changed})


def test_a_done_marker_over_a_damaged_folder_is_not_trusted(bucket, tmp_path, fetched_keys):
    target = fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    (target / SHARD).write_bytes(b"truncated")
    (target / "tokenizer.json").unlink()
    fetched_keys.clear()
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert sorted(fetched_keys) == [PREFIX + SHARD, PREFIX + "tokenizer.json"]
    _assert_downloaded(target, bucket)


def test_a_marker_of_the_old_size_only_format_is_not_trusted(bucket, tmp_path, fetched_keys):
    target = local_weights_dir(URI, tmp_path)
    target.mkdir(parents=True)
    for relative, content in FILES.items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_bytes(content)
    (target / DONE_MARKER).write_text(json.dumps({"source": URI, "files": {k: len(v) for k, v in FILES.items()}}))
    fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None)
    assert sorted(fetched_keys) == sorted(PREFIX + relative for relative in FILES)
    _assert_downloaded(target, bucket)


def test_a_prefix_without_config_json_is_refused_before_downloading(bucket, tmp_path, fetched_keys):
    bucket.put("checkpoints/step-100/model.safetensors", b"x")
    with pytest.raises(WeightsDownloadError, match=r"s3://lmi-test-weights/checkpoints/ has no config.json"):
        fetch_weights(f"s3://{BUCKET}/checkpoints/", tmp_path, client=bucket.client, s5cmd=None)
    assert fetched_keys == []


def test_two_workers_on_one_host_download_once(bucket, tmp_path, fetched_keys):
    errors = []

    def worker():
        try:
            fetch_weights(URI, tmp_path, client=bucket.client, s5cmd=None, threads=2)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Counter(fetched_keys) == Counter(PREFIX + relative for relative in FILES)
    _assert_downloaded(local_weights_dir(URI, tmp_path), bucket)


def test_s5cmd_copies_exactly_the_files_to_fetch_as_raw_cp_lines(bucket, tmp_path, s5cmd, fetched_keys):
    bucket.put(PREFIX + "odd [name]*?.txt", b"glob characters are part of the key")
    files = {**FILES, "odd [name]*?.txt": b"glob characters are part of the key"}
    target = fetch_weights(URI, tmp_path / "weights", client=bucket.client, threads=4)
    _assert_downloaded(target, bucket, files)
    assert fetched_keys == []  # botocore only listed the prefix
    (invocation,) = s5cmd_invocations(s5cmd)
    assert invocation["argv"][:-1] == ["--json", "--numworkers", "4", "--retry-count", "3", "run"]
    assert sorted(invocation["run"]) == sorted(
        ["cp", "--raw", f"s3://{BUCKET}/{PREFIX}{relative}", str(target / relative)] for relative in files
    )


def test_an_s5cmd_failure_keeps_what_it_copied_and_the_retry_fetches_the_rest(bucket, tmp_path, s5cmd, monkeypatch):
    monkeypatch.setenv("S5CMD_STANDIN_FAIL_KEYS", PREFIX + SHARD)
    with pytest.raises(WeightsDownloadError, match=rf"s5cmd exited with 1 after 6 of 7 files: .*{SHARD}.*connection"):
        fetch_weights(URI, tmp_path / "weights", client=bucket.client)
    target = local_weights_dir(URI, tmp_path / "weights")
    assert not (target / DONE_MARKER).exists() and not (target / SHARD).exists()

    monkeypatch.delenv("S5CMD_STANDIN_FAIL_KEYS")
    s5cmd.unlink()
    fetch_weights(URI, tmp_path / "weights", client=bucket.client)
    assert s5cmd_copied_keys(s5cmd, BUCKET) == [PREFIX + SHARD]
    _assert_downloaded(target, bucket)


def test_an_s5cmd_run_that_left_files_out_is_caught_by_verification(bucket, tmp_path, s5cmd, monkeypatch):
    monkeypatch.setenv("S5CMD_STANDIN_S3", str(tmp_path / "an-empty-mirror"))  # exits 1: "no object found"
    with pytest.raises(WeightsDownloadError, match=r"s5cmd exited with 1 after 0 of 7 files: .*no object found"):
        fetch_weights(URI, tmp_path / "weights", client=bucket.client)
    assert not (local_weights_dir(URI, tmp_path / "weights") / DONE_MARKER).exists()


def test_an_s5cmd_that_says_it_succeeded_is_still_verified(bucket, tmp_path, monkeypatch):
    log = tmp_path / "calls"
    lying = tmp_path / "bin" / "s5cmd"
    lying.parent.mkdir()
    lying.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 0\n')
    lying.chmod(0o755)
    with pytest.raises(
        WeightsDownloadError, match=r"is incomplete, so no DONE marker was written.*config.json is missing"
    ):
        fetch_weights(URI, tmp_path / "weights", client=bucket.client, s5cmd=str(lying))
    assert log.read_text().startswith("--json --numworkers 16 --retry-count 3 run ")


def test_the_s5cmd_standin_skips_a_same_size_change_under_sync_size_only_as_s5cmd_does(bucket, tmp_path, s5cmd):
    """Why the download never uses `sync --size-only` (the old way): s5cmd's SizeOnlyStrategy skips the change."""
    import subprocess

    destination = tmp_path / "synced"
    arguments = ["s5cmd", "sync", "--size-only", f"{URI}*", f"{destination}/"]
    assert subprocess.run(arguments, check=False).returncode == 0
    retrained = os.urandom(len(FILES[SHARD]))
    bucket.put(PREFIX + SHARD, retrained)
    assert subprocess.run(arguments, check=False).returncode == 0
    assert (destination / SHARD).read_bytes() == FILES[SHARD]  # stale
    unknown = subprocess.run(["s5cmd", "--numworker", "2", "run", "x"], capture_output=True, text=True, check=False)
    assert unknown.returncode == 1 and "flag provided but not defined: -numworker" in unknown.stderr


def test_s5cmd_is_found_on_the_path_or_where_the_lmi_image_installs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(lmi_weights, "LMI_S5CMD", str(tmp_path / "opt-djl-bin-s5cmd"))
    assert lmi_weights.find_s5cmd() is None
    install_s5cmd(tmp_path / "image").rename(tmp_path / "opt-djl-bin-s5cmd")
    assert lmi_weights.find_s5cmd() == str(tmp_path / "opt-djl-bin-s5cmd")


def test_only_local_rank_zero_downloads_and_the_others_wait_for_it(tmp_path):
    fetched, gathered = [], []

    def gather(error):
        gathered.append(error)
        return []

    path = resolve_weights(URI, tmp_path, local_rank=1, gather_errors=gather, fetch=lambda *args: fetched.append(args))
    assert fetched == [] and gathered == [None]
    assert path == local_weights_dir(URI, tmp_path)

    resolve_weights(URI, tmp_path, local_rank=0, gather_errors=gather, fetch=lambda *args: fetched.append(args))
    assert fetched == [(URI, tmp_path)]


def test_every_rank_fails_with_the_error_of_the_rank_that_downloaded(tmp_path):
    def failing_fetch(*args):
        raise WeightsDownloadError("s3 said no")

    reported = []

    def gather(error):
        reported.append(error)
        return [f"rank 0: {error}"]

    with pytest.raises(WeightsDownloadError, match="rank 0: WeightsDownloadError: s3 said no"):
        resolve_weights(URI, tmp_path, local_rank=0, gather_errors=gather, fetch=failing_fetch)
    assert reported == ["WeightsDownloadError: s3 said no"]
