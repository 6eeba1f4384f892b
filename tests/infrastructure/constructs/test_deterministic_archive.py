"""The archive builder: same contents give the same bytes anywhere, with the layout SageMaker expects."""

from __future__ import annotations

import gzip
import io
import os
import sys
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from infrastructure.constructs.code_package import RUNTIME_DIR

sys.path.insert(0, str(RUNTIME_DIR))
# The Lambda's own module, imported the way the Lambda imports it.
from deterministic_archive import (
    Member,
    members_from_directory,
    members_from_text,
    merge,
    write_archive,
)


def make_source(root: Path, mtime: int, mode: int) -> Path:
    files = {
        "train.py": "print('train')\n",
        "finetune/__init__.py": "",
        "finetune/loop.py": "LOOP = 1\n",
        "requirements.txt": "tqdm==4.70.1\n",
        "finetune/__pycache__/loop.cpython-311.pyc": "bytecode differs per machine",
        "stale.pyc": "x",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (mtime, mtime))
        path.chmod(mode)
    return root


def build(members: list[Member], top_level_dir: str = "") -> bytes:
    out = io.BytesIO()
    write_archive(members, out, top_level_dir=top_level_dir)
    return out.getvalue()


def test_same_files_with_different_mtimes_and_modes_give_identical_bytes(tmp_path):
    a = make_source(tmp_path / "a", mtime=1_000_000, mode=0o600)
    b = make_source(tmp_path / "elsewhere" / "b", mtime=1_700_000_000, mode=0o755)
    assert build(members_from_directory(a)) == build(members_from_directory(b))


def test_changed_content_gives_different_bytes(tmp_path):
    source = make_source(tmp_path / "a", 0, 0o644)
    before = build(members_from_directory(source))
    (source / "finetune/loop.py").write_text("LOOP = 2\n")
    assert build(members_from_directory(source)) != before


def test_returns_the_sha256_and_size_of_what_it_wrote(tmp_path):
    import hashlib

    out = io.BytesIO()
    sha256, size = write_archive(members_from_directory(make_source(tmp_path, 0, 0o644)), out)
    assert (sha256, size) == (hashlib.sha256(out.getvalue()).hexdigest(), len(out.getvalue()))


def test_flat_layout_has_sorted_files_and_directories_with_normalized_headers(tmp_path):
    data = build(members_from_directory(make_source(tmp_path, 12345, 0o700)))
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [
            "finetune",
            "finetune/__init__.py",
            "finetune/loop.py",
            "requirements.txt",
            "train.py",
        ]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
        assert {m.name: oct(m.mode) for m in members if m.isdir()} == {"finetune": "0o755"}
        assert {oct(m.mode) for m in members if m.isfile()} == {"0o644"}
        assert tar.extractfile("train.py").read() == b"print('train')\n"


def test_top_level_directory_layout_for_lmi(tmp_path):
    files = members_from_text({"model.py": "x", "serving.properties": "engine=DeepSpeed\n", "requirements.txt": ""})
    with tarfile.open(fileobj=io.BytesIO(build(files, top_level_dir="deepspeed")), mode="r:gz") as tar:
        assert tar.getnames() == [
            "deepspeed",
            "deepspeed/model.py",
            "deepspeed/requirements.txt",
            "deepspeed/serving.properties",
        ]


def test_rendered_files_replace_source_files_of_the_same_name(tmp_path):
    (tmp_path / "serving.properties").write_text("engine=DeepSpeed\n")
    members = merge(members_from_directory(tmp_path), members_from_text({"serving.properties": "rendered\n"}))
    with tarfile.open(fileobj=io.BytesIO(build(members)), mode="r:gz") as tar:
        assert tar.getnames() == ["serving.properties"]
        assert tar.extractfile("serving.properties").read() == b"rendered\n"


def test_gzip_header_has_no_timestamp_and_no_name(tmp_path):
    data = build(members_from_text({"a.txt": "a"}))
    assert data[:3] == b"\x1f\x8b\x08"
    flags, mtime = data[3], data[4:8]
    assert flags & 0x08 == 0  # FNAME not set
    assert mtime == b"\x00\x00\x00\x00"
    assert gzip.decompress(data)


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside", "a/../../b"])
def test_paths_escaping_the_archive_are_rejected(path):
    with pytest.raises(ValueError, match="must be relative and stay inside the archive"):
        members_from_text({path: "x"})


def test_a_source_shorter_than_announced_fails_instead_of_writing_a_truncated_archive():
    short = Member("model.py", 100, lambda: io.BytesIO(b"only 20 bytes here.."))
    with pytest.raises(ValueError, match=r"model\.py: source ended early"):
        build([short])


def test_memory_stays_bounded_for_large_files(tmp_path):
    big = tmp_path / "weights.bin"
    with big.open("wb") as f:
        for i in range(64):
            f.write(bytes([i]) * (256 * 1024))  # 16 MiB that compresses well, so the test stays fast
    tracemalloc.start()
    with (tmp_path / "out.tar.gz").open("wb") as out:
        write_archive(members_from_directory(tmp_path), out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while archiving 16 MiB"
