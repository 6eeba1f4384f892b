"""After-deploy and redeploy checks against moto in-process: each passes on the right state, fails on a wrong one."""

from __future__ import annotations

from rehearsal import checks
from rehearsal.assembly import StackTemplate
from rehearsal.deployment import Deployment
from rehearsal.findings import Gap

REGION = "us-east-1"
ACCOUNT = "123456789012"


def storage_stack(bucket_properties: dict) -> StackTemplate:
    template = {
        "Resources": {
            "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
            "Data": {"Type": "AWS::S3::Bucket", "Properties": bucket_properties, "DeletionPolicy": "Retain"},
        }
    }
    return StackTemplate("llm-platform-staging-storage", "staging/Storage", template, None)


def test_bucket_properties_moto_ignores_are_gaps_and_encryption_is_compared(aws):
    key_arn = aws("kms").create_key(Description="stage key")["KeyMetadata"]["Arn"]
    key_id = key_arn.rsplit("/", 1)[-1]
    aws("s3").create_bucket(Bucket="data-bucket")
    properties = {
        "BucketEncryption": {
            "ServerSideEncryptionConfiguration": [
                {
                    "ServerSideEncryptionByDefault": {
                        "SSEAlgorithm": "aws:kms",
                        "KMSMasterKeyID": {"Fn::GetAtt": ["Key", "Arn"]},
                    },
                    "BucketKeyEnabled": True,
                }
            ]
        },
        "VersioningConfiguration": {"Status": "Enabled"},
    }
    stack = storage_stack(properties)
    deployment = Deployment(
        aws, [stack], ACCOUNT, REGION, {stack.stack_name: {"Key": key_id, "Data": "data-bucket"}}, {}
    )

    def encrypt(algorithm: str, **extra) -> None:
        aws("s3").put_bucket_encryption(
            Bucket="data-bucket",
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": algorithm, **extra}}]
            },
        )

    encrypt("aws:kms", KMSMasterKeyID=key_arn)
    check, gap = checks.buckets(deployment)
    assert check.passed, check.detail
    assert isinstance(gap, Gap) and gap.what.startswith(
        "S3 bucket properties BucketKeyEnabled, VersioningConfiguration"
    )

    encrypt("AES256")  # not the stage key: a real failure, not a gap
    check = checks.buckets(deployment)[0]
    assert not check.passed
    assert "BucketEncryption.SSEAlgorithm: expected 'aws:kms', got 'AES256'" in check.detail

    encrypt("aws:kms", KMSMasterKeyID=key_arn)
    aws("s3").put_bucket_versioning(Bucket="data-bucket", VersioningConfiguration={"Status": "Suspended"})
    check = checks.buckets(deployment)[0]  # once the emulator shows a property, it is compared
    assert not check.passed and "VersioningConfiguration: expected 'Enabled', got 'Suspended'" in check.detail


def test_redeploy_fails_when_a_stack_was_deployed_again_or_changed():
    stacks = [
        StackTemplate("llm-platform-staging-storage", "staging/Storage", {}, None),
        StackTemplate("llm-platform-staging-serving", "staging/Serving", {}, None),
    ]
    skipped = (
        "✅  staging/Storage (llm-platform-staging-storage) (no changes)\n"
        "✅  staging/Serving (llm-platform-staging-serving) (no changes)\n"
    )
    events = {"llm-platform-staging-storage": 14, "llm-platform-staging-serving": 21}
    assert checks.redeploy_changed_nothing(stacks, skipped, events, events).passed

    updated = skipped.replace("staging/Serving (llm-platform-staging-serving) (no changes)", "staging/Serving (...)")
    check = checks.redeploy_changed_nothing(stacks, updated, events, {**events, "llm-platform-staging-serving": 24})
    assert not check.passed
    assert "cdk deploy did not report 'staging/Serving ... (no changes)'" in check.detail
    assert "llm-platform-staging-serving has 3 new events" in check.detail
