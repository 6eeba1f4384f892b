"""`llmp upload-data`: training text into the stage's data bucket, where the fine-tuning pipeline reads it."""

from __future__ import annotations

import re
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
    config: ConfigOption = None,
    stage: StageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Upload training text (*.jsonl, *.json, *.csv, *.tsv, *.txt) to the data bucket's raw/, encrypted with the
    stage's key: the fine-tuning pipeline reads every such file there."""
    out = Output(json_mode=json_output)
    files, skipped = data_files(path)
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
            s3.upload_file(
                str(file),
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


def data_files(path: Path) -> tuple[list[Path], list[str]]:
    """The files to upload and the names left out; exit 2 when there is nothing the pipeline would read."""
    readable = ", ".join(f"*{s}" for s in RAW_SUFFIXES)
    if not path.exists():
        raise CliError(f"{path}: no such file or folder", Exit.USAGE)
    if path.is_file():
        if path.suffix not in RAW_SUFFIXES:
            raise CliError(f"{path}: the pipeline reads only {readable} files", Exit.USAGE)
        return [path], []
    entries = sorted(path.iterdir())
    files = [p for p in entries if p.is_file() and p.suffix in RAW_SUFFIXES]
    skipped = [p.name + ("/" if p.is_dir() else "") for p in entries if p not in files]
    if not files:
        raise CliError(f"{path}: no {readable} files directly in this folder (subfolders are not read)", Exit.USAGE)
    return files, skipped


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
