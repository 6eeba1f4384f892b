"""`llmp upload-data`: training text into the stage's data bucket, where the fine-tuning pipeline reads it."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from cli import aws as aws_module
from cli.errors import CliError, Exit, aws_errors
from cli.options import ConfigOption, JsonOption, StageOption, handled, load
from cli.render import Output
from core import bucket_layout

# What the pipeline's PrepareData step reads: these files, directly in its input folder (training/prepare_data.py
# RAW_SUFFIXES and raw_files(); tests/cli/test_data.py checks they agree). Files in subfolders are not read.
RAW_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".txt")
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
    uploaded = []
    with aws_errors(), _progress(out) as progress:
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
    )


def _other_files(s3: Any, bucket: str, prefix: str, uploaded: set[str]) -> list[str]:
    """Files directly under `prefix` besides the ones just uploaded: the pipeline reads them too."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        found += [
            o["Key"] for o in page.get("Contents", []) if o["Key"] not in uploaded and o["Key"].endswith(RAW_SUFFIXES)
        ]
    return found
