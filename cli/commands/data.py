"""`llmp upload-data`, `llmp data ls` and `llmp data rm`: the training text in the stage's data bucket's raw/, where
the fine-tuning pipeline reads it.

Every file is read with the pipeline's own reader (training/prepare_data.py read_documents, imported: the same code
the PrepareData step runs) before anything is uploaded, so a file the step would refuse is refused here, at its line.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from cli import aws as aws_module
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, LlmpCommand, StageOption, handled, load
from cli.render import Output, when
from core import bucket_layout
from training import prepare_data

# What the pipeline's PrepareData step reads: these files, directly in its input folder (training/prepare_data.py
# RAW_SUFFIXES and raw_files()). Files in subfolders are not read.
RAW_SUFFIXES = prepare_data.RAW_SUFFIXES
# What each kind of file must hold for read_documents (training/prepare_data.py's docstring): the fix a refusal names.
EXPECTED = {
    ".jsonl": 'one JSON object per line with a "text" (or "sentence") string, e.g. {"text": "..."}; for '
    'prompt/completion pairs, write {"text": prompt + completion}',
    ".json": 'one JSON object per line, or one JSON array of objects, each with a "text" (or "sentence") string',
    ".csv": 'a header row with a "text" (or "sentence") column, and a row per document',
    ".tsv": 'a header row with a "text" (or "sentence") column, and a row per document',
    ".txt": "UTF-8 text, one document per non-empty line",
}
FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@handled
def upload_data(
    path: Annotated[Path, typer.Argument(help="a file, or a folder whose files are uploaded (not its subfolders)")],
    under: Annotated[
        str | None,
        typer.Option("--under", help="a folder of raw/ to upload into; then fine-tune with --param InputData=..."),
    ] = None,
    follow_symlinks: Annotated[
        bool,
        typer.Option("--follow-symlinks", help="upload what a symbolic link points to (refused without this option)"),
    ] = False,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Upload training text (*.jsonl, *.json, *.csv, *.tsv, *.txt) to the data bucket's raw/, encrypted with the
    stage's key: the fine-tuning pipeline reads every such file there. A symbolic link, given or in the folder, is
    refused unless --follow-symlinks says to upload what it points to."""
    out = Output(json_mode=json_output)
    files, skipped = data_files(path, follow_symlinks=follow_symlinks)
    check_readable(files)
    if under is not None and not FOLDER_NAME.match(under):
        raise CliError(f"--under {under!r}: one folder name (letters, digits, . _ -), no slashes", Exit.USAGE)
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    storage = aws.outputs(target, "storage")
    bucket, key_arn = storage["DataBucketName"], storage["KeyArn"]
    prefix = bucket_layout.RAW_DATA + (f"{under}/" if under else "")
    s3 = aws.client("s3", target.region)
    total = sum(f.stat().st_size for f in files)
    with aws_errors():
        uploaded = _upload(s3, files, bucket, prefix, key_arn, out, total=total, follow_symlinks=follow_symlinks)
        others = _other_files(s3, bucket, prefix, {u["key"] for u in uploaded})
    input_data = f"s3://{bucket}/{prefix}"
    data = {
        "bucket": bucket,
        "prefix": prefix,
        "input_data": input_data,
        "files": uploaded,
        "skipped": skipped,
        "also_read": others,
    }

    def human(console: Any) -> None:
        console.print(f"uploaded {len(uploaded)} file(s), {total:,} bytes, to {input_data}", markup=False)
        for name in skipped:
            console.print(f"  skipped {name}: not a file the pipeline reads", markup=False)
        if others:
            console.print(f"  the pipeline also reads the {len(others)} other file(s) already there", markup=False)
        param = f" --param InputData={input_data}" if under else ""
        console.print(f"fine-tune on it: llmp finetune --stage {target.name}{param}", markup=False)

    out.result(data, human)


def _upload(
    s3: Any,
    files: list[Path],
    bucket: str,
    prefix: str,
    key_arn: str,
    out: Output,
    *,
    total: int,
    follow_symlinks: bool,
) -> list[dict[str, Any]]:
    """Put each file under `prefix`, with one progress bar for them all; the keys and sizes uploaded."""
    uploaded = []
    with _progress(out) as progress:
        task = progress.add_task(f"s3://{bucket}/{prefix}", total=total)
        for file in files:
            key = prefix + file.name
            with _open(file, follow_symlinks=follow_symlinks) as body:
                s3.upload_fileobj(
                    body,
                    bucket,
                    key,
                    # The stage key, asked for explicitly: the object is never left to another default encryption.
                    ExtraArgs={"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": key_arn},
                    Callback=lambda sent: progress.advance(task, sent),
                )
            uploaded.append({"key": key, "bytes": file.stat().st_size})
    return uploaded


def data_files(path: Path, *, follow_symlinks: bool = False) -> tuple[list[Path], list[str]]:
    """The files to upload and the names left out; exit 2 when there is nothing the pipeline would read, or (without
    `follow_symlinks`) when `path` or a file of its folder is a symbolic link."""
    readable = ", ".join(f"*{s}" for s in RAW_SUFFIXES)
    if not follow_symlinks:
        _refuse_link(path)
    if not path.exists():
        raise CliError(f"{path}: no such file or folder", Exit.USAGE)
    if path.is_file():
        if path.suffix not in RAW_SUFFIXES:
            raise CliError(f"{path}: the pipeline reads only {readable} files", Exit.USAGE)
        return [path], []
    entries = sorted(path.iterdir())
    if not follow_symlinks:
        for entry in entries:
            _refuse_link(entry)
    files = [p for p in entries if p.is_file() and p.suffix in RAW_SUFFIXES]
    skipped = [p.name + ("/" if p.is_dir() else "") for p in entries if p not in files]
    if not files:
        raise CliError(f"{path}: no {readable} files directly in this folder (subfolders are not read)", Exit.USAGE)
    return files, skipped


def check_readable(files: list[Path]) -> None:
    """Exit 2, naming the file, the line and what it must hold, unless the PrepareData step would read text from
    every one of `files`: nothing is uploaded when one of them would fail the run minutes later."""
    problems = [problem for file in files if (problem := unreadable(file))]
    if problems:
        more = f" (and {len(problems) - 1} more file(s) the pipeline would refuse)" if len(problems) > 1 else ""
        raise CliError(f"{problems[0]}{more}; nothing uploaded", Exit.USAGE)


def unreadable(path: Path) -> str | None:
    """Why the PrepareData step would refuse `path` (its read_documents raising, or no text in it), with the line
    and the fix; None when it reads at least one document."""
    expected = EXPECTED[path.suffix]
    try:
        # Every document, as the step reads them all: a bad line anywhere fails the run.
        if sum(1 for document in prepare_data.read_documents(path) if document.strip()):
            return None
    except UnicodeDecodeError as error:
        return (
            f"{path}:{_line_of(path, error.start)}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
            f"{error.start}): a binary or differently encoded file; the pipeline reads {expected}"
        )
    except prepare_data.ConfigurationError as error:  # already `file:line: what was wrong`
        return f"{error}; the pipeline reads {expected}"
    except json.JSONDecodeError as error:  # a .json array that does not parse
        return f"{path}:{error.lineno}: not valid JSON ({error.msg}); the pipeline reads {expected}"
    except csv.Error as error:
        return f"{path}: {error}; the pipeline reads {expected}"
    return f"{path}: holds no text (an empty file, or only blank lines or rows); the pipeline reads {expected}"


def _line_of(path: Path, offset: int) -> int:
    """The line (from 1) of the byte at `offset`."""
    with path.open("rb") as handle:
        return handle.read(offset).count(b"\n") + 1


def _refuse_link(path: Path) -> None:
    """Exit 2, naming the link and what it points to, when `path` is a symbolic link: a link in a data folder may
    point anywhere (a key file, another project's data), and its bytes would land in the data bucket."""
    if path.is_symlink():
        raise CliError(
            f"{path}: a symbolic link to {os.readlink(path)}, not uploaded; pass --follow-symlinks to upload what it "
            "points to",
            Exit.USAGE,
        )


@contextlib.contextmanager
def _open(path: Path, *, follow_symlinks: bool) -> Iterator[Any]:
    """The file's bytes; without `follow_symlinks`, O_NOFOLLOW: a file replaced by a link since it was checked is
    refused, not followed."""
    flags = os.O_RDONLY | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if not follow_symlinks and path.is_symlink():
            _refuse_link(path)
        raise CliError(f"{path}: {error.strerror}", Exit.USAGE) from None
    with os.fdopen(descriptor, "rb") as body:
        yield body


def _progress(out: Output) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=out.notes,
        # A bar is for a terminal; a pipe or a CI log gets the one line the upload ends with.
        disable=not out.notes.is_terminal,
    )


def _other_files(s3: Any, bucket: str, prefix: str, uploaded: set[str]) -> list[str]:
    """Files directly under `prefix` besides the ones just uploaded: the pipeline reads them too."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        found += [
            o["Key"] for o in page.get("Contents", []) if o["Key"] not in uploaded and o["Key"].endswith(RAW_SUFFIXES)
        ]
    return found


# --- llmp data ls / llmp data rm ------------------------------------------------------------------------------------

app = typer.Typer(
    name="data",
    help="What is in the stage's data bucket under raw/ (the fine-tuning pipeline's input): list it, remove files.",
    no_args_is_help=True,
)
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="do it without asking (needed when not on a terminal)", show_default=False)
]


@app.command("ls", cls=LlmpCommand)
@handled
def list_data(
    under: Annotated[
        str | None, typer.Argument(help="only what is under raw/UNDER (a folder of raw/, as --under gave it)")
    ] = None,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the files under the data bucket's raw/ (or raw/UNDER/): key, size, last change, and whether a run with
    the default InputData reads it (files directly under raw/ with a suffix the pipeline reads)."""
    out = Output(json_mode=json_output)
    prefix = bucket_layout.RAW_DATA + (_raw_relative(under).rstrip("/") + "/" if under else "")
    aws, target, bucket = _data_bucket(config, stage)
    s3 = aws.client("s3", target.region)
    with aws_errors():
        objects = [
            {
                "key": o["Key"],
                "bytes": o["Size"],
                "modified": o["LastModified"],
                "read_by_default": _read_by_default(o["Key"]),
            }
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])
        ]
    total = sum(o["bytes"] for o in objects)
    data = {"bucket": bucket, "prefix": prefix, "objects": objects, "total_bytes": total}

    def human(console: Any) -> None:
        if not objects:
            console.print(f"nothing under s3://{bucket}/{prefix}: upload with `llmp upload-data`", markup=False)
            return
        table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
        for column, justify in (("key", "left"), ("bytes", "right"), ("modified", "left"), ("read", "left")):
            table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for o in objects:
            table.add_row(o["key"], f"{o['bytes']:,}", when(o["modified"]), "yes" if o["read_by_default"] else "")
        console.print(table)
        console.print(f"{len(objects)} file(s), {total:,} bytes in s3://{bucket}/{prefix}", markup=False)

    out.result(data, human)


@app.command("rm", cls=LlmpCommand)
@handled
def remove_data(
    keys: Annotated[list[str], typer.Argument(help="the keys to remove, as `llmp data ls` lists them (raw/...)")],
    yes: YesOption = False,
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Remove files from the data bucket's raw/ (never anything outside it). Asks first on a terminal; elsewhere
    refuses without --yes. Every key must exist, or nothing is removed."""
    out = Output(json_mode=json_output)
    for key in keys:
        _raw_key(key)
    aws, target, bucket = _data_bucket(config, stage)
    s3 = aws.client("s3", target.region)
    with aws_errors():
        sizes = {key: _size(s3, bucket, key) for key in dict.fromkeys(keys)}
    missing = [key for key, size in sizes.items() if size is None]
    if missing:
        raise CliError(
            f"no {', '.join(missing)} in s3://{bucket}: `llmp data ls --stage {target.name}` lists what is there; "
            "nothing removed",
            Exit.AWS_STATE,
        )
    what = f"{len(sizes)} file(s) from s3://{bucket} (stage {target.name}): {', '.join(sizes)}"
    confirm(f"remove {what}", yes=yes)
    with aws_errors():
        # Versioned or not, this is what DeleteObject does: the current version goes (a bucket with versioning keeps
        # the older ones; a retained bucket's lifecycle rules decide for how long).
        for key in sizes:
            s3.delete_object(Bucket=bucket, Key=key)
    data = {"bucket": bucket, "removed": [{"key": key, "bytes": size} for key, size in sizes.items()]}
    out.result(data, lambda console: console.print(f"removed {what}", markup=False))


def confirm(action: str, *, yes: bool) -> None:
    """Go on with `action` when `yes`, or when a person at a terminal says yes (asked on stderr); exit 2 when not on a
    terminal, 1 when they say no."""
    if yes:
        return
    if not on_terminal():
        raise CliError(
            f"{action}: not asked, as this is not a terminal; pass --yes to go on; nothing changed", Exit.USAGE
        )
    if not typer.confirm(f"{action}. Go on?", default=False, err=True):
        raise CliError("not confirmed; nothing changed", Exit.FAILED)


def on_terminal() -> bool:
    """Whether a person can answer a question: stdin and stderr (where it is asked) are a terminal."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _data_bucket(config: Any, stage: str | None) -> tuple[aws_module.Aws, aws_module.Stage, str]:
    platform, config_path = load(config)
    target = aws_module.one_stage(platform, config_path, stage)
    aws = aws_module.connect()
    aws.check_account(target)
    return aws, target, aws.outputs(target, "storage")["DataBucketName"]


def _raw_relative(under: str) -> str:
    """A folder of raw/, given as `sst2`, `sst2/` or `raw/sst2/`; exit 2 for anything that leaves raw/."""
    relative = under.removeprefix(bucket_layout.RAW_DATA)
    if not relative.strip("/") or ".." in relative.split("/") or relative.startswith("/"):
        raise CliError(f"{under!r}: a folder under {bucket_layout.RAW_DATA} (e.g. sst2)", Exit.USAGE)
    return relative


def _raw_key(key: str) -> None:
    """Exit 2 unless `key` names a file under raw/: rm never touches the bucket's other prefixes (prepared data,
    evaluation reports)."""
    parts = key.split("/")
    if not key.startswith(bucket_layout.RAW_DATA) or key.endswith("/") or ".." in parts or "" in parts:
        raise CliError(
            f"{key!r}: only a file's key under {bucket_layout.RAW_DATA} (as `llmp data ls` lists it) is removed; "
            "nothing removed",
            Exit.USAGE,
        )


def _size(s3: Any, bucket: str, key: str) -> int | None:
    try:
        return s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def _read_by_default(key: str) -> bool:
    """Whether a run with the default InputData (the whole of raw/) reads `key`: directly under raw/, a suffix the
    pipeline reads."""
    name = key.removeprefix(bucket_layout.RAW_DATA)
    return "/" not in name and name.endswith(RAW_SUFFIXES)
