"""A stage that stages a gated model (as config/examples/llama-3.1-8b-vllm-g5.yaml does): its storage stack creates
the Hugging Face token secret empty and encrypted with the stage key, only the staging role can read it, and the
staging step that needs it is told the secret's name, never a token. cdk-nag's three packs run over the stack as at
synth, and find nothing unacknowledged."""

from __future__ import annotations

import json

import pytest

from core.config import StageConfig, load_config
from tests.cdk_assembly import REPO, cdk_context, render

EXAMPLE = REPO / "config" / "examples" / "llama-3.1-8b-vllm-g5.yaml"
SECRET = "llama31/dev/huggingface-token"


@pytest.fixture(scope="module")
def stage() -> StageConfig:
    return load_config(EXAMPLE).stages["dev"]


@pytest.fixture(scope="module")
def storage(stage):
    """The dev stage's storage stack alone, with the security packs applied as build_app applies them."""
    from aws_cdk import App, Environment
    from aws_cdk.assertions import Annotations, Match, Template

    from core.catalog import images
    from infrastructure import compliance
    from infrastructure.storage_stack import StorageStack

    stack = StorageStack(
        App(context=cdk_context()),
        "Storage",
        env=Environment(region=stage.region),  # as stage.py builds it: the region known, the account the CLI's
        stage=stage,
        key_user_role_path="/llama31/dev/",
        endpoint_name="llama31-dev",
        training_images=[images.training_image("us-east-1", stage.training.smp.version)],
        serving_images=[images.serving_image("us-east-1", stage.serving.engine)],
        staging_images=[images.processing_image("us-east-1", stage.training.processing_instance_type)],
    )
    compliance.check(stack)
    template = Template.from_stack(stack).to_json()["Resources"]
    errors = Annotations.from_stack(stack).find_error("*", Match.any_value())
    return template, errors


def of_type(template: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in template.items() if v["Type"] == type_}


def role_policy(template: dict, role: str) -> list[dict]:
    (policy,) = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in of_type(template, "AWS::IAM::Policy").values()
        if render(p["Properties"]["Roles"]) == [f"<{role}Role>"]
    ]
    return policy


def test_the_security_packs_find_nothing_unacknowledged(storage):
    _, errors = storage
    assert [(e["id"], e["entry"]["data"]) for e in errors] == []


def test_the_secret_is_created_empty_and_encrypted_with_the_stage_key(storage):
    template, _ = storage
    ((_, secret),) = of_type(template, "AWS::SecretsManager::Secret").items()
    props = secret["Properties"]
    assert props["Name"] == SECRET
    assert render(props["KmsKeyId"]) == "<Key.Arn>"
    assert "SecretString" not in props and "GenerateSecretString" not in props  # empty: people put the token
    assert secret["DeletionPolicy"] == "Delete"  # dev's removal policy
    # Rotation is acknowledged with its reason, in all three packs and for checkov.
    suppressed = {r["id"] for r in secret["Metadata"]["cdk_nag"]["rules_to_suppress"]}
    assert "AwsSolutions-SMG4" in suppressed and "HIPAA.Security-SecretsManagerRotationEnabled" in suppressed
    assert [s["id"] for s in secret["Metadata"]["checkov"]["skip"]] == ["CKV2_AWS_57"]


def test_only_the_staging_role_may_read_the_token(storage):
    template, _ = storage
    ((_, policy),) = of_type(template, "AWS::SecretsManager::ResourcePolicy").items()
    props = policy["Properties"]
    assert props["BlockPublicPolicy"] is True and render(props["SecretId"]) == "<HuggingFaceToken>"
    deny, allow = props["ResourcePolicy"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert deny["Action"] == "secretsmanager:GetSecretValue"
    assert render(deny["Condition"]) == {"StringNotEquals": {"aws:PrincipalArn": "<StagingRole.Arn>"}}
    assert allow["Effect"] == "Allow" and render(allow["Principal"]) == {"AWS": "<StagingRole.Arn>"}
    reads = [s for s in role_policy(template, "Staging") if "secretsmanager" in json.dumps(s["Action"])]
    assert [(s["Action"], render(s["Resource"])) for s in reads] == [
        ("secretsmanager:GetSecretValue", "<HuggingFaceToken>")
    ]
    for other in ("Training", "Hosting"):
        assert "secretsmanager" not in json.dumps(role_policy(template, other))


def test_only_the_staging_role_writes_the_staged_weights(storage):
    template, _ = storage
    writes = {
        role: sorted(
            r for s in role_policy(template, role) if "s3:PutObject" in s["Action"] for r in render(s["Resource"])
        )
        for role in ("Staging", "Training")
    }
    assert writes["Staging"] == ["<Models.Arn>/pretrained/gpt-j-6b/*", "<Models.Arn>/pretrained/llama-3.1-8b/*"]
    assert not [r for r in writes["Training"] if "pretrained/" in r]


def test_the_stage_key_encrypts_the_token_only_through_secrets_manager_for_this_secret(storage):
    template, _ = storage
    ((_, key),) = of_type(template, "AWS::KMS::Key").items()
    statements = {s.get("Sid"): s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    put = statements["PutHuggingFaceToken"]
    assert put["Action"] == "kms:GenerateDataKey"  # encrypt only: decrypting is the key users' (the staging role's)
    condition = render(put["Condition"])
    assert condition["StringEquals"]["kms:ViaService"] == "secretsmanager.us-east-1.<AWS::URLSuffix>"
    assert condition["StringLike"]["kms:EncryptionContext:SecretARN"].endswith(f":secret:{SECRET}-??????")
    users = render(statements["UseKeyStageRoles"]["Condition"]["ArnLike"]["aws:PrincipalArn"])
    assert "<StagingRole.Arn>" in users


def test_the_staging_step_runs_as_the_staging_role_and_gets_the_secrets_name_not_a_token(stage):
    from core.naming import PipelineNames
    from infrastructure.constructs.training_pipeline.staging_pipeline import staging_definition

    names = PipelineNames(finetune="l-dev-finetune", staging="l-dev-stage-weights", model_package_group="l-dev")
    body = staging_definition(stage.training, stage.serving, region="us-east-1", names=names, token_secret=SECRET)
    steps = {s["Name"]: s["Arguments"] for s in json.loads(body)["Steps"]}
    llama = steps["Stage-llama-3.1-8b"]
    assert llama["RoleArn"].endswith(":role/${StagingRoleName}")
    arguments = llama["AppSpecification"]["ContainerArguments"]
    assert arguments[arguments.index("--hf_token_secret") + 1] == SECRET
    assert "HF_TOKEN" not in body
    # GPT-J, which the stage fine-tunes, is not gated: its step is not told of the secret, but runs as the same role.
    assert "--hf_token_secret" not in steps["Stage-gpt-j-6b"]["AppSpecification"]["ContainerArguments"]
    assert steps["Stage-gpt-j-6b"]["RoleArn"].endswith(":role/${StagingRoleName}")
    with pytest.raises(ValueError, match=r"meta-llama/Llama-3\.1-8B is gated: its staging step needs a token secret"):
        staging_definition.__wrapped__(stage.training, stage.serving, region="us-east-1", names=names)
