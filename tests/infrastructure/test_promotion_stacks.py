"""Issue 24: what config/examples/promotion.yaml synthesizes for a model promoted dev -> staging -> prod, each stage
in its own account. The source stages grant a named role of a named account, read-only, decrypt through S3 only;
the promoting stages copy at deploy time with that role and serve only their own copy."""

from __future__ import annotations

import json

from core import bucket_layout
from core.catalog import images
from core.naming import PROMOTED_FROM_OUTPUT, SERVED_DIGEST_OUTPUT, SERVED_PACKAGE_OUTPUT
from tests.cdk_assembly import Assembly, render, short_id, synthesize
from tests.core.test_promotion_config import LORA_SOURCE

DEV, STAGING, PROD = "222222222222", "333333333333", "444444444444"
ROLE = "arn:aws:iam::{account}:role/llm-platform/{stage}/llm-platform-{stage}-promotion"


def statements(policy: dict) -> dict[str, dict]:
    return {s.get("Sid", ""): s for s in policy["Statement"]}


def models_policy(assembly: Assembly, stage: str) -> dict[str, dict]:
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in assembly.resources(stage, "Storage", "AWS::S3::BucketPolicy").values()
        if render(p["Properties"]["Bucket"]) == "<Models>"
    ]
    return statements(policy)


def key_policy(assembly: Assembly, stage: str) -> dict[str, dict]:
    ((key),) = [
        k for name, k in assembly.resources(stage, "Storage", "AWS::KMS::Key").items() if short_id(name) == "Key"
    ]
    return statements(key["Properties"]["KeyPolicy"])


def group(assembly: Assembly, stage: str) -> dict:
    (resource,) = assembly.resources(stage, "Training", "AWS::SageMaker::ModelPackageGroup").values()
    return resource["Properties"]


def promoted_weights(assembly: Assembly, stage: str) -> dict:
    (resource,) = assembly.resources(stage, "Serving", "Custom::PromotedWeights").values()
    return resource["Properties"]


def test_a_source_bucket_lets_the_promoting_role_read_what_packages_name(promotion_assembly):
    for source, account, target in (("dev", STAGING, "staging"), ("staging", PROD, "prod")):
        grant = models_policy(promotion_assembly, source)["PromotionReads0"]
        assert grant["Effect"] == "Allow" and grant["Action"] == "s3:GetObject"
        assert render(grant["Principal"]) == {"AWS": f"arn:aws:iam::{account}:root"}
        assert grant["Condition"] == {"ArnEquals": {"aws:PrincipalArn": ROLE.format(account=account, stage=target)}}
        assert sorted(render(grant["Resource"])) == ["<Models.Arn>/promoted/*", "<Models.Arn>/registered/*"]
        listing = models_policy(promotion_assembly, source)["PromotionLists0"]
        assert listing["Action"] == "s3:ListBucket" and render(listing["Resource"]) == "<Models.Arn>"
        assert listing["Condition"] == {
            "ArnEquals": {"aws:PrincipalArn": ROLE.format(account=account, stage=target)},
            "StringLike": {"s3:prefix": ["registered/*", "promoted/*"]},
        }
    assert "PromotionReads0" not in models_policy(promotion_assembly, "prod")  # nobody promotes from prod


def test_no_bucket_or_key_allows_any_principal(promotion_assembly):
    for stage in ("dev", "staging", "prod"):
        for policy in (models_policy(promotion_assembly, stage), key_policy(promotion_assembly, stage)):
            for sid, statement in policy.items():
                if statement["Effect"] == "Allow":
                    assert render(statement["Principal"]) != {"AWS": "*"}, (stage, sid)
                    assert statement["Principal"] != "*", (stage, sid)


def test_a_source_key_lets_the_promoting_role_decrypt_through_s3_only(promotion_assembly):
    grant = key_policy(promotion_assembly, "dev")["PromotionDecrypts0"]
    assert render(grant["Principal"]) == {"AWS": f"arn:aws:iam::{STAGING}:root"}
    assert grant["Action"] == "kms:Decrypt"
    assert render(grant["Condition"]) == {
        "ArnLike": {"aws:PrincipalArn": [ROLE.format(account=STAGING, stage="staging")]},
        "StringEquals": {"kms:ViaService": "s3.us-east-1.<AWS::URLSuffix>"},
    }


def test_a_source_group_lets_the_promoting_account_find_and_describe_versions(promotion_assembly):
    (statement,) = group(promotion_assembly, "dev")["ModelPackageGroupPolicy"]["Statement"]
    assert statement["Principal"] == {"AWS": [f"arn:aws:iam::{STAGING}:root"]}
    assert sorted(statement["Action"]) == [
        "sagemaker:DescribeModelPackage",
        "sagemaker:DescribeModelPackageGroup",
        "sagemaker:ListModelPackages",
    ]
    assert [render(r) for r in statement["Resource"]] == [
        "arn:aws:sagemaker:us-east-1:222222222222:model-package-group/llm-platform-dev",
        "arn:aws:sagemaker:us-east-1:222222222222:model-package/llm-platform-dev/*",
    ]
    assert "ModelPackageGroupPolicy" not in group(promotion_assembly, "prod")


def test_only_the_promotion_role_writes_promoted_and_the_endpoint_reads_it(promotion_assembly):
    deny = models_policy(promotion_assembly, "staging")["OnlyPromotionWritesPromoted"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:PutObject"
    assert render(deny["Resource"]) == "<Models.Arn>/promoted/*"
    writers = render(deny["Condition"])["ArnNotLike"]["aws:PrincipalArn"]
    assert writers[0] == ROLE.format(account=STAGING, stage="staging")
    assert writers[1].endswith("/code-packaging/*")  # the handler folder inside the copy
    assert "OnlyPromotionWritesPromoted" not in models_policy(promotion_assembly, "dev")
    hosting = json.dumps(render(promotion_assembly.resources("staging", "Storage", "AWS::IAM::Policy")))
    assert "<Models.Arn>/promoted/*" in hosting


def test_the_promoting_stage_copies_at_deploy_time_and_serves_its_own_copy(promotion_assembly):
    props = promoted_weights(promotion_assembly, "staging")
    assert render(props["SourceGroupArn"]) == f"arn:aws:sagemaker:us-east-1:{DEV}:model-package-group/llm-platform-dev"
    assert (props["SourceStage"], props["TargetGroup"], props["DestinationRoot"]) == (
        "dev",
        "llm-platform-staging",
        bucket_layout.PROMOTED,
    )
    assert props["Version"] == "" and props["ImageUri"] == images.serving_image("us-east-1", "deepspeed")
    assert render(promoted_weights(promotion_assembly, "prod")["SourceGroupArn"]).endswith(
        f"{STAGING}:model-package-group/llm-platform-staging"
    )
    serving = promotion_assembly.template("staging", "Serving")
    for model in promotion_assembly.resources("staging", "Serving", "AWS::SageMaker::Model").values():
        assert DEV not in json.dumps(model)  # nothing the endpoint runs names dev's account
    assert {SERVED_PACKAGE_OUTPUT, PROMOTED_FROM_OUTPUT, SERVED_DIGEST_OUTPUT} <= set(serving["Outputs"])
    (role,) = [
        r["Properties"]
        for r in promotion_assembly.resources("staging", "Serving", "AWS::IAM::Role").values()
        if r["Properties"].get("RoleName") == "llm-platform-staging-promotion"
    ]
    assert role["Path"] == "/llm-platform/staging/"


def test_the_promotion_role_reads_only_the_source_account(promotion_assembly):
    policies = promotion_assembly.resources("staging", "Serving", "AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if short_id(k) == "PromotionRoleDefaultPolicy"]
    by_sid = statements(policy["Properties"]["PolicyDocument"])
    assert by_sid["ReadDevWeights"]["Condition"] == {"StringEquals": {"s3:ResourceAccount": DEV}}
    assert render(by_sid["DecryptDevWeights"]["Resource"]) == f"arn:aws:kms:us-east-1:{DEV}:key/*"
    assert render(by_sid["DecryptDevWeights"]["Condition"]) == {
        "StringEquals": {"kms:ViaService": "s3.us-east-1.<AWS::URLSuffix>"}
    }
    assert by_sid["ListDevWeights"]["Condition"]["StringEquals"] == {"s3:ResourceAccount": DEV}


def test_stages_that_promote_nothing_get_nothing(assembly):
    for stage in ("dev", "staging", "prod"):
        assert not assembly.resources(stage, "Serving", "Custom::PromotedWeights")
        assert not [sid for sid in models_policy(assembly, stage) if "Promot" in sid]
        assert "ModelPackageGroupPolicy" not in group(assembly, stage)


SAME_ACCOUNT = """
project: llm-platform
stages:
  dev:
    region: us-east-1
    removal_policy: destroy
  staging:
    region: us-east-1
    serving: {weights: {source: promoted, from_stage: dev, version: 4}}
"""


def test_same_account_stages_promote_without_sharing_the_group(tmp_path):
    config = tmp_path / "platform.yaml"
    config.write_text(SAME_ACCOUNT)
    same = synthesize(config, tmp_path / "out")
    assert same.error is None, same.error
    assert "ModelPackageGroupPolicy" not in group(same, "dev")
    grant = models_policy(same, "dev")["PromotionReads0"]
    assert render(grant["Principal"]) == {"AWS": "arn:aws:iam::<AWS::AccountId>:root"}
    props = promoted_weights(same, "staging")
    assert props["Version"] == "4" and props["Release"] == ""  # a pinned version is looked up once


def test_an_adapter_is_promoted_into_its_own_component(tmp_path):
    config = tmp_path / "platform.yaml"
    config.write_text(LORA_SOURCE)
    lora = synthesize(config, tmp_path / "out")
    assert lora.error is None, lora.error
    (weights,) = lora.resources("staging", "Serving", "Custom::PromotedWeights").items()
    logical_id, props = weights[0], weights[1]["Properties"]
    assert render(props["SourceGroupArn"]).endswith(":model-package-group/llamalora-dev")
    assert props["TargetGroup"] == "llamalora-staging"
    # The adapter component reads the adapter folder of the version the copy registered in staging's group.
    (lookup,) = [r for k, r in lora.resources("staging", "Serving", "Custom::AWS").items() if "AdapterLookup" in k]
    assert logical_id in json.dumps(lookup["Properties"])
    (adapter,) = [
        c["Properties"]
        for c in lora.resources("staging", "Serving", "AWS::SageMaker::InferenceComponent").values()
        if "ArtifactUrl" in json.dumps(c)
    ]
    assert "AdapterLookup" in json.dumps(adapter["Specification"]["Container"]["ArtifactUrl"])
    assert "ModelPackageGroupPolicy" not in group(lora, "dev")  # one account: no group policy
