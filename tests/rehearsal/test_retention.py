"""After-destroy checks against moto in-process: retained things must be there, billing things gone."""

from __future__ import annotations

from rehearsal import retention
from rehearsal.retention import Retained

ACCOUNT = "123456789012"


def test_retained_resources_pass_only_while_there_and_keys_only_while_enabled(aws):
    aws("s3").create_bucket(Bucket="data-bucket")
    key_id = aws("kms").create_key()["KeyMetadata"]["KeyId"]
    aws("logs").create_log_group(logGroupName="handler-logs")
    retained = [
        Retained("staging/Storage/Data/Resource", "AWS::S3::Bucket", "data-bucket"),
        Retained("staging/Storage/Key/Resource", "AWS::KMS::Key", key_id),
        Retained("staging/Training/CodePackaging/HandlerLogs/Resource", "AWS::Logs::LogGroup", "handler-logs"),
    ]
    check = retention.retained_survive(aws, retained)
    assert check.passed, check.detail
    assert check.detail.endswith("1 Key, 1 LogGroup, 1 Bucket (KMS keys Enabled, not pending deletion)")

    aws("kms").schedule_key_deletion(KeyId=key_id, PendingWindowInDays=30)
    aws("s3").delete_bucket(Bucket="data-bucket")
    aws("logs").delete_log_group(logGroupName="handler-logs")
    check = retention.retained_survive(aws, retained)
    assert not check.passed
    assert f"staging/Storage/Key/Resource: key {key_id} is PendingDeletion" in check.detail
    assert "staging/Storage/Data/Resource: data-bucket is gone" in check.detail
    assert "log group handler-logs is gone" in check.detail


def test_retained_object_must_survive_byte_for_byte(aws):
    aws("s3").create_bucket(Bucket="data-bucket")
    aws("s3").put_object(Bucket="data-bucket", Key="raw/object.txt", Body=b"kept")
    assert retention.object_survives(aws, "data-bucket", "raw/object.txt", b"kept").passed
    changed = retention.object_survives(aws, "data-bucket", "raw/object.txt", b"other")
    assert not changed.passed and "changed" in changed.detail
    missing = retention.object_survives(aws, "data-bucket", "raw/missing.txt", b"kept")
    assert not missing.passed and "NoSuchKey" in missing.detail


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
