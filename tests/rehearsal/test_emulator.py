"""The emulator's fixes to moto, in-process: each is still needed (moto alone fails) and each works."""

from __future__ import annotations

import json

import boto3
import moto
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.cloudformation import models as cloudformation_models
from moto.cloudformation import parsing as cloudformation_parsing
from moto.kms.models import Key
from moto.sagemaker import models as sagemaker_models

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

# The Provider framework's waiter, in a stack named like the serving stack: moto's generated name is 86 characters.
LONG_STACK = "llm-platform-staging-serving"


def state_machine(**properties) -> dict:
    return {
        "Resources": {
            "PromotionProviderwaiterstatemachine331BC10A": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "DefinitionString": json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
                    "RoleArn": "arn:aws:iam::123456789012:role/waiter",
                    **properties,
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


def test_moto_alone_names_a_state_machine_beyond_the_80_characters_step_functions_takes():
    with mock_aws(), pytest.raises(Exception, match="Member must have length less than or equal to 80"):
        # The Step Functions error comes back as the CloudFormation call's own answer, in JSON: not even a ClientError.
        deploy(boto3.client("cloudformation", region_name=REGION), LONG_STACK, state_machine())


def test_fixed_state_machine_name_fits_and_the_stack_completes():
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, LONG_STACK, state_machine())
        assert cloudformation.describe_stacks(StackName=LONG_STACK)["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
        [machine] = boto3.client("stepfunctions", region_name=REGION).list_state_machines()["stateMachines"]
        assert len(machine["name"]) == 80 and machine["name"].startswith(f"{LONG_STACK}-PromotionProvider")


def test_fixed_a_resource_that_fails_rolls_its_stack_back_with_the_reason():
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "waiter", state_machine(StateMachineName="x" * 81))  # the call itself succeeds
        assert cloudformation.describe_stacks(StackName="waiter")["Stacks"][0]["StackStatus"] == "ROLLBACK_COMPLETE"
        events = cloudformation.describe_stack_events(StackName="waiter")["StackEvents"]
        [failed] = [e for e in events if e["ResourceStatus"] == "CREATE_FAILED"]
        assert "Member must have length less than or equal to 80" in failed["ResourceStatusReason"]


# A policy of the serving stack splits the weights lookup's S3 URI, a custom resource's attribute: null here, as the
# Lambda never runs. AWS::NoValue is the same null without a Lambda to set up.
SPLIT_NULL = {"Fn::Select": [1, {"Fn::Split": ["s3://", {"Ref": "AWS::NoValue"}]}]}
SPLITS_A_NULL = {
    "Resources": {
        "Queue": {
            "Type": "AWS::SQS::Queue",
            "Properties": {"Tags": [{"Key": "weights", "Value": {"Fn::Join": ["", ["at-", SPLIT_NULL]]}}]},
        }
    }
}


def test_moto_alone_fails_a_stack_that_splits_a_null():
    with mock_aws(), pytest.raises(AttributeError, match="'NoneType' object has no attribute 'split'"):
        deploy(boto3.client("cloudformation", region_name=REGION), "split", SPLITS_A_NULL)


def test_fixed_split_and_select_pass_the_null_through():
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "split", SPLITS_A_NULL)
        assert cloudformation.describe_stacks(StackName="split")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
        sqs = boto3.client("sqs", region_name=REGION)
        [url] = sqs.list_queues()["QueueUrls"]
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"weights": "at-None"}  # as moto's Fn::Join writes null


# An endpoint config as the serving stack declares it, on the instance type given.
def endpoint_config(instance_type: str) -> dict:
    return {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": "arn:aws:iam::123456789012:role/hosting",
                    "PrimaryContainer": {"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/lmi:latest"},
                },
            },
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {
                            "VariantName": "AllTraffic",
                            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                            "InstanceType": instance_type,
                            "InitialInstanceCount": 1,
                        }
                    ]
                },
            },
        }
    }


def test_moto_alone_refuses_an_endpoint_on_instance_types_sagemaker_takes():
    # If this fails, moto has caught up with SageMaker's list: drop the "endpoint-instance-types" fix.
    assert {"ml.g5.2xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.g6e.12xlarge"} <= set(
        emulator.endpoint_instance_types()
    )
    with mock_aws():
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        sagemaker.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::123456789012:role/r")
        for instance_type in ("ml.g5.2xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.g6e.12xlarge"):
            with pytest.raises(ClientError, match=f"Value '{instance_type}' at 'instanceType' failed to satisfy"):
                sagemaker.create_endpoint_config(
                    EndpointConfigName="c",
                    ProductionVariants=[
                        {"VariantName": "v", "ModelName": "m", "InstanceType": instance_type, "InitialInstanceCount": 1}
                    ],
                )


def test_fixed_endpoint_configs_take_exactly_the_instance_types_of_botocores_service_model():
    accepted = emulator.endpoint_instance_types()
    assert len(accepted) == len(set(accepted)) > 200 and "ml.g4dn.xlarge" in accepted
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "serving", endpoint_config("ml.p4d.24xlarge"))
        assert cloudformation.describe_stacks(StackName="serving")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
        [config] = boto3.client("sagemaker", region_name=REGION).list_endpoint_configs()["EndpointConfigs"]
        described = boto3.client("sagemaker", region_name=REGION).describe_endpoint_config(
            EndpointConfigName=config["EndpointConfigName"]
        )
        assert described["ProductionVariants"][0]["InstanceType"] == "ml.p4d.24xlarge"
        # As strict as SageMaker: a type outside the enum (ml.p3dn is a training type only) still fails the stack.
        deploy(cloudformation, "outside", endpoint_config("ml.p3dn.24xlarge"))
        assert cloudformation.describe_stacks(StackName="outside")["Stacks"][0]["StackStatus"] == "ROLLBACK_COMPLETE"
        events = cloudformation.describe_stack_events(StackName="outside")["StackEvents"]
        [failed] = [e for e in events if e["ResourceStatus"] == "CREATE_FAILED"]
        assert (
            "Value 'ml.p3dn.24xlarge' at 'instanceType' failed to satisfy constraint" in failed["ResourceStatusReason"]
        )


# An endpoint that hosts inference components: its variant names no model (the components bring them).
VARIANT_FOR_COMPONENTS = {
    "VariantName": "AllTraffic",
    "InstanceType": "ml.g5.2xlarge",
    "InitialInstanceCount": 1,
    "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
}


def test_moto_alone_fails_an_endpoint_config_whose_variant_names_no_model():
    # If this fails, moto takes variants without a model: drop the "variants-without-a-model" fix. (On ml.g4dn, which
    # moto's own list has, so only the missing ModelName is at stake.)
    with mock_aws(), pytest.raises(KeyError, match="ModelName"):
        boto3.client("sagemaker", region_name=REGION).create_endpoint_config(
            EndpointConfigName="components",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/hosting",
            ProductionVariants=[{**VARIANT_FOR_COMPONENTS, "InstanceType": "ml.g4dn.xlarge"}],
        )


def test_fixed_a_variant_without_a_model_is_taken_and_one_naming_a_missing_model_is_not():
    with mock_aws(), emulator.patched():
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        sagemaker.create_endpoint_config(
            EndpointConfigName="components",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/hosting",
            ProductionVariants=[VARIANT_FOR_COMPONENTS],
        )
        described = sagemaker.describe_endpoint_config(EndpointConfigName="components")["ProductionVariants"]
        assert [v["InstanceType"] for v in described] == ["ml.g5.2xlarge"] and "ModelName" not in described[0]
        with pytest.raises(ClientError, match="Could not find model"):
            sagemaker.create_endpoint_config(
                EndpointConfigName="missing",
                ProductionVariants=[{**VARIANT_FOR_COMPONENTS, "ModelName": "nowhere"}],
            )


# A key the stack deletes with it (a stage with removal_policy destroy: no DeletionPolicy Retain), 7 days' window.
DELETED_KEY = {
    "Resources": {
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {**TAGGED_KEY["Resources"]["Key"]["Properties"], "PendingWindowInDays": 7},
            "DeletionPolicy": "Delete",
        }
    }
}


def test_moto_alone_removes_a_deleted_stacks_key_at_once():
    # If this fails, moto schedules the deletion: drop the "keys-deleted-with-their-stack" fix. (Untagged: plain moto
    # cannot create a tagged key from a template at all.)
    properties = {k: v for k, v in DELETED_KEY["Resources"]["Key"]["Properties"].items() if k != "Tags"}
    untagged = {"Resources": {"Key": {**DELETED_KEY["Resources"]["Key"], "Properties": properties}}}
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack(StackName="key", TemplateBody=json.dumps(untagged))
        kms = boto3.client("kms", region_name=REGION)
        [key] = kms.list_keys()["Keys"]
        cloudformation.delete_stack(StackName="key")
        with pytest.raises(ClientError, match="NotFoundException"):
            kms.describe_key(KeyId=key["KeyId"])


def test_fixed_a_deleted_stacks_key_is_pending_deletion_for_the_templates_window():
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "key", DELETED_KEY)
        kms = boto3.client("kms", region_name=REGION)
        [key] = kms.list_keys()["Keys"]
        cloudformation.delete_stack(StackName="key")
        metadata = kms.describe_key(KeyId=key["KeyId"])["KeyMetadata"]
        assert metadata["KeyState"] == "PendingDeletion"
        days = (metadata["DeletionDate"] - metadata["CreationDate"]).total_seconds() / 86400
        assert 6.9 < days < 7.1


# The Hugging Face token secret of the storage stack and a role allowed to read it (the staging role's grant).
SECRET_AND_READER = {
    "Resources": {
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {"KeyPolicy": TAGGED_KEY["Resources"]["Key"]["Properties"]["KeyPolicy"]},
        },
        "Token": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Name": "llamalora/dev/huggingface-token",
                "Description": "Hugging Face read token",
                "KmsKeyId": {"Fn::GetAtt": ["Key", "Arn"]},
            },
            "DeletionPolicy": "Delete",
        },
        "Role": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "sagemaker.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                },
            },
        },
        "RolePolicy": {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "PolicyName": "read-token",
                "Roles": [{"Ref": "Role"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": "Token"}}
                    ],
                },
            },
        },
    },
    "Outputs": {"TokenArn": {"Value": {"Ref": "Token"}}},
}


@pytest.mark.filterwarnings("ignore:Tried to parse AWS..SecretsManager..Secret")
def test_moto_alone_skips_a_secret_so_a_policy_naming_it_fails_the_stack():
    # If this fails, moto's CloudFormation creates secrets: drop the "secrets-from-templates" fix.
    with mock_aws(), pytest.raises(Exception, match="Policy statement must contain resources"):
        deploy(boto3.client("cloudformation", region_name=REGION), "storage", SECRET_AND_READER)


def test_fixed_a_secret_is_created_referenced_by_its_arn_and_deleted_with_its_stack():
    with mock_aws(), emulator.patched():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        deploy(cloudformation, "storage", SECRET_AND_READER)
        stack = cloudformation.describe_stacks(StackName="storage")["Stacks"][0]
        assert stack["StackStatus"] == "CREATE_COMPLETE"
        secrets = boto3.client("secretsmanager", region_name=REGION)
        secret = secrets.describe_secret(SecretId="llamalora/dev/huggingface-token")
        assert [o["OutputValue"] for o in stack["Outputs"]] == [secret["ARN"]]
        assert secret["KmsKeyId"].startswith("arn:aws:kms:") and secret["Description"] == "Hugging Face read token"
        cloudformation.delete_stack(StackName="storage")
        assert "DeletedDate" in secrets.describe_secret(SecretId="llamalora/dev/huggingface-token")


def _patched_functions() -> tuple:
    return (
        Key.__dict__["create_from_cloudformation_json"],
        Key.delete,
        sagemaker_models.FakeEndpointConfig.validate_instance_type,
        cloudformation_models.ChangeSet.apply,
        cloudformation_models.Stack._create_resource_map,
        cloudformation_parsing.generate_resource_name,
        cloudformation_parsing.clean_json,
        cloudformation_parsing.resource_class_from_type,
        cloudformation_models.CloudFormationBackend.execute_change_set,
    )


def test_fixes_are_undone_after_the_block():
    before = _patched_functions()
    with emulator.patched():
        assert all(a is not b for a, b in zip(_patched_functions(), before, strict=True))
    assert _patched_functions() == before


def test_refuses_a_moto_version_the_fixes_were_not_written_for(monkeypatch):
    monkeypatch.setattr(moto, "__version__", "6.0.0")
    with pytest.raises(RuntimeError, match=r"patches moto 5\.2\.5 internals, but moto 6\.0\.0 is installed"):
        emulator.apply()
    assert emulator.MOTO_VERSION == "5.2.5"
