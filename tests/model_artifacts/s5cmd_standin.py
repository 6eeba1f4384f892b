"""A stand-in for s5cmd v2.0.0, the binary the LMI 0.27.0 image ships at /opt/djl/bin/s5cmd
(djl-serving v0.27.0: serving/docker/scripts/install_s5cmd.sh), for the subset the handler may use, and as strict
as the real one there. Read from peak/s5cmd@v2.0.0:

- global flags before the command (command/app.go): --json, --numworkers N, --retry-count/-r N, --log LEVEL,
  --dry-run, --stat; any other flag: "Incorrect Usage: flag provided but not defined", exit 1;
- `cp [--raw] [-n] [-s] [-u] [-c N] [-p N] SRC DST` (command/cp.go): without --raw, * ? [ in SRC are glob patterns
  (and DST is a folder); with --raw SRC names one object. A download writes DST in place (os.Create) and deletes it
  when the download fails (doDownload); parent folders are created (prepareLocalDestination);
- `sync [--size-only] [--delete] [--raw] SRC DST` (command/sync.go, sync_strategy.go): copies an object unless the
  local file has the same size and (without --size-only) is not older than the object. --size-only therefore skips
  a changed object of the same size;
- `run FILE` (command/run.go): one command per line (shell-quoted, # comments); an unknown flag in a line ends the
  process with exit 2 (flag.ExitOnError); "run" inside run is refused;
- output (log/message.go): per copy "cp SRC DST" on stdout, or with --json
  {"operation": "cp", "success": true, "source": ..., "destination": ..., "object": {"size": N}};
  errors on stderr, {"operation", "command", "error"} with --json; exit 1 if anything failed (main.go).

"S3" is a folder: $S5CMD_STANDIN_S3/<bucket>/<key> (tests keep it equal to what they put into moto). Test hooks:
$S5CMD_STANDIN_LOG (each invocation's argv and run lines, one JSON line each), $S5CMD_STANDIN_DELAY (seconds to
sleep before starting: a slow download), $S5CMD_STANDIN_FAIL_KEYS (comma-separated keys whose download fails).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import sys
import time
from pathlib import Path

GLOBAL_BOOL = {"--json", "--dry-run", "--stat", "--no-verify-ssl", "--no-sign-request", "--use-list-objects-v1"}
GLOBAL_VALUE = {"--numworkers", "--retry-count", "-r", "--log", "--endpoint-url", "--request-payer"}
CP_BOOL = {"--raw", "--no-clobber", "-n", "--if-size-differ", "-s", "--if-source-newer", "-u", "--flatten", "-f"}
CP_VALUE = {"--concurrency", "-c", "--part-size", "-p", "--storage-class", "--sse", "--sse-kms-key-id", "--acl"}
SYNC_BOOL = {"--size-only", "--delete", "--raw", "--no-follow-symlinks"}
SYNC_VALUE = {"--concurrency", "-c", "--part-size", "-p", "--storage-class", "--exclude"}
GLOB = set("*?[")


class UsageError(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Session:
    def __init__(self, json_output: bool) -> None:
        self.json = json_output
        self.failed = False
        self.root = Path(os.environ["S5CMD_STANDIN_S3"])
        self.fail_keys = {key for key in os.environ.get("S5CMD_STANDIN_FAIL_KEYS", "").split(",") if key}

    def copied(self, source: str, destination: Path, size: int) -> None:
        if self.json:
            message = {"operation": "cp", "success": True, "source": source, "destination": str(destination)}
            print(json.dumps({**message, "object": {"size": size}}), flush=True)
        else:
            print(f"cp {source} {destination}", flush=True)

    def error(self, command: str, error: str) -> None:
        self.failed = True
        if self.json:
            print(json.dumps({"operation": "cp", "command": command, "error": error}), file=sys.stderr, flush=True)
        else:
            print(f'ERROR "{command}": {error}', file=sys.stderr, flush=True)

    def objects(self, url: str, raw: bool) -> list[tuple[str, str, Path]]:
        """(key, path under the wildcard's folder, file) for each object the source URL names."""
        if not url.startswith("s3://"):
            raise UsageError(f"source {url!r} is not an s3:// URL (the stand-in downloads only)")
        bucket, _, pattern = url[len("s3://") :].partition("/")
        bucket_dir = self.root / bucket
        if raw or not GLOB & set(pattern):
            path = bucket_dir / pattern
            return [(pattern, Path(pattern).name, path)] if path.is_file() else []
        fixed = pattern[: min(pattern.index(c) for c in GLOB if c in pattern)]
        base = fixed[: fixed.rfind("/") + 1]
        found = []
        for path in sorted(p for p in bucket_dir.rglob("*") if p.is_file()):
            key = path.relative_to(bucket_dir).as_posix()
            if fnmatch.fnmatchcase(key, pattern):
                found.append((key, key[len(base) :], path))
        return found

    def download(self, command: str, source: str, key: str, file: Path, destination: Path) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        data = file.read_bytes()
        if key in self.fail_keys:
            destination.write_bytes(data[: len(data) // 2])  # part of it arrived, then the connection dropped
            destination.unlink()  # doDownload: dstClient.Delete on error
            self.error(command, f"download of {source} failed: connection reset by peer")
            return
        destination.write_bytes(data)
        self.copied(source, destination, len(data))


def take_flags(args: list[str], booleans: set[str], values: set[str], where: str) -> tuple[dict, list[str]]:
    flags: dict = {}
    while args and args[0].startswith("-"):
        name, has_value, value = args.pop(0).partition("=")
        if name in booleans:
            flags[name] = True
        elif name in values:
            if not has_value:
                if not args:
                    raise UsageError(f"flag needs an argument: {name}")
                value = args.pop(0)
            flags[name] = value
        else:
            raise UsageError(f"flag provided but not defined: -{name.lstrip('-')} ({where} flags)")
    return flags, args


def run_command(session: Session, fields: list[str]) -> None:
    name, rest = fields[0], fields[1:]
    command = " ".join(fields)
    if name == "cp":
        flags, operands = take_flags(rest, CP_BOOL, CP_VALUE, "cp")
    elif name == "sync":
        flags, operands = take_flags(rest, SYNC_BOOL, SYNC_VALUE, "sync")
    else:
        session.error(command, f'"{name}" command not found')
        return
    if len(operands) != 2:
        raise UsageError(f"expected source and destination arguments, got {operands}")
    source, destination = operands
    raw = bool(flags.get("--raw"))
    objects = session.objects(source, raw)
    if not objects:
        session.error(command, "no object found")
        return
    wildcard = not raw and bool(GLOB & set(source))
    for key, relative, file in objects:
        bucket = source[len("s3://") :].partition("/")[0]
        object_url = f"s3://{bucket}/{key}"
        if wildcard or destination.endswith("/") or Path(destination).is_dir():
            target = Path(destination, relative)
        else:
            target = Path(destination)
        if name == "sync" and target.is_file():
            same_size = target.stat().st_size == file.stat().st_size
            newer = file.stat().st_mtime > target.stat().st_mtime
            if same_size and (flags.get("--size-only") or not newer):
                continue  # sync_strategy.go: ErrObjectSizesMatch / ErrObjectIsNewerAndSizesMatch
        if name == "cp" and target.is_file():
            if flags.get("--no-clobber") or flags.get("-n"):
                continue
            if (flags.get("--if-size-differ") or flags.get("-s")) and target.stat().st_size == file.stat().st_size:
                continue
        session.download(command, object_url, key, file, target)


def main(argv: list[str]) -> int:
    log_path = os.environ.get("S5CMD_STANDIN_LOG")
    entry: dict = {"argv": argv}
    try:
        global_flags, args = take_flags(list(argv), GLOBAL_BOOL, GLOBAL_VALUE, "global")
        if not args:
            raise UsageError("no command given")
        session = Session(bool(global_flags.get("--json")))
        if args[0] == "run":
            if len(args) != 2:
                raise UsageError("run expects exactly one file argument here")
            lines = [line.strip() for line in Path(args[1]).read_text().splitlines()]
            commands = [shlex.split(line) for line in lines if line and not line.startswith("#")]
            entry["run"] = commands
        else:
            commands = [args]
        delay = float(os.environ.get("S5CMD_STANDIN_DELAY", "0"))
        if delay:
            time.sleep(delay)
        for fields in commands:
            if fields[0] == "run":
                session.error(" ".join(fields), '"run" command is not permitted in run-mode')
                continue
            try:
                run_command(session, fields)
            except UsageError as error:
                if args[0] == "run":
                    raise UsageError(str(error), exit_code=2) from None  # flag.ExitOnError inside run
                raise
        return 1 if session.failed else 0
    except UsageError as error:
        print(f"Incorrect Usage: {error}\nSee 's5cmd --help' for usage", file=sys.stderr)
        return error.exit_code
    finally:
        if log_path:
            with open(log_path, "a") as log:
                log.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
