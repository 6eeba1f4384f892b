"""StorageStack: private, TLS-only, encrypted buckets, per-stage removal, and roles with exactly the access they need."""

from __future__ import annotations

import pytest

from core import bucket_layout
from core.config import ConfigError, load_config
from tests.cdk_assembly import Assembly, cdk_context, render, short_id

STAGES = ["dev", "staging", "prod"]
KMS_BUCKETS = ["Data", "Models", "Artifacts"]


def buckets(assembly: Assembly, stage: str) -> dict[str, dict]:
    return {short_id(k): v for k, v in assembly.resources(stage, "Storage", "AWS::S3::Bucket").items()}


@pytest.mark.parametrize("stage", STAGES)
def test_data_model_and_code_buckets_use_the_stage_key_with_bucket_keys(assembly, stage):
    for name in KMS_BUCKETS:
        encryption = buckets(assembly, stage)[name]["Properties"]["BucketEncryption"][
            "ServerSideEncryptionConfiguration"
        ]
        assert render(encryption) == [
            {
                "BucketKeyEnabled": True,
                "ServerSideEncryptionByDefault": {"KMSMasterKeyID": "<Key.Arn>", "SSEAlgorithm": "aws:kms"},
            }
        ]


def test_access_log_bucket_uses_sse_s3_because_s3_cannot_deliver_logs_to_kms_buckets(assembly):
    encryption = buckets(assembly, "prod")["AccessLogs"]["Properties"]["BucketEncryption"]
    assert encryption["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }


@pytest.mark.parametrize("stage", STAGES)
def test_every_bucket_blocks_public_access_and_disables_acls(assembly, stage):
    for name, bucket in buckets(assembly, stage).items():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }, name
        assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}, name


@pytest.mark.parametrize("stage", STAGES)
def test_every_bucket_policy_denies_plain_http_and_old_tls(assembly, stage):
    policies = assembly.resources(stage, "Storage", "AWS::S3::BucketPolicy")
    assert len(policies) == 4
    for policy in policies.values():
        # The models bucket's denies on who writes code and staged weights: test_served_code_protection.py.
        denies = [
            s
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny" and "ArnNotLike" not in s["Condition"]
        ]
        conditions = [s["Condition"] for s in denies]
        assert {"Bool": {"aws:SecureTransport": "false"}} in conditions
        assert {"NumericLessThan": {"s3:TlsVersion": 1.2}} in conditions
        assert all(s["Principal"] == {"AWS": "*"} and s["Action"] == "s3:*" for s in denies)


@pytest.mark.parametrize("stage", STAGES)
def test_kms_buckets_log_access_to_the_log_bucket(assembly, stage):
    for name in KMS_BUCKETS:
        logging = render(buckets(assembly, stage)[name]["Properties"]["LoggingConfiguration"])
        assert logging == {"DestinationBucketName": "<AccessLogs>", "LogFilePrefix": f"{name}/"}


@pytest.mark.parametrize("stage", STAGES)
def test_every_bucket_is_versioned_and_old_versions_expire(assembly, stage):
    found = buckets(assembly, stage)
    assert sorted(found) == sorted([*KMS_BUCKETS, "AccessLogs"])
    for name, bucket in found.items():
        props = bucket["Properties"]
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}, name
        rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
        assert rules["expire-old-versions"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}, name
        assert "AbortIncompleteMultipartUpload" in rules["abort-incomplete-uploads"], name
    for name in KMS_BUCKETS:
        rules = {r["Id"]: r for r in found[name]["Properties"]["LifecycleConfiguration"]["Rules"]}
        assert rules["abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}


def test_prod_and_staging_retain_data_and_key(assembly):
    for stage in ["staging", "prod"]:
        for resource in [
            *buckets(assembly, stage).values(),
            *assembly.resources(stage, "Storage", "AWS::KMS::Key").values(),
        ]:
            assert resource["DeletionPolicy"] == "Retain"
            assert resource["UpdateReplacePolicy"] == "Retain"
        assert not assembly.resources(stage, "Storage", "Custom::S3AutoDeleteObjects")


def test_dev_destroys_data_and_empties_buckets_first(assembly):
    for bucket in buckets(assembly, "dev").values():
        assert bucket["DeletionPolicy"] == "Delete"
    emptied = assembly.resources("dev", "Storage", "Custom::S3AutoDeleteObjects")
    assert sorted(render(r["Properties"]["BucketName"]) for r in emptied.values()) == [
        "<AccessLogs>",
        "<Artifacts>",
        "<Data>",
        "<Models>",
    ]


@pytest.mark.parametrize("stage", STAGES)
def test_key_rotates(assembly, stage):
    (key,) = assembly.resources(stage, "Storage", "AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True


# --- roles --------------------------------------------------------------------------------------------------


def role_statements(assembly: Assembly, role: str, stage: str = "prod") -> dict[str, dict]:
    policies = [
        p
        for p in assembly.resources(stage, "Storage", "AWS::IAM::Policy").values()
        if render(p["Properties"]["Roles"]) == [f"<{role}Role>"]
    ]
    assert len(policies) == 1
    statements = {}
    for s in policies[0]["Properties"]["PolicyDocument"]["Statement"]:
        assert s["Effect"] == "Allow"
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        resources = render(s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        statements[s["Sid"]] = {
            "actions": sorted(actions),
            "resources": sorted(resources),
            "condition": s.get("Condition"),
        }
    return statements


def objects(bucket: str, *prefixes: str) -> list[str]:
    return sorted(f"<{bucket}.Arn>/{p}*" for p in prefixes)


LOGS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
READ, WRITE = ["s3:GetObject"], ["s3:AbortMultipartUpload", "s3:PutObject"]
PULL = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


def test_training_role_has_exactly_the_access_its_jobs_need(assembly):
    got = {sid: (s["actions"], s["resources"]) for sid, s in role_statements(assembly, "Training").items()}
    account = "<AWS::AccountId>"
    assert got == {
        "WriteLogs": (
            LOGS,
            [
                f"arn:aws:logs:us-east-1:{account}:log-group:/aws/sagemaker/ProcessingJobs:*",
                f"arn:aws:logs:us-east-1:{account}:log-group:/aws/sagemaker/TrainingJobs:*",
            ],
        ),
        "PublishMetrics": (["cloudwatch:PutMetricData"], ["*"]),
        "EcrLogin": (["ecr:GetAuthorizationToken"], ["*"]),
        "ReadDataRawPreparedEvaluation": (READ, objects("Data", "raw/", "prepared/", "evaluation/")),
        "ListDataRawPreparedEvaluation": (["s3:ListBucket"], ["<Data.Arn>"]),
        "WriteDataPreparedEvaluation": (WRITE, objects("Data", "prepared/", "evaluation/")),
        # Of pretrained/, only what the stage stages (GPT-J for training and serving).
        "ReadModelsPretrainedGptJ6bCheckpointsTrained": (
            READ,
            objects("Models", "pretrained/gpt-j-6b/", "checkpoints/", "trained/"),
        ),
        "ListModelsPretrainedGptJ6bCheckpointsTrained": (["s3:ListBucket"], ["<Models.Arn>"]),
        "WriteModelsTrained": (WRITE, objects("Models", "trained/")),  # never pretrained/: the staging role's
        "WriteModelsCheckpoints": (sorted([*WRITE, "s3:DeleteObject"]), objects("Models", "checkpoints/")),
        "ReadArtifactsCode": (READ, objects("Artifacts", "code/")),
        "ListArtifactsCode": (["s3:ListBucket"], ["<Artifacts.Arn>"]),
        "UseKeyReadWrite": (["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"], ["<Key.Arn>"]),
        "EncryptVolumes": (["kms:CreateGrant"], ["<Key.Arn>"]),
        "PullImages1": (PULL, ["arn:aws:ecr:us-east-1:763104351884:repository/pytorch-training"]),
    }


def test_hosting_role_reads_weights_and_code_and_writes_only_captured_data(assembly):
    got = {sid: (s["actions"], s["resources"]) for sid, s in role_statements(assembly, "Hosting").items()}
    assert got == {
        "WriteLogs": (
            LOGS,
            [
                "arn:aws:logs:us-east-1:<AWS::AccountId>:log-group:/aws/sagemaker/Endpoints/llm-platform-prod:*",
                "arn:aws:logs:us-east-1:<AWS::AccountId>:log-group:/aws/sagemaker/InferenceComponents/llm-platform-prod-*:*",
            ],
        ),
        "PublishMetrics": (["cloudwatch:PutMetricData"], ["*"]),
        "EcrLogin": (["ecr:GetAuthorizationToken"], ["*"]),
        "ReadModelsPretrainedGptJ6bTrainedRegistered": (
            READ,
            objects("Models", "pretrained/gpt-j-6b/", "trained/", "registered/"),
        ),
        "ListModelsPretrainedGptJ6bTrainedRegistered": (["s3:ListBucket"], ["<Models.Arn>"]),
        "ReadArtifactsCode": (READ, objects("Artifacts", "code/")),
        "ListArtifactsCode": (["s3:ListBucket"], ["<Artifacts.Arn>"]),
        "WriteDataCapture": (WRITE, objects("Data", "capture/")),
        "UseKeyReadWrite": (["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"], ["<Key.Arn>"]),
        "PullImages1": (PULL, ["arn:aws:ecr:us-east-1:763104351884:repository/djl-inference"]),
    }


def test_wildcard_statements_are_narrowed_by_conditions(assembly):
    training = role_statements(assembly, "Training")
    assert training["PublishMetrics"]["condition"] == {
        "StringLike": {"cloudwatch:namespace": ["/aws/sagemaker/TrainingJobs", "/aws/sagemaker/ProcessingJobs"]}
    }
    assert training["ListDataRawPreparedEvaluation"]["condition"] == {
        "StringLike": {"s3:prefix": ["raw/*", "prepared/*", "evaluation/*"]}
    }
    assert training["EncryptVolumes"]["condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}


@pytest.mark.parametrize("role", ["Training", "Hosting"])
def test_roles_trust_only_sagemaker_for_this_account_and_carry_no_managed_policies(assembly, role):
    roles = {short_id(k): v for k, v in assembly.resources("prod", "Storage", "AWS::IAM::Role").items()}
    props = roles[f"{role}Role"]["Properties"]
    assert "ManagedPolicyArns" not in props
    (statement,) = props["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    # SageMaker acting for this account (the job roles' aws:SourceArn: tests/infrastructure/test_role_trust.py).
    assert render(statement["Condition"])["StringEquals"] == {"aws:SourceAccount": "<AWS::AccountId>"}


def test_outputs_name_the_buckets_key_and_roles(assembly):
    outputs = assembly.template("prod", "Storage")["Outputs"]
    assert {short_id(k) for k in outputs} >= {
        "DataBucketName",
        "ModelsBucketName",
        "ArtifactsBucketName",
        "KeyArn",
        "TrainingRoleArn",
        "HostingRoleArn",
    }


@pytest.mark.parametrize("stage", STAGES)
def test_every_key_and_log_group_of_a_stage_follows_its_removal_policy(assembly, stage):
    expected = "Delete" if stage == "dev" else "Retain"
    kept = {
        (stack, logical_id): (resource["DeletionPolicy"], resource["UpdateReplacePolicy"])
        for stack in ("Storage", "Training", "Serving")
        for kind in ("AWS::KMS::Key", "AWS::Logs::LogGroup")
        for logical_id, resource in assembly.resources(stage, stack, kind).items()
    }
    assert len(kept) >= 6  # the stage key, the alarm topic's key, the code packaging logs of two stacks
    assert set(kept.values()) == {(expected, expected)}, kept


# --- data capture -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_captured_requests_and_responses_expire_after_the_configured_days(assembly, stage):
    rules = buckets(assembly, stage)["Data"]["Properties"]["LifecycleConfiguration"]["Rules"]
    (capture,) = [r for r in rules if r["Id"] == "expire-captured-data"]
    # The default: 30 days, then the old version goes with the bucket's other old versions.
    assert capture == {"Id": "expire-captured-data", "Prefix": "capture/", "ExpirationInDays": 30, "Status": "Enabled"}
    assert bucket_layout.DATA_CAPTURE == "capture/"


def test_captured_data_expiry_comes_from_the_serving_config():
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from core.catalog import images
    from core.config import StageConfig
    from infrastructure.storage_stack import StorageStack

    stage = StageConfig.model_validate({"region": "us-east-1", "serving": {"data_capture_expiry_days": 7}})
    stack = StorageStack(
        App(context=cdk_context()),
        "Storage",
        stage=stage,
        key_user_role_path="/p/dev/",
        endpoint_name="p-dev",
        training_images=[images.training_image("us-east-1", stage.training.smp.version)],
        serving_images=[images.serving_image("us-east-1", stage.serving.engine)],
        staging_images=[images.processing_image("us-east-1", stage.training.processing_instance_type)],
    )
    template = Template.from_stack(stack).to_json()["Resources"]
    data = template[stack.get_logical_id(stack.data_bucket.node.default_child)]
    rules = data["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {"Id": "expire-captured-data", "Prefix": "capture/", "ExpirationInDays": 7, "Status": "Enabled"} in rules


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("days", "message"),
    [(0, "greater than or equal to 1"), (366, "less than or equal to 365")],
    ids=["zero days: S3 lifecycle expiration needs a positive number", "over a year"],
)
def test_captured_data_expiry_outside_1_to_365_days_is_refused(tmp_path, days, message):
    path = tmp_path / "c.yaml"
    path.write_text(f"stages:\n  dev:\n    region: us-east-1\n    serving: {{data_capture_expiry_days: {days}}}\n")
    with pytest.raises(ConfigError, match=rf"stages\.dev\.serving\.data_capture_expiry_days: .*{message}"):
        load_config(path)
