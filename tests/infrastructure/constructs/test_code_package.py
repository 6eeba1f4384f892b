"""The CodePackage construct: what CloudFormation sees changes exactly when the source or rendered files change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from infrastructure.constructs.code_package import CodePackage
from tests.cdk_assembly import cdk_context, render


def synth(source: Path, rendered: dict[str, str] | None = None, prefix: str = "code/inference/") -> dict:
    app = App(context=cdk_context())
    stack = Stack(app, "Test", env=Environment(account="111111111111", region="us-east-1"))
    key = kms.Key(stack, "Key")
    bucket = s3.Bucket(stack, "Bucket", encryption_key=key)
    CodePackage(
        stack,
        "Code",
        source=source,
        bucket=bucket,
        encryption_key=key,
        prefix=prefix,
        archive_name="model.tar.gz",
        top_level_dir="deepspeed",
        rendered_files=rendered,
        required_files=["model.py"],
    )
    return app.synth().get_stack_by_name("Test").template


def package_properties(template: dict) -> dict:
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::CodePackage"]
    return render(resource["Properties"])


@pytest.fixture
def source(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text("def handle(inputs):\n    return None\n")
    (tmp_path / "serving.properties").write_text("engine=DeepSpeed\n")
    return tmp_path


def test_properties_describe_the_package(source):
    props = package_properties(synth(source, {"serving.properties": "engine=DeepSpeed\noption.dtype=fp16\n"}))
    assert props["TargetPrefix"] == "code/inference/"
    assert props["ArchiveName"] == "model.tar.gz"
    assert props["TopLevelDirectory"] == "deepspeed"
    assert props["RequiredFiles"] == ["model.py"]
    assert props["RenderedFiles"] == {"serving.properties": "engine=DeepSpeed\noption.dtype=fp16\n"}
    assert props["SourceKey"].endswith(".zip")
    assert props["TargetBucket"] == "<Bucket>"


def test_unchanged_inputs_give_identical_properties(source):
    assert package_properties(synth(source)) == package_properties(synth(source))


def test_changing_a_source_file_changes_only_the_source_key(source):
    before = package_properties(synth(source))
    (source / "model.py").write_text("# changed\n")
    after = package_properties(synth(source))
    assert after["SourceKey"] != before["SourceKey"]
    assert {k: v for k, v in after.items() if k != "SourceKey"} == {k: v for k, v in before.items() if k != "SourceKey"}


def test_caches_do_not_change_the_source(source):
    before = package_properties(synth(source))
    (source / "__pycache__").mkdir()
    (source / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (source / "stale.pyc").write_bytes(b"\x00")
    assert package_properties(synth(source)) == before


def test_changing_rendered_config_changes_only_the_rendered_files(source):
    before = package_properties(synth(source, {"serving.properties": "option.tensor_parallel_degree=1\n"}))
    after = package_properties(synth(source, {"serving.properties": "option.tensor_parallel_degree=8\n"}))
    assert after["RenderedFiles"] != before["RenderedFiles"]
    assert {k: v for k, v in after.items() if k != "RenderedFiles"} == {
        k: v for k, v in before.items() if k != "RenderedFiles"
    }


def test_handler_can_read_the_asset_and_write_only_its_prefix(source):
    template = synth(source)
    policies = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
    handler_policy = next(p for p in policies if "HandlerRole" in json.dumps(p["Properties"]["Roles"]))
    statements = render(handler_policy["Properties"]["PolicyDocument"]["Statement"])
    writes = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert writes == [
        {
            "Action": [
                "s3:AbortMultipartUpload",
                "s3:DeleteObjectTagging",
                "s3:GetObject",
                "s3:PutObject",
                "s3:PutObjectTagging",
            ],
            "Effect": "Allow",
            "Resource": "<Bucket.Arn>/code/inference/*",
        }
    ]
    assert not any("s3:DeleteObject" in s["Action"] for s in statements)
    reads = [s for s in statements if "s3:GetObject*" in s["Action"]]
    assert [s["Resource"] for s in reads] == [
        [
            "arn:aws:s3:::cdk-hnb659fds-assets-111111111111-us-east-1",
            "arn:aws:s3:::cdk-hnb659fds-assets-111111111111-us-east-1/*",
        ]
    ]


def test_handler_has_room_and_time_for_the_build(source):
    template = synth(source)
    functions = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    handler = next(f for f in functions if f.get("Handler") == "code_package_handler.on_event")
    assert handler["Runtime"] == "python3.14"
    assert handler["Timeout"] == 600
    assert handler["EphemeralStorage"] == {"Size": 4096}
    assert "ManagedPolicyArns" not in json.dumps(template)  # roles are explicit: no AWSLambdaBasicExecutionRole


def test_one_handler_serves_every_package_of_a_stack(tmp_path, source):
    app = App(context=cdk_context())
    stack = Stack(app, "Test", env=Environment(account="111111111111", region="us-east-1"))
    key = kms.Key(stack, "Key")
    bucket = s3.Bucket(stack, "Bucket", encryption_key=key)
    for name, prefix in [("A", "code/a/"), ("B", "code/b/")]:
        CodePackage(
            stack, name, source=source, bucket=bucket, encryption_key=key, prefix=prefix, archive_name="a.tar.gz"
        )
    template = app.synth().get_stack_by_name("Test").template
    handlers = [
        r for r in template["Resources"].values() if r["Properties"].get("Handler") == "code_package_handler.on_event"
    ]
    assert len(handlers) == 1


def test_bad_arguments_fail_at_synth(tmp_path, source):
    with pytest.raises(ValueError, match="must end with '/'"):
        synth(source, prefix="code/inference")
    with pytest.raises(ValueError, match="is not a directory"):
        synth(tmp_path / "missing")
