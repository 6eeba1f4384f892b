"""KMS key policies: the account administers every key and reads nothing with it; named principals use the keys;
services only for this account's resources; and everything a deploy or a job does with a key is still allowed."""

from __future__ import annotations

import fnmatch
import json

import pytest

from tests.cdk_assembly import APP, Assembly, render, short_id

STAGES = ["dev", "staging", "prod"]
CRYPTO = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncrypt", "kms:*")
# The key administrators statement of AWS's default key policy (AWS KMS Developer Guide, "Default key policy"), with
# kms:CreateAlias for its kms:Create*, which includes kms:CreateGrant.
KEY_ADMIN_ACTIONS = [
    "kms:CreateAlias", "kms:Describe*", "kms:Enable*", "kms:List*", "kms:Put*", "kms:Update*", "kms:Revoke*",
    "kms:Disable*", "kms:Get*", "kms:Delete*", "kms:TagResource", "kms:UntagResource", "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
]  # fmt: skip
CONFUSED_DEPUTY_KEYS = ("aws:SourceAccount", "aws:SourceArn", "kms:EncryptionContext:aws:logs:arn")


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def keys(assembly: Assembly):
    """(stage, stack, logical id, key policy statements) of every KMS key in the assembly."""
    for stage, stacks in assembly.templates.items():
        for stack, template in stacks.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == "AWS::KMS::Key":
                    yield stage, stack, logical_id, resource["Properties"]["KeyPolicy"]["Statement"]


def is_account_root(principal) -> bool:
    return any(str(render(p)).endswith(":root") for p in as_list(principal.get("AWS", [])))


def test_every_key_is_administered_by_its_account_and_used_by_nobody_there_without_a_name(assembly, promotion_assembly):
    found = [k for a in (assembly, promotion_assembly) for k in keys(a)]
    # Stage keys, alarm-topic keys (default: 3 stages; promotion: 3 stages deployed by hand and 3 in the pipeline)
    # and the pipeline's artifact key.
    assert len(found) == 2 * 3 + 2 * 6 + 1
    for stage, stack, logical_id, statements in found:
        where = f"{stage}/{stack}/{logical_id}"
        (admin,) = [s for s in statements if s.get("Sid") == "KeyAdministration"]
        # AWS's key-administrators statement, so the account can never lock itself out (kms:Put* is PutKeyPolicy)
        # and CloudFormation can rotate, tag, update and delete the key.
        assert sorted(as_list(admin["Action"])) == sorted(KEY_ADMIN_ACTIONS), where
        assert is_account_root(admin["Principal"]) and "Condition" not in admin, where
        for statement in statements:
            crypto = [a for a in as_list(statement["Action"]) if a.startswith(CRYPTO)]
            if "AWS" in statement["Principal"] and is_account_root(statement["Principal"]) and crypto:
                # The account principal uses the key only for principals named by aws:PrincipalArn.
                assert statement["Condition"]["ArnLike"]["aws:PrincipalArn"], (where, statement)


def grants_create_grant(statement: dict) -> bool:
    """Whether the statement allows kms:CreateGrant, by name or by a wildcard that matches it."""
    return any(fnmatch.fnmatchcase("kms:CreateGrant", action) for action in as_list(statement["Action"]))


def test_no_principal_of_the_account_may_grant_itself_use_of_a_key(assembly, promotion_assembly):
    """A grant can give kms:Decrypt: the account principal (which delegates to every IAM policy in the account, such
    as PowerUserAccess) may create grants only when an AWS service asks for one for its own resource (issue 26)."""
    found = [k for a in (assembly, promotion_assembly) for k in keys(a)]
    for stage, stack, logical_id, statements in found:
        where = f"{stage}/{stack}/{logical_id}"
        for statement in statements:
            if statement["Effect"] != "Allow" or not grants_create_grant(statement):
                continue
            assert "Service" not in statement["Principal"], (where, statement)
            assert statement.get("Condition", {}).get("Bool", {}).get("kms:GrantIsForAWSResource") == "true", (
                where,
                statement,
            )
        # What SageMaker (volumes) and Lambda (function environments) ask for on a caller's behalf is still allowed.
        (grants,) = [s for s in statements if s.get("Sid") == "GrantsForAwsResources"]
        assert is_account_root(grants["Principal"]) and as_list(grants["Action"]) == ["kms:CreateGrant"], where
        assert grants["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}, where


def test_services_use_keys_only_for_this_accounts_resources(assembly, promotion_assembly):
    services = set()
    for a in (assembly, promotion_assembly):
        for stage, stack, logical_id, statements in keys(a):
            for statement in statements:
                for service in as_list(statement["Principal"].get("Service", [])):
                    conditions = {k for values in statement.get("Condition", {}).values() for k in values}
                    assert conditions & set(CONFUSED_DEPUTY_KEYS), (stage, stack, logical_id, statement)
                    services.add(service)
                    if service == "cloudwatch.amazonaws.com":
                        account = render(statement["Condition"]["StringEquals"]["aws:SourceAccount"])
                        assert render(statement["Condition"]) == {
                            "StringEquals": {"aws:SourceAccount": account},
                            "ArnLike": {"aws:SourceArn": f"arn:aws:cloudwatch:us-east-1:{account}:alarm:*"},
                        }
    assert services == {"logs.us-east-1.amazonaws.com", "cloudwatch.amazonaws.com"}


# --- every use a deploy or a job makes of a key is still allowed ------------------------------------------------


def key_users(statements: list[dict], sid: str) -> list[str]:
    (statement,) = [s for s in statements if s.get("Sid") == sid]
    return [render(p) for p in as_list(statement["Condition"]["ArnLike"]["aws:PrincipalArn"])]


def grants_crypto_on(policy: dict, key_marker: str) -> bool:
    return any(
        key_marker in json.dumps(s["Resource"]) and any(a.startswith(CRYPTO) for a in as_list(s["Action"]))
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )


@pytest.mark.parametrize("stage", STAGES)
def test_every_role_granted_the_stage_key_is_one_of_its_users(assembly, stage):
    (statements,) = [s for st, stack, _, s in keys(assembly) if st == stage and stack == "Storage"]
    users = key_users(statements, "UseKeyStageRoles")
    assert users == [
        "<TrainingRole.Arn>",
        "<HostingRole.Arn>",
        "<StagingRole.Arn>",
        "<RegistryRole.Arn>",
        f"arn:aws:iam::<AWS::AccountId>:role/llm-platform/{stage}/*",
    ]
    granted = []
    for stack in ("Storage", "Training", "Serving"):
        template = assembly.template(stage, stack)
        for policy in assembly.resources(stage, stack, "AWS::IAM::Policy").values():
            # The stage key: its GetAtt in the storage stack, its export elsewhere.
            if not grants_crypto_on(policy, "Key961B73FD"):
                continue
            for role in policy["Properties"]["Roles"]:
                role_resource = template["Resources"][role["Ref"]]
                granted.append((stack, render(role), role_resource["Properties"].get("Path")))
    assert ("Storage", "<TrainingRole>", None) in granted and ("Storage", "<HostingRole>", None) in granted
    # Every role of the other stacks that the CDK or this project granted the key lives under the stage's path:
    # the pipelines' role, the code-packaging handlers.
    others = [(stack, role, path) for stack, role, path in granted if stack != "Storage"]
    assert {role for _, role, _ in others} >= {"<PipelinesPipelineRole>", "<CodePackagingHandlerRole>"}
    # Under it (the key policy's role/<path>/* matches sub-folders): the packaging handlers are in code-packaging/.
    assert all(path.startswith(f"/llm-platform/{stage}/") for _, _, path in others), others


@pytest.mark.parametrize("stage", STAGES)
def test_cloudformation_may_encrypt_function_environments_with_the_stage_key_through_lambda_only(assembly, stage):
    (statements,) = [s for st, stack, _, s in keys(assembly) if st == stage and stack == "Storage"]
    (statement,) = [s for s in statements if s.get("Sid") == "EncryptFunctionEnvironments"]
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:Encrypt"]
    assert render(statement["Condition"]) == {
        "ArnLike": {
            "aws:PrincipalArn": [
                "arn:aws:iam::<AWS::AccountId>:role/cdk-hnb659fds-cfn-exec-role-<AWS::AccountId>-us-east-1"
            ]
        },
        "StringEquals": {"kms:ViaService": "lambda.us-east-1.<AWS::URLSuffix>"},
    }
    # Which is what the functions whose environments the stage key encrypts need when CloudFormation creates them.
    encrypted = [
        f
        for stack in ("Training", "Serving")
        for f in assembly.resources(stage, stack, "AWS::Lambda::Function").values()
        if "KmsKeyArn" in f["Properties"]
    ]
    assert encrypted and all("Key961B73FD" in json.dumps(f["Properties"]["KmsKeyArn"]) for f in encrypted)


def test_the_pipeline_roles_use_the_artifact_key_and_the_stages_deploy_roles_read_it(promotion_assembly):
    template = promotion_assembly.template(APP, "Pipeline")
    (statements,) = [s for st, _, _, s in keys(promotion_assembly) if st == APP]
    users = set(key_users(statements, "UseKeyPipelineRoles"))
    granted = {
        render(role)
        for policy in promotion_assembly.resources(APP, "Pipeline", "AWS::IAM::Policy").values()
        if grants_crypto_on(policy, "ArtifactsKey")
        for role in policy["Properties"]["Roles"]
    }
    # The pipeline's, its source action's, its CodeBuild projects' and the smoke-test runners' roles, at least.
    assert len(granted) >= 6 and {f"<{role[1:-1]}.Arn>" for role in granted} <= users
    roles = {short for short in (u[1:-5] for u in users)}
    assert roles <= {short_id(k) for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    readers = [s for s in statements if s.get("Sid") is None]
    principals = sorted(p for s in readers for p in as_list(render(s["Principal"]["AWS"])))
    assert principals == [
        f"arn:aws:iam::{a}:role/cdk-hnb659fds-deploy-role-{a}-us-east-1"
        for a in ("222222222222", "333333333333", "444444444444")
    ]
