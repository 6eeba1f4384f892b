"""Bring a model folder from an S3 prefix onto the instance, once per host, and fetch again whatever changed in S3.

A folder is complete when every object listed under the prefix is on disk as S3 holds it now. File sizes cannot tell
that (retrained weights of the same size under the same prefix would look complete), so every downloaded file is
recorded with the ETag it was listed with, and every start lists the prefix again and compares:

- an object whose ETag or size changed is fetched again; a file we downloaded that S3 no longer lists is removed
  (a retrained model with fewer shards, or a different layout, must not load stale files);
- ETags are compared as opaque strings, never as an MD5 of the file: a multipart upload's ETag is the MD5 of its
  parts' MD5s plus "-<parts>", and an SSE-KMS object's is not an MD5 of the content either;
- resumable: the record (.weights-manifest.json) is rewritten as files complete, so a failed or killed start
  resumes with only what is missing or changed; DONE (a copy of the record) is written only when every listed
  object is on disk as listed, and removed before anything in the folder changes;
- local rank 0 downloads; the other ranks wait for it (resolve_weights) and fail with its error if it failed;
- s5cmd (LMI 0.27.0 image: /opt/djl/bin/s5cmd, v2.0.0) copies exactly the files to fetch, as `cp --raw` lines of
  one `s5cmd run` (never `sync --size-only`, which skips a changed file of the same size); without s5cmd, s3transfer
  with 16 files in flight. Both write each file under a temporary name and rename it when complete;
- botocore and s3transfer only, no boto3: the LMI image has them as awscli's dependencies, so nothing needs
  installing at start-up (see model_artifacts/README.md, "Python packages");
- a host-wide file lock, because DJL runs one MPI group per model copy (e.g. TP=2 on 4 GPUs is 2 workers, each with
  its own local rank 0) and they must not download into the same folder at once.

Weights land in <download_dir>/<bucket>/<prefix>, so two models never share a folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from lmi_config import split_s3_uri

log = logging.getLogger(__name__)

DONE_MARKER = "DONE"
MANIFEST = ".weights-manifest.json"
LOCK_FILE = ".download.lock"
LMI_S5CMD = "/opt/djl/bin/s5cmd"
DEFAULT_THREADS = 16


class WeightsDownloadError(RuntimeError):
    """The weights could not be brought onto this host completely."""


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    etag: str  # as listed, quotes included; compared, never interpreted
    relative_path: str  # path under the prefix, "/"-separated

    def record(self) -> dict:
        return {"size": self.size, "etag": self.etag}


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
    """List the prefix, fetch what is missing or changed since the last download, return the local folder.

    `client` is a botocore S3 client (boto3's are too); `s5cmd="auto"` uses s5cmd when it is installed, None forces
    s3transfer, a path forces that binary.
    """
    bucket, prefix = split_s3_uri(s3_uri)
    target = local_weights_dir(s3_uri, download_dir)
    target.mkdir(parents=True, exist_ok=True)
    with _host_lock(target / LOCK_FILE):
        if client is None:
            client = _s3_client(threads)
        objects = list_prefix(client, bucket, prefix)
        if not any(obj.relative_path == "config.json" for obj in objects):
            raise WeightsDownloadError(
                f"{s3_uri} has no config.json at its top level ({len(objects)} objects listed); expected the "
                "prefix of a Hugging Face model folder (config.json, weights, tokenizer files)"
            )
        manifest = Manifest.load(target, s3_uri)
        pending = [obj for obj in objects if not manifest.holds(obj)]
        listed = {obj.relative_path for obj in objects}
        gone = sorted(relative for relative in manifest.files if relative not in listed)
        if not pending and not gone and (target / DONE_MARKER).is_file():
            log.info("weights: %s matches all %d objects of %s (ETags), nothing to fetch", target, len(objects), s3_uri)
            return target

        # From here until DONE is written again the folder is not a complete model.
        _unlink(target / DONE_MARKER)
        for relative in gone:
            manifest.forget(relative)
            _unlink(target / relative)
        for obj in pending:
            manifest.forget(obj.relative_path)
        manifest.save()
        if gone:
            log.info("weights: removed %d file(s) S3 no longer lists: %s", len(gone), ", ".join(gone[:10]))
        pending_bytes = sum(obj.size for obj in pending)
        log.info(
            "weights: fetching %d of %d objects (%.1f MiB) under %s -> %s",
            len(pending),
            len(objects),
            pending_bytes / 2**20,
            s3_uri,
            target,
        )
        s5cmd_path = find_s5cmd() if s5cmd == "auto" else s5cmd
        try:
            if s5cmd_path:
                download_with_s5cmd(s5cmd_path, bucket, pending, target, threads=threads, done=manifest.add)
            else:
                download_with_s3transfer(client, bucket, pending, target, threads=threads, done=manifest.add)
        finally:
            manifest.save()  # what did arrive counts on the next start
        problems = manifest.problems(objects)
        if problems:
            raise WeightsDownloadError(
                f"download of {s3_uri} is incomplete, so no {DONE_MARKER} marker was written and the next start "
                f"retries it: {'; '.join(problems[:10])}"
            )
        manifest.save(DONE_MARKER)
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
    """Local rank 0 fetches; every rank then meets the others (gather_errors is the barrier) and fails alike.

    The other ranks wait inside gather_errors for the whole download: give it a group whose timeout outlasts it
    (lmi_distributed.long_wait_group), not the default group's."""
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


class Manifest:
    """The files of one download folder that are on disk as S3 listed them: {relative path: {"size", "etag"}}."""

    def __init__(self, target: Path, source: str, files: dict[str, dict]) -> None:
        self.target = target
        self.source = source
        self.files = files

    @classmethod
    def load(cls, target: Path, source: str) -> Manifest:
        # DONE holds the same record; it is the fallback for a folder whose manifest was deleted by hand.
        for name in (MANIFEST, DONE_MARKER):
            try:
                data = json.loads((target / name).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("source") == source and isinstance(data.get("files"), dict):
                files = {
                    relative: entry
                    for relative, entry in data["files"].items()
                    if isinstance(entry, dict) and set(entry) == {"size", "etag"}  # older markers held sizes only
                }
                return cls(target, source, files)
        return cls(target, source, {})

    def holds(self, obj: S3Object) -> bool:
        return self.files.get(obj.relative_path) == obj.record() and _has_size(
            self.target / obj.relative_path, obj.size
        )

    def add(self, obj: S3Object) -> None:
        """Record a file a download reported complete, if it is on disk with the listed size; saved at once, so a
        start killed mid-download keeps it."""
        if _has_size(self.target / obj.relative_path, obj.size):
            self.files[obj.relative_path] = obj.record()
            self.save()

    def forget(self, relative: str) -> None:
        self.files.pop(relative, None)

    def problems(self, objects: list[S3Object]) -> list[str]:
        problems = []
        for obj in objects:
            path = self.target / obj.relative_path
            if not path.is_file():
                problems.append(f"{obj.relative_path} is missing")
            elif path.stat().st_size != obj.size:
                problems.append(f"{obj.relative_path} has {path.stat().st_size} bytes, S3 lists {obj.size}")
            elif not self.holds(obj):
                problems.append(f"{obj.relative_path} was not reported downloaded")
        return problems

    def save(self, name: str = MANIFEST) -> None:
        temporary = self.target / (name + ".tmp")
        temporary.write_text(json.dumps({"source": self.source, "files": self.files}, indent=1, sort_keys=True))
        os.replace(temporary, self.target / name)


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
            objects.append(S3Object(key=key, size=int(item["Size"]), etag=str(item["ETag"]), relative_path=relative))
    return objects


def find_s5cmd() -> str | None:
    found = shutil.which("s5cmd")
    if found:
        return found
    return LMI_S5CMD if os.access(LMI_S5CMD, os.X_OK) else None


def download_with_s5cmd(
    s5cmd: str, bucket: str, objects: list[S3Object], target: Path, *, threads: int, done: Callable[[S3Object], None]
) -> None:
    """One `s5cmd run` of `cp --raw` lines, one per object (--raw: keys with * ? [ are names, not patterns).

    s5cmd exits 0 only when every line succeeded; otherwise its --json lines say which ones did, so they count."""
    if not objects:
        return
    by_source = {f"s3://{bucket}/{obj.key}": obj for obj in objects}
    lines = []
    for source, obj in by_source.items():
        destination = target / obj.relative_path
        destination.parent.mkdir(parents=True, exist_ok=True)
        lines.append(f"cp --raw {shlex.quote(source)} {shlex.quote(str(destination))}\n")
    with tempfile.TemporaryDirectory(prefix="s5cmd-") as scratch:
        commands = Path(scratch, "commands.txt")
        commands.write_text("".join(lines))
        command = [s5cmd, "--json", "--numworkers", str(threads), "--retry-count", "3", "run", str(commands)]
        log.info("weights: %s  (%d cp lines)", " ".join(command), len(lines))
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        confirmed = objects
    else:
        confirmed = [by_source[source] for source in _s5cmd_copied(result.stdout) if source in by_source]
    for obj in confirmed:
        done(obj)
    if result.returncode != 0:
        raise WeightsDownloadError(
            f"s5cmd exited with {result.returncode} after {len(confirmed)} of {len(objects)} files: "
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )


def _s5cmd_copied(stdout: str) -> Iterator[str]:
    # s5cmd v2 --json: one {"operation": "cp", "success": true, "source": ..., "destination": ...} per copy.
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("operation") == "cp" and message.get("success") is True:
            yield str(message.get("source"))


def download_with_s3transfer(
    client, bucket: str, objects: list[S3Object], target: Path, *, threads: int, done: Callable[[S3Object], None]
) -> None:
    from s3transfer.manager import TransferConfig, TransferManager

    failures = []
    # s3transfer writes <file>.<random> and renames it when complete, and deletes it when the download fails.
    with TransferManager(client, TransferConfig(max_request_concurrency=max(1, threads))) as manager:
        futures = []
        for obj in objects:
            destination = target / obj.relative_path
            destination.parent.mkdir(parents=True, exist_ok=True)
            futures.append((obj, manager.download(bucket, obj.key, str(destination))))
        for obj, future in futures:
            try:
                future.result()
            except Exception as error:
                failures.append(f"{obj.key}: {type(error).__name__}: {error}")
            else:
                done(obj)
    if failures:
        raise WeightsDownloadError(f"{len(failures)} of {len(objects)} downloads failed: {'; '.join(failures[:10])}")


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


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
    # botocore, not boto3: see the module docstring. Each file in flight is fetched in parallel ranged parts too.
    import botocore.session
    from botocore.config import Config

    return botocore.session.get_session().create_client(
        "s3",
        config=Config(max_pool_connections=max(10, 2 * threads), retries={"max_attempts": 10, "mode": "adaptive"}),
    )
