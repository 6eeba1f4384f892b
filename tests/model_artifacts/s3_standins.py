"""S3 for the weights tests: moto for the API calls, and a mirror folder of the same objects for the s5cmd stand-in
(a separate process, which moto's in-process mock cannot serve)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

STANDIN = Path(__file__).with_name("s5cmd_standin.py")


class FakeS3:
    """One bucket, written through to moto and to <mirror>/<bucket>/<key>."""

    def __init__(self, client, bucket: str, mirror: Path) -> None:
        self.client = client
        self.bucket = bucket
        self.mirror = mirror

    def put(self, key: str, body: bytes) -> str:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        self._mirror(key, body)
        return self.etag(key)

    def put_multipart(self, key: str, parts: list[bytes]) -> str:
        """Upload as S3 multipart (every part but the last at least 5 MiB, as S3 requires); returns the ETag."""
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        done = []
        for number, part in enumerate(parts, start=1):
            etag = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=part)[
                "ETag"
            ]
            done.append({"ETag": etag, "PartNumber": number})
        self.client.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}
        )
        self._mirror(key, b"".join(parts))
        return self.etag(key)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)
        path = self.mirror / self.bucket / key
        if path.is_file():
            path.unlink()

    def etag(self, key: str) -> str:
        return self.client.head_object(Bucket=self.bucket, Key=key)["ETag"]

    def _mirror(self, key: str, body: bytes) -> None:
        if key.endswith("/"):
            return  # a console "folder" marker: s5cmd lists it, but it is no file
        path = self.mirror / self.bucket / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def install_s5cmd(bin_dir: Path) -> Path:
    """An executable `s5cmd` in bin_dir that runs the stand-in with this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "s5cmd"
    script.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def s5cmd_environment(bin_dir: Path, mirror: Path, log: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "S5CMD_STANDIN_S3": str(mirror),
        "S5CMD_STANDIN_LOG": str(log),
        **extra,
    }


def s5cmd_invocations(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


def s5cmd_copied_keys(log: Path, bucket: str) -> list[str]:
    """The keys each `cp` line of every `s5cmd run` named, in order."""
    keys = []
    for invocation in s5cmd_invocations(log):
        for fields in invocation.get("run", []):
            source = next(field for field in fields[1:] if field.startswith("s3://"))
            keys.append(source[len(f"s3://{bucket}/") :])
    return keys
