"""`llmp upload-data` against moto's S3 and KMS: the files the pipeline reads, where it reads them, under the stage
key."""

from __future__ import annotations

import ast
import json

import pytest

from cli.commands import data
from core.config import REPO_ROOT
from tests.cli.conftest import client


def test_upload_data_puts_files_under_raw_encrypted_with_the_stage_key(cli, deployed, tmp_path):
    folder = tmp_path / "data"
    (folder / "nested").mkdir(parents=True)
    (folder / "train.jsonl").write_text('{"text": "hello"}\n' * 100)
    (folder / "more.txt").write_text("a line\n")
    (folder / "README.md").write_text("not data")

    result = cli("upload-data", str(folder), "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [f["key"] for f in report["files"]] == ["raw/more.txt", "raw/train.jsonl"]
    assert report["skipped"] == ["README.md", "nested/"]
    assert report["input_data"] == f"s3://{deployed.data_bucket}/raw/"
    s3 = client("s3")
    head = s3.head_object(Bucket=deployed.data_bucket, Key="raw/train.jsonl")
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"] == deployed.key_arn
    body = s3.get_object(Bucket=deployed.data_bucket, Key="raw/train.jsonl")["Body"].read()
    assert body == (folder / "train.jsonl").read_bytes()


def test_upload_data_under_a_folder_says_which_input_to_fine_tune_on(cli, deployed, tmp_path):
    s3 = client("s3")
    s3.put_object(Bucket=deployed.data_bucket, Key="raw/old.txt", Body=b"earlier data")
    data_file = tmp_path / "sst2.csv"
    data_file.write_text("sentence,label\ngood,1\n")

    result = cli("upload-data", str(data_file), "--under", "sst2")

    assert result.exit_code == 0, result.output
    assert f"uploaded 1 file(s), 22 bytes, to s3://{deployed.data_bucket}/raw/sst2/" in result.stdout
    assert f"llmp finetune --stage dev --param InputData=s3://{deployed.data_bucket}/raw/sst2/" in result.stdout
    s3.head_object(Bucket=deployed.data_bucket, Key="raw/sst2/sst2.csv")


def test_upload_data_says_the_pipeline_also_reads_what_is_already_there(cli, deployed, tmp_path):
    s3 = client("s3")
    s3.put_object(Bucket=deployed.data_bucket, Key="raw/old.txt", Body=b"earlier data")
    (tmp_path / "new.txt").write_text("new\n")

    result = cli("upload-data", str(tmp_path / "new.txt"))

    assert result.exit_code == 0, result.output
    assert "the pipeline also reads the 1 other file(s) already there" in result.stdout


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.txt", "no such file or folder"),
        ("notes.md", "the pipeline reads only *.jsonl, *.json, *.csv, *.tsv, *.txt files"),
        ("empty", "no *.jsonl, *.json, *.csv, *.tsv, *.txt files directly in this folder"),
    ],
)
def test_upload_data_refuses_what_the_pipeline_would_not_read(cli, deployed, tmp_path, name, message):
    (tmp_path / "notes.md").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "deeper").mkdir()
    (tmp_path / "empty" / "deeper" / "x.txt").write_text("x")

    result = cli("upload-data", str(tmp_path / name))

    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_upload_data_refuses_a_folder_name_with_slashes(cli, deployed, tmp_path):
    (tmp_path / "a.txt").write_text("x")

    result = cli("upload-data", str(tmp_path / "a.txt"), "--under", "a/b")

    assert result.exit_code == 2, result.output
    assert "--under 'a/b': one folder name" in result.stderr


def test_the_suffixes_uploaded_are_the_ones_the_prepare_step_reads():
    # Read from the step's source, not imported: it imports its own `finetune` package, and torch with it.
    source = ast.parse((REPO_ROOT / "training" / "prepare_data.py").read_text())
    (assigned,) = [
        node.value
        for node in source.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["RAW_SUFFIXES"]
    ]
    assert ast.literal_eval(assigned) == data.RAW_SUFFIXES


# --- symbolic links: refused, named with their target, unless --follow-symlinks (issue 26, finding 6) -------------


@pytest.mark.parametrize("given", ["link", "folder"])
def test_upload_data_refuses_a_symbolic_link_naming_it_and_its_target(cli, deployed, tmp_path, given):
    secret = tmp_path / "elsewhere" / "credentials.txt"
    secret.parent.mkdir()
    secret.write_text("aws_secret_access_key = not-training-data\n")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"text": "hello"}\n')
    link = folder / "notes.txt"
    link.symlink_to(secret)

    result = cli("upload-data", str(link if given == "link" else folder))

    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"{link}: a symbolic link to {secret}, not uploaded; pass --follow-symlinks" in line
    # Nothing uploaded, not even the folder's other files.
    assert client("s3").list_objects_v2(Bucket=deployed.data_bucket, Prefix="raw/").get("KeyCount", 0) == 0


def test_upload_data_refuses_the_folder_given_as_a_symbolic_link(cli, deployed, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.txt").write_text("x\n")
    (tmp_path / "data").symlink_to(tmp_path / "real")

    result = cli("upload-data", str(tmp_path / "data"))

    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'data'}: a symbolic link to {tmp_path / 'real'}, not uploaded" in result.stderr


def test_upload_data_with_follow_symlinks_uploads_the_targets_bytes_under_the_links_name(cli, deployed, tmp_path):
    target = tmp_path / "elsewhere" / "shared.jsonl"
    target.parent.mkdir()
    target.write_text('{"text": "shared"}\n')
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"text": "hello"}\n')
    (folder / "shared.jsonl").symlink_to(target)

    result = cli("upload-data", str(folder), "--follow-symlinks", "--json")

    assert result.exit_code == 0, result.output
    assert [f["key"] for f in json.loads(result.stdout)["files"]] == ["raw/shared.jsonl", "raw/train.jsonl"]
    s3 = client("s3")
    body = s3.get_object(Bucket=deployed.data_bucket, Key="raw/shared.jsonl")["Body"].read()
    assert body == target.read_bytes()
    assert s3.head_object(Bucket=deployed.data_bucket, Key="raw/shared.jsonl")["SSEKMSKeyId"] == deployed.key_arn


def test_a_file_replaced_by_a_link_after_the_check_is_not_followed(tmp_path):
    target = tmp_path / "secret.txt"
    target.write_text("secret\n")
    link = tmp_path / "a.txt"
    link.symlink_to(target)
    with pytest.raises(data.CliError, match="a symbolic link to"), data._open(link, follow_symlinks=False):
        pass
    with data._open(link, follow_symlinks=True) as body:
        assert body.read() == b"secret\n"
