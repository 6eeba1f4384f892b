"""Bring a model folder from an S3 prefix onto the instance, once per host, and only call it done when it is.

Unlike the reference notebooks (which wrote DONE before checking `aws s3 cp`'s exit code, so a failed download was
never retried), the DONE marker here is written only after every listed object is on disk with its listed size, and
it records what was downloaded so a restart can check it without calling S3:

- local rank 0 downloads; the other ranks wait for it and fail with its error if it failed;
- s5cmd (in the LMI images at /opt/djl/bin/s5cmd) when present, else boto3 with a thread pool;
- resumable: files already on disk with their S3 size are skipped, boto3 writes each file under a `.partial` name
  and renames it when complete;
- a host-wide file lock, because DJL runs one MPI group per model copy (e.g. TP=2 on 4 GPUs is 2 workers, each with
  its own local rank 0) and they must not download into the same folder at once.

Weights land in <download_dir>/<bucket>/<prefix>, so two models never share a folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from lmi_config import split_s3_uri

log = logging.getLogger(__name__)

DONE_MARKER = "DONE"
LOCK_FILE = ".download.lock"
PARTIAL_SUFFIX = ".partial"
LMI_S5CMD = "/opt/djl/bin/s5cmd"
DEFAULT_THREADS = 16


class WeightsDownloadError(RuntimeError):
    """The weights could not be brought onto this host completely."""


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    relative_path: str  # path under the prefix, "/"-separated


def local_weights_dir(s3_uri: str, download_dir: str | Path) -> Path:
    bucket, prefix = split_s3_uri(s3_uri)
    return Path(download_dir, bucket, *PurePosixPath(prefix).parts)


def fetch_weights(
    s3_uri: str,
    download_dir: str | Path,
    *,
    client=None,
    threads: int = DEFAULT_THREADS,
    s5cmd: str | None = "auto",
) -> Path:
    """Download the prefix unless a verified download is already there; return the local folder.

    `s5cmd="auto"` uses s5cmd when it is installed, None forces boto3, a path forces that binary.
    """
    bucket, prefix = split_s3_uri(s3_uri)
    target = local_weights_dir(s3_uri, download_dir)
    target.mkdir(parents=True, exist_ok=True)
    with _host_lock(target / LOCK_FILE):
        if is_complete(target, s3_uri):
            log.info("weights: complete download of %s found in %s, skipping it", s3_uri, target)
            return target
        with contextlib.suppress(FileNotFoundError):
            (target / DONE_MARKER).unlink()
        if client is None:
            client = _s3_client(threads)
        objects = list_prefix(client, bucket, prefix)
        if not any(obj.relative_path == "config.json" for obj in objects):
            raise WeightsDownloadError(
                f"{s3_uri} has no config.json at its top level ({len(objects)} objects listed); expected the "
                "prefix of a Hugging Face model folder (config.json, weights, tokenizer files)"
            )
        total_bytes = sum(obj.size for obj in objects)
        log.info("weights: %d objects, %.1f MiB under %s -> %s", len(objects), total_bytes / 2**20, s3_uri, target)
        s5cmd_path = find_s5cmd() if s5cmd == "auto" else s5cmd
        if s5cmd_path:
            download_with_s5cmd(s5cmd_path, bucket, prefix, target, threads=threads)
        else:
            download_with_boto3(client, bucket, objects, target, threads=threads)
        problems = incomplete_files(objects, target)
        if problems:
            raise WeightsDownloadError(
                f"download of {s3_uri} is incomplete, so no {DONE_MARKER} marker was written and the next start "
                f"retries it: {'; '.join(problems[:10])}"
            )
        _write_done_marker(target, s3_uri, objects)
        log.info("weights: %s verified and marked %s", target, DONE_MARKER)
    return target


def resolve_weights(
    s3_uri: str,
    download_dir: str | Path,
    *,
    local_rank: int,
    gather_errors: Callable[[str | None], list[str]],
    fetch: Callable[..., Path] = fetch_weights,
) -> Path:
    """Local rank 0 fetches; every rank then meets the others (gather_errors is the barrier) and fails alike."""
    error = None
    if local_rank == 0:
        try:
            fetch(s3_uri, download_dir)
        except Exception as exc:  # reported to every rank below, then raised
            log.exception("weights: download of %s failed", s3_uri)
            error = f"{type(exc).__name__}: {exc}"
    errors = gather_errors(error)
    if errors:
        raise WeightsDownloadError("; ".join(errors))
    return local_weights_dir(s3_uri, download_dir)


def is_complete(target: Path, s3_uri: str) -> bool:
    """True when DONE names this source and every file it lists is on disk with its size."""
    try:
        marker = json.loads((target / DONE_MARKER).read_text())
        files = marker["files"]
        if marker["source"] != s3_uri:
            return False
        return all(_has_size(target / relative, size) for relative, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def list_prefix(client, bucket: str, prefix: str) -> list[S3Object]:
    """Every object under the prefix, folder markers ("key/") left out."""
    objects = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            if key.endswith("/"):
                continue
            relative = key[len(prefix) :]
            parts = PurePosixPath(relative).parts
            if not parts or ".." in parts or relative.startswith("/"):
                raise WeightsDownloadError(f"refusing S3 key {key!r}: it would land outside the download folder")
            objects.append(S3Object(key=key, size=int(item["Size"]), relative_path=relative))
    return objects


def find_s5cmd() -> str | None:
    found = shutil.which("s5cmd")
    if found:
        return found
    return LMI_S5CMD if os.access(LMI_S5CMD, os.X_OK) else None


def download_with_s5cmd(s5cmd: str, bucket: str, prefix: str, target: Path, *, threads: int) -> None:
    # `sync --size-only` skips what is already there with the right size: resumable like the boto3 path.
    command = [
        s5cmd,
        "--numworkers",
        str(threads),
        "--retry-count",
        "3",
        "sync",
        "--size-only",
        f"s3://{bucket}/{prefix}*",
        f"{target}{os.sep}",
    ]
    log.info("weights: %s", " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise WeightsDownloadError(
            f"s5cmd exited with {result.returncode}: {(result.stderr or result.stdout).strip()[-2000:]}"
        )


def download_with_boto3(client, bucket: str, objects: list[S3Object], target: Path, *, threads: int) -> None:
    pending = [obj for obj in objects if not _has_size(target / obj.relative_path, obj.size)]
    if len(pending) < len(objects):
        log.info("weights: %d of %d files already complete, skipping them", len(objects) - len(pending), len(objects))
    failures = []
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        futures = {
            pool.submit(download_object, client, bucket, obj.key, target / obj.relative_path): obj for obj in pending
        }
        for future, obj in futures.items():
            error = future.exception()
            if error is not None:
                failures.append(f"{obj.key}: {type(error).__name__}: {error}")
    if failures:
        raise WeightsDownloadError(f"{len(failures)} of {len(pending)} downloads failed: {'; '.join(failures[:10])}")


def download_object(client, bucket: str, key: str, destination: Path) -> None:
    """One object, written under a temporary name and renamed when complete."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + PARTIAL_SUFFIX)
    client.download_file(bucket, key, str(partial))
    os.replace(partial, destination)


def incomplete_files(objects: list[S3Object], target: Path) -> list[str]:
    problems = []
    for obj in objects:
        path = target / obj.relative_path
        if not path.is_file():
            problems.append(f"{obj.relative_path} is missing")
        elif path.stat().st_size != obj.size:
            problems.append(f"{obj.relative_path} has {path.stat().st_size} bytes, S3 lists {obj.size}")
    return problems


def _write_done_marker(target: Path, s3_uri: str, objects: list[S3Object]) -> None:
    marker = {"source": s3_uri, "files": {obj.relative_path: obj.size for obj in objects}}
    temporary = target / (DONE_MARKER + PARTIAL_SUFFIX)
    temporary.write_text(json.dumps(marker, indent=1, sort_keys=True))
    os.replace(temporary, target / DONE_MARKER)


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


@contextlib.contextmanager
def _host_lock(path: Path) -> Iterator[None]:
    import fcntl  # POSIX only, like the containers this runs in

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _s3_client(threads: int):
    import boto3
    from botocore.config import Config

    # Each of the `threads` files in flight is itself fetched in up to 10 parallel parts (s3transfer's default).
    return boto3.client(
        "s3", config=Config(max_pool_connections=10 * max(1, threads), retries={"max_attempts": 10, "mode": "adaptive"})
    )
