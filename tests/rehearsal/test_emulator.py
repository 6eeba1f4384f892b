"""The emulator's fixes to moto, in-process: each is still needed (moto alone fails) and each works."""

from __future__ import annotations

import json

import boto3
import moto
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.cloudformation import models as cloudformation_models
from moto.kms.models import Key

from rehearsal import emulator

REGION = "us-east-1"
EXPORTING = {
    "Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}},
    "Outputs": {"BucketName": {"Value": {"Ref": "Bucket"}, "Export": {"Name": "shared-bucket"}}},
}
IMPORTING = {
    "Resources": {
        "Queue": {
            "Type": "AWS::SQS::Queue",
            "Properties": {"QueueName": {"Fn::Join": ["-", [{"Fn::ImportValue": "shared-bucket"}, "queue"]]}},
        }
    }
}
TAGGED_KEY = {
    "Resources": {
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {
                "Description": "the stage key",
                "EnableKeyRotation": True,
                "KeyPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                            "Action": "kms:*",
                            "Resource": "*",
                        }
                    ],
                },
                "Tags": [{"Key": "stage", "Value": "staging"}],
            },
        }
    }
}


def deploy(cloudformation, stack: str, template: dict, change_set_type: str = "CREATE") -> None:
    """What `cdk deploy` does: a change set, then its execution."""
    cloudformation.create_change_set(
        StackName=stack,
        ChangeSetName="cdk-deploy-change-set",
        ChangeSetType=change_set_type,
        TemplateBody=json.dumps(template),
    )
    cloudformation.execute_change_set(StackName=stack, ChangeSetName="cdk-deploy-change-set")


def test_moto_alone_gives_a_change_set_stack_no_outputs_and_no_exports():
    # If this fails, moto has fixed it: drop the "change-set-outputs" fix.
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "exporting", EXPORTING)
        assert "Outputs" not in cloudformation.describe_stacks(StackName="exporting")["Stacks"][0]
        assert cloudformation.list_exports()["Exports"] == []


def test_moto_alone_hides_exports_from_a_stack_created_by_a_change_set():
    # If this fails, moto has fixed it: drop the "imports-in-change-sets" fix. (CreateStack exports correctly.)
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack(StackName="exporting", TemplateBody=json.dumps(EXPORTING))
        assert [e["Name"] for e in cloudformation.list_exports()["Exports"]] == ["shared-bucket"]
        with pytest.raises(ClientError, match="No export named shared-bucket found"):
            deploy(cloudformation, "importing", IMPORTING)


def test_moto_alone_fails_a_tagged_kms_key_from_a_template():
    # If this fails, moto has fixed it: drop the "kms-key-from-template" fix.
    with mock_aws(), pytest.raises(KeyError, match="TagKey"):
        deploy(boto3.client("cloudformation", region_name=REGION), "key", TAGGED_KEY)


def test_fixed_change_sets_export_and_a_later_stack_imports():
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "exporting", EXPORTING)
        bucket = boto3.client("s3", region_name=REGION).list_buckets()["Buckets"][0]["Name"]
        outputs = cloudformation.describe_stacks(StackName="exporting")["Stacks"][0]["Outputs"]
        assert [(o["OutputKey"], o["OutputValue"], o.get("ExportName")) for o in outputs] == [
            ("BucketName", bucket, "shared-bucket")
        ]
        assert [(e["Name"], e["Value"]) for e in cloudformation.list_exports()["Exports"]] == [
            ("shared-bucket", bucket)
        ]

        deploy(cloudformation, "importing", IMPORTING)
        queues = boto3.client("sqs", region_name=REGION).list_queues()["QueueUrls"]
        assert [q.rsplit("/", 1)[-1] for q in queues] == [f"{bucket}-queue"]


def test_fixed_update_change_set_replaces_the_stacks_exports():
    renamed = json.loads(json.dumps(EXPORTING).replace('"shared-bucket"', '"renamed-bucket"'))
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "exporting", EXPORTING)
        deploy(cloudformation, "exporting", renamed, change_set_type="UPDATE")
        assert [e["Name"] for e in cloudformation.list_exports()["Exports"]] == ["renamed-bucket"]


def test_fixed_kms_key_keeps_its_tags_and_policy_and_answers_describe():
    with mock_aws(), emulator.patched():
        deploy(boto3.client("cloudformation", region_name=REGION), "key", TAGGED_KEY)
        kms = boto3.client("kms", region_name=REGION)
        key_id = kms.list_keys()["Keys"][0]["KeyId"]
        assert kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"] == "Enabled"
        assert kms.list_resource_tags(KeyId=key_id)["Tags"] == [{"TagKey": "stage", "TagValue": "staging"}]
        policy = json.loads(kms.get_key_policy(KeyId=key_id, PolicyName="default")["Policy"])
        assert policy == TAGGED_KEY["Resources"]["Key"]["Properties"]["KeyPolicy"]


def test_fixes_are_undone_after_the_block():
    before = (
        Key.__dict__["create_from_cloudformation_json"],
        cloudformation_models.ChangeSet.apply,
        cloudformation_models.Stack._create_resource_map,
    )
    with emulator.patched():
        assert cloudformation_models.ChangeSet.apply is not before[1]
    after = (
        Key.__dict__["create_from_cloudformation_json"],
        cloudformation_models.ChangeSet.apply,
        cloudformation_models.Stack._create_resource_map,
    )
    assert after == before


def test_refuses_a_moto_version_the_fixes_were_not_written_for(monkeypatch):
    monkeypatch.setattr(moto, "__version__", "6.0.0")
    with pytest.raises(RuntimeError, match=r"patches moto 5\.2\.5 internals, but moto 6\.0\.0 is installed"):
        emulator.apply()
    assert emulator.MOTO_VERSION == "5.2.5"
