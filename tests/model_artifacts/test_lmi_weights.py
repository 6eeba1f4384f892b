"""Weights from S3 (moto): complete-or-retried downloads, the DONE marker, resumption, s5cmd, one download per host."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading

import lmi_weights
import pytest
from lmi_weights import DONE_MARKER, WeightsDownloadError, fetch_weights, local_weights_dir, resolve_weights

BUCKET = "lmi-test-weights"  # created by the s3 fixture
URI = f"s3://{BUCKET}/models/tiny/"
FILES = {
    "config.json": b'{"model_type": "gptj"}',
    "tokenizer.json": b"{}" * 300,
    "model-00001-of-00003.safetensors": os.urandom(4096),
    "model-00002-of-00003.safetensors": os.urandom(5000),
    "model-00003-of-00003.safetensors": os.urandom(3000),
    "model.safetensors.index.json": b'{"weight_map": {}}',
    "extra/notes.txt": b"nested files keep their folder",
}


@pytest.fixture
def bucket_with_model(s3):
    for relative, content in FILES.items():
        s3.put_object(Bucket=BUCKET, Key=f"models/tiny/{relative}", Body=content)
    s3.put_object(Bucket=BUCKET, Key="models/tiny/", Body=b"")  # a console "folder" marker, not a file
    s3.put_object(Bucket=BUCKET, Key="models/tiny-v2/config.json", Body=b"{}")  # a sibling prefix, not ours
    return s3


@pytest.fixture
def counted_downloads(monkeypatch):
    """Records the key of every per-object download the boto3 path makes."""
    real = lmi_weights.download_object
    keys: list[str] = []
    lock = threading.Lock()

    def counting(client, bucket, key, destination):
        with lock:
            keys.append(key)
        real(client, bucket, key, destination)

    monkeypatch.setattr(lmi_weights, "download_object", counting)
    return keys


def _assert_downloaded(target):
    for relative, content in FILES.items():
        assert (target / relative).read_bytes() == content
    marker = json.loads((target / DONE_MARKER).read_text())
    assert marker == {"source": URI, "files": {relative: len(content) for relative, content in FILES.items()}}


def test_downloads_the_prefix_verifies_it_and_then_writes_done(bucket_with_model, tmp_path):
    target = fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None)
    assert target == tmp_path / BUCKET / "models" / "tiny" == local_weights_dir(URI, tmp_path)
    _assert_downloaded(target)
    assert not (target / "tiny-v2").exists() and not (tmp_path / BUCKET / "models" / "tiny-v2").exists()
    assert not list(target.rglob("*.partial"))


def test_failure_mid_download_leaves_no_done_and_the_retry_fetches_only_what_is_missing(
    bucket_with_model, tmp_path, monkeypatch
):
    real = lmi_weights.download_object
    attempts: list[str] = []

    def dies_on_the_third_object(client, bucket, key, destination):
        attempts.append(key)
        if len(attempts) == 3:
            # Half a file written, then the connection drops.
            destination.with_name(destination.name + ".partial").write_bytes(b"\0" * 100)
            raise ConnectionError("connection reset by peer")
        real(client, bucket, key, destination)

    monkeypatch.setattr(lmi_weights, "download_object", dies_on_the_third_object)
    with pytest.raises(WeightsDownloadError, match=r"1 of 7 downloads failed: .*connection reset by peer"):
        fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None, threads=1)
    target = local_weights_dir(URI, tmp_path)
    assert not (target / DONE_MARKER).exists()
    failed_key = attempts[2]
    failed_file = target / failed_key[len("models/tiny/") :]
    assert not failed_file.exists()

    retried: list[str] = []
    monkeypatch.setattr(lmi_weights, "download_object", lambda *args: (retried.append(args[2]), real(*args)))
    fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None, threads=1)
    assert retried == [failed_key]
    _assert_downloaded(target)


def test_a_restart_with_a_complete_download_skips_it_without_calling_s3(bucket_with_model, tmp_path):
    fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None)

    class NoS3:
        def __getattr__(self, name):
            raise AssertionError(f"S3 was called ({name}) although the download was complete")

    target = fetch_weights(URI, tmp_path, client=NoS3(), s5cmd=None)
    _assert_downloaded(target)


def test_a_done_marker_over_a_damaged_folder_is_not_trusted(bucket_with_model, tmp_path, counted_downloads):
    target = fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None)
    (target / "model-00002-of-00003.safetensors").write_bytes(b"truncated")
    (target / "tokenizer.json").unlink()
    counted_downloads.clear()
    fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None)
    assert sorted(counted_downloads) == ["models/tiny/model-00002-of-00003.safetensors", "models/tiny/tokenizer.json"]
    _assert_downloaded(target)


def test_a_prefix_without_config_json_is_refused_before_downloading(s3, tmp_path, counted_downloads):
    s3.put_object(Bucket=BUCKET, Key="checkpoints/step-100/model.safetensors", Body=b"x")
    with pytest.raises(WeightsDownloadError, match=r"s3://lmi-test-weights/checkpoints/ has no config.json"):
        fetch_weights(f"s3://{BUCKET}/checkpoints/", tmp_path, client=s3, s5cmd=None)
    assert counted_downloads == []


def test_two_workers_on_one_host_download_once(bucket_with_model, tmp_path, counted_downloads):
    errors = []

    def worker():
        try:
            fetch_weights(URI, tmp_path, client=bucket_with_model, s5cmd=None, threads=2)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(counted_downloads) == sorted(f"models/tiny/{relative}" for relative in FILES)
    _assert_downloaded(local_weights_dir(URI, tmp_path))


def _fake_s5cmd(folder, *, exit_code=0):
    """An executable named s5cmd that logs its arguments and copies FAKE_S5CMD_SOURCE (if set) to its target."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "s5cmd"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, shutil, sys\n"
        "with open(os.environ['FAKE_S5CMD_LOG'], 'a') as log:\n"
        "    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if os.environ.get('FAKE_S5CMD_SOURCE'):\n"
        "    shutil.copytree(os.environ['FAKE_S5CMD_SOURCE'], sys.argv[-1], dirs_exist_ok=True)\n"
        f"sys.stderr.write('fake s5cmd failure\\n' if {exit_code} else '')\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def s5cmd_on_path(tmp_path, monkeypatch):
    log_file = tmp_path / "s5cmd.log"
    monkeypatch.setenv("FAKE_S5CMD_LOG", str(log_file))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    def install(exit_code=0):
        _fake_s5cmd(tmp_path / "bin", exit_code=exit_code)
        return log_file

    return install


def test_s5cmd_syncs_the_prefix_when_installed_and_the_result_is_verified(
    bucket_with_model, tmp_path, s5cmd_on_path, monkeypatch, counted_downloads
):
    log_file = s5cmd_on_path()
    source = tmp_path / "what-s3-holds"
    for relative, content in FILES.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_bytes(content)
    monkeypatch.setenv("FAKE_S5CMD_SOURCE", str(source))
    target = fetch_weights(URI, tmp_path / "weights", client=bucket_with_model, threads=4)
    _assert_downloaded(target)
    assert counted_downloads == []  # boto3 only listed the prefix
    arguments = json.loads(log_file.read_text())
    assert arguments == [
        "--numworkers",
        "4",
        "--retry-count",
        "3",
        "sync",
        "--size-only",
        f"{URI}*",
        f"{target}{os.sep}",
    ]


def test_an_s5cmd_run_that_left_files_out_is_caught_by_verification(bucket_with_model, tmp_path, s5cmd_on_path):
    s5cmd_on_path()  # exits 0 but copies nothing
    with pytest.raises(
        WeightsDownloadError, match=r"is incomplete, so no DONE marker was written.*config.json is missing"
    ):
        fetch_weights(URI, tmp_path / "weights", client=bucket_with_model)
    assert not (local_weights_dir(URI, tmp_path / "weights") / DONE_MARKER).exists()


def test_an_s5cmd_failure_reports_its_exit_code_and_stderr(bucket_with_model, tmp_path, s5cmd_on_path):
    s5cmd_on_path(exit_code=3)
    with pytest.raises(WeightsDownloadError, match="s5cmd exited with 3: fake s5cmd failure"):
        fetch_weights(URI, tmp_path / "weights", client=bucket_with_model)


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
