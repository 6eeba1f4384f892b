"""`llmp upload-data` against moto's S3 and KMS: the files the pipeline reads, where it reads them, under the stage
key."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

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
    source = ast.parse((REPO_ROOT / "training" / "prepare_data.py").read_text())
    (assigned,) = [
        node.value
        for node in source.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["RAW_SUFFIXES"]
    ]
    assert ast.literal_eval(assigned) == data.RAW_SUFFIXES


# --- files the pipeline would refuse: read with its own reader before anything is uploaded (issue 27) -------------


def raw_keys(bucket: str) -> list[str]:
    return [o["Key"] for o in client("s3").list_objects_v2(Bucket=bucket, Prefix="raw/").get("Contents", [])]


@pytest.mark.parametrize(
    ("name", "content", "where", "fix"),
    [
        (
            "empty.txt",
            b"",
            "empty.txt: holds no text",
            "the pipeline reads UTF-8 text, one document per non-empty line",
        ),
        ("blank.jsonl", b"\n  \n", "blank.jsonl: holds no text", 'with a "text" (or "sentence") string'),
        (
            "weights.txt",
            b"first line\n\x89PNG\r\n\x1a\n\x00\xff",
            "weights.txt:2: not UTF-8 text (byte 0x89 at offset 11)",
            "the pipeline reads UTF-8 text",
        ),
        (
            "pairs.jsonl",
            b'{"text": "fine"}\n{"prompt": "Q", "completion": "A"}\n',
            "pairs.jsonl:2: expected an object with a text or sentence string, got {'prompt'",
            'for prompt/completion pairs, write {"text": prompt + completion}',
        ),
        ("table.csv", b"prompt,completion\nQ,A\n", "table.csv:2: expected an object with a text", '"text" (or'),
        ("broken.json", b'[{"text": "a"},\n', "broken.json:2: not valid JSON", "one JSON array of objects"),
    ],
)
def test_upload_data_refuses_a_file_the_pipeline_would_reject_and_uploads_nothing(
    cli, deployed, tmp_path, name, content, where, fix
):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "good.jsonl").write_text('{"text": "hello"}\n')
    (folder / name).write_bytes(content)

    result = cli("upload-data", str(folder))

    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"{folder / where}" in line
    assert fix in line and line.endswith("; nothing uploaded")
    assert raw_keys(deployed.data_bucket) == []  # not even the good file


def test_upload_data_counts_the_other_files_it_refuses(cli, deployed, tmp_path):
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text("")

    result = cli("upload-data", str(tmp_path))

    assert result.exit_code == 2, result.output
    assert "a.txt: holds no text" in result.stderr and "(and 2 more file(s) the pipeline would refuse)" in result.stderr


def test_upload_data_checks_with_the_pipelines_own_reader(monkeypatch, tmp_path):
    from training import prepare_data

    seen = []

    def reader(path):
        seen.append(path)
        yield "a document"

    monkeypatch.setattr(prepare_data, "read_documents", reader)
    (tmp_path / "x.jsonl").write_text("not even JSON")

    data.check_readable([tmp_path / "x.jsonl"])

    assert seen == [tmp_path / "x.jsonl"]


def test_the_cli_reads_files_with_the_prepare_step_without_importing_torch():
    script = (
        "import sys, cli.commands.data\n"
        "print(sorted(m for m in ('training.prepare_data', 'torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['training.prepare_data']"


# --- llmp data ls / rm ---------------------------------------------------------------------------------------------


def put(bucket: str, key: str, body: bytes = b"x\n") -> None:
    client("s3").put_object(Bucket=bucket, Key=key, Body=body)


def test_data_ls_lists_what_is_under_raw_with_sizes_and_dates(cli, deployed):
    put(deployed.data_bucket, "raw/train.jsonl", b'{"text": "a"}\n')
    put(deployed.data_bucket, "raw/sst2/sst2.csv", b"sentence\ngood\n")
    put(deployed.data_bucket, "prepared/run-1/train/train.jsonl")

    result = cli("data", "ls")

    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[1][:3] == ["raw/sst2/sst2.csv", "14", rows[1][2]] and rows[1][-1] == "UTC"
    assert rows[2][:2] == ["raw/train.jsonl", "14"] and rows[2][-1] == "yes"  # what a default run reads
    assert "prepared/" not in result.stdout
    assert f"2 file(s), 28 bytes in s3://{deployed.data_bucket}/raw/" in result.stdout


def test_data_ls_json_under_a_folder(cli, deployed):
    put(deployed.data_bucket, "raw/train.jsonl")
    put(deployed.data_bucket, "raw/sst2/sst2.csv", b"sentence\ngood\n")

    result = cli("data", "ls", "sst2", "--json")

    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["prefix"] == "raw/sst2/"
    assert [(o["key"], o["bytes"], o["read_by_default"]) for o in listed["objects"]] == [
        ("raw/sst2/sst2.csv", 14, False)
    ]
    assert listed["objects"][0]["modified"].endswith("+00:00")


@pytest.mark.parametrize("key", ["prepared/run-1/train.jsonl", "raw/", "raw/../prepared/x", "/raw/x.txt", "x.txt"])
def test_data_rm_never_removes_outside_raw(cli, deployed, key):
    put(deployed.data_bucket, "prepared/run-1/train.jsonl")

    result = cli("data", "rm", key, "--yes")

    assert result.exit_code == 2, result.output
    assert f"{key!r}: only a file's key under raw/" in result.stderr
    client("s3").head_object(Bucket=deployed.data_bucket, Key="prepared/run-1/train.jsonl")


def test_data_rm_off_a_terminal_refuses_without_yes(cli, deployed):
    put(deployed.data_bucket, "raw/train.jsonl")

    refused = cli("data", "rm", "raw/train.jsonl")

    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith(f"llmp: remove 1 file(s) from s3://{deployed.data_bucket} (stage dev): ")
    assert "raw/train.jsonl: not asked, as this is not a terminal; pass --yes to go on" in refused.stderr
    assert raw_keys(deployed.data_bucket) == ["raw/train.jsonl"]

    done = cli("data", "rm", "raw/train.jsonl", "--yes", "--json")

    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["removed"] == [{"key": "raw/train.jsonl", "bytes": 2}]
    assert raw_keys(deployed.data_bucket) == []


@pytest.mark.parametrize(("answer", "code", "left"), [("y\n", 0, []), ("n\n", 1, ["raw/a.txt"])])
def test_data_rm_on_a_terminal_asks_first(cli, deployed, monkeypatch, answer, code, left):
    monkeypatch.setattr(data, "on_terminal", lambda: True)
    put(deployed.data_bucket, "raw/a.txt")

    result = cli("data", "rm", "raw/a.txt", input=answer)

    assert result.exit_code == code, result.output
    assert f"remove 1 file(s) from s3://{deployed.data_bucket} (stage dev): raw/a.txt. Go on? [y/N]" in result.stderr
    assert raw_keys(deployed.data_bucket) == left


def test_data_rm_removes_nothing_when_a_key_is_missing(cli, deployed):
    put(deployed.data_bucket, "raw/a.txt")

    result = cli("data", "rm", "raw/a.txt", "raw/typo.txt", "--yes")

    assert result.exit_code == 3, result.output
    assert "no raw/typo.txt in s3://" in result.stderr and "nothing removed" in result.stderr
    assert raw_keys(deployed.data_bucket) == ["raw/a.txt"]


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
