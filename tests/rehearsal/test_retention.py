"""After-destroy checks against moto in-process: what the stage's removal policy promises (kept, or deleted), the
auto-delete custom resource's work done by the rehearsal, and billing things gone."""

from __future__ import annotations

import pytest

from rehearsal import retention
from rehearsal.retention import Promised

ACCOUNT = "123456789012"


def _resources(aws, *, retain: bool) -> tuple[list[Promised], str]:
    aws("s3").create_bucket(Bucket="data-bucket")
    key_id = aws("kms").create_key()["KeyMetadata"]["KeyId"]
    aws("logs").create_log_group(logGroupName="handler-logs")
    policy = "Retain" if retain else "Delete"
    items = [
        Promised("staging/Storage/Data/Resource", "AWS::S3::Bucket", "data-bucket", retain, policy),
        Promised("staging/Storage/Key/Resource", "AWS::KMS::Key", key_id, retain, policy),
        Promised(
            "staging/Training/CodePackaging/HandlerLogs/Resource", "AWS::Logs::LogGroup", "handler-logs", retain, policy
        ),
    ]
    return items, key_id


def _destroy(aws, key_id: str) -> None:
    """What cdk destroy does to resources it deletes."""
    aws("kms").schedule_key_deletion(KeyId=key_id, PendingWindowInDays=7)
    aws("s3").delete_bucket(Bucket="data-bucket")
    aws("logs").delete_log_group(logGroupName="handler-logs")


def test_retain_passes_only_while_everything_is_there_and_keys_only_while_enabled(aws):
    items, key_id = _resources(aws, retain=True)
    check = retention.promise_kept(aws, "retain", items)
    assert check.passed, check.detail
    assert check.detail == (
        "retain: all 3 marked Retain are there: 1 Key, 1 LogGroup, 1 Bucket (KMS keys Enabled, not pending deletion)"
    )
    _destroy(aws, key_id)
    check = retention.promise_kept(aws, "retain", items)
    assert not check.passed
    assert f"staging/Storage/Key/Resource: key {key_id} is PendingDeletion" in check.detail
    assert "staging/Storage/Data/Resource: data-bucket is gone" in check.detail
    assert "log group handler-logs is gone" in check.detail or "handler-logs is gone" in check.detail


def test_destroy_passes_only_once_buckets_and_log_groups_are_gone_and_keys_pending_deletion(aws):
    items, key_id = _resources(aws, retain=False)
    check = retention.promise_kept(aws, "destroy", items)
    assert not check.passed
    assert "staging/Storage/Data/Resource: data-bucket is still there" in check.detail
    assert f"staging/Storage/Key/Resource: key {key_id} is Enabled" in check.detail
    _destroy(aws, key_id)
    check = retention.promise_kept(aws, "destroy", items)
    assert check.passed, check.detail
    assert (
        check.detail == "destroy: all 3 deleted with the stacks: 1 Key, 1 LogGroup, 1 Bucket; KMS keys PendingDeletion"
    )


def test_a_template_that_does_not_follow_the_stages_removal_policy_fails(aws):
    items, _ = _resources(aws, retain=True)
    leaking = [items[0], Promised(items[1].path, items[1].resource_type, items[1].physical_id, True, "Delete")]
    check = retention.promise_kept(aws, "retain", leaking)
    assert not check.passed
    assert (
        "staging/Storage/Key/Resource: DeletionPolicy Delete, but the stage's removal_policy is retain" in check.detail
    )


def test_the_data_object_survives_byte_for_byte_with_retain(aws):
    aws("s3").create_bucket(Bucket="data-bucket")
    aws("s3").put_object(Bucket="data-bucket", Key="raw/object.txt", Body=b"kept")
    assert retention.data_as_promised(aws, "retain", "data-bucket", "raw/object.txt", b"kept").passed
    changed = retention.data_as_promised(aws, "retain", "data-bucket", "raw/object.txt", b"other")
    assert not changed.passed and "changed" in changed.detail
    missing = retention.data_as_promised(aws, "retain", "data-bucket", "raw/missing.txt", b"kept")
    assert not missing.passed and "NoSuchKey" in missing.detail


def test_the_data_object_is_gone_with_its_bucket_with_destroy(aws):
    aws("s3").create_bucket(Bucket="data-bucket")
    aws("s3").put_object(Bucket="data-bucket", Key="raw/object.txt", Body=b"kept")
    still = retention.data_as_promised(aws, "destroy", "data-bucket", "raw/object.txt", b"kept")
    assert not still.passed and "is still there" in still.detail
    aws("s3").delete_object(Bucket="data-bucket", Key="raw/object.txt")
    aws("s3").delete_bucket(Bucket="data-bucket")
    gone = retention.data_as_promised(aws, "destroy", "data-bucket", "raw/object.txt", b"kept")
    assert gone.passed and "gone with its bucket (NoSuchBucket)" in gone.detail


@pytest.mark.parametrize("versioned", [True, False])
def test_emptying_deletes_every_version_and_delete_marker_so_the_bucket_can_go(aws, versioned):
    s3 = aws("s3")
    s3.create_bucket(Bucket="data-bucket")
    if versioned:
        s3.put_bucket_versioning(Bucket="data-bucket", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="data-bucket", Key="raw/a.txt", Body=b"1")
    s3.put_object(Bucket="data-bucket", Key="raw/a.txt", Body=b"2")
    s3.put_object(Bucket="data-bucket", Key="raw/b.txt", Body=b"3")
    s3.delete_object(Bucket="data-bucket", Key="raw/b.txt")  # a delete marker where versioned
    gap = retention.empty_auto_deleted_buckets(
        aws, [("dev/Storage/Data/AutoDeleteObjectsCustomResource", "data-bucket")]
    )
    assert gap is not None and gap.what.startswith("Custom::S3AutoDeleteObjects (1: dev/Storage/Data/")
    assert f"({4 if versioned else 1} in all)" in gap.why
    assert s3.list_object_versions(Bucket="data-bucket").get("Versions", []) == []
    s3.delete_bucket(Bucket="data-bucket")  # refused while a version is left (moto: silently kept by a stack delete)
    assert retention.empty_auto_deleted_buckets(aws, []) is None


def test_endpoint_model_and_config_must_be_gone_after_destroy(aws):
    sagemaker = aws("sagemaker")
    sagemaker.create_model(
        ModelName="model-1", ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/hosting", PrimaryContainer={"Image": "lmi"}
    )
    deployed = {"AWS::SageMaker::Model": "model-1", "AWS::SageMaker::Endpoint": "llm-platform-staging"}
    check = retention.billing_resources_deleted(aws, deployed)
    assert not check.passed and "AWS::SageMaker::Model model-1 still exists" in check.detail
    sagemaker.delete_model(ModelName="model-1")
    assert retention.billing_resources_deleted(aws, deployed).passed
