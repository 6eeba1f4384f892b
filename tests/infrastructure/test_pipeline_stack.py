"""PipelineStack: stages in order, a person before prod, smoke tests after staging, cross-account trust, and a
release for every approved model."""

from __future__ import annotations

import json

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from core.config import load_config
from core.naming import smoke_test_runner_role_name
from infrastructure.pipeline_stack import CDK_CLI_VERSION
from tests.cdk_assembly import APP, REPO, normalize_hashes, render, synthesize

PROMOTION = REPO / "config" / "examples" / "promotion.yaml"


@pytest.fixture
def promotion(promotion_assembly):
    return promotion_assembly


def pipeline_template(assembly) -> dict:
    return assembly.template(APP, "Pipeline")


def codepipeline(assembly) -> dict:
    (pipeline,) = [
        r for r in pipeline_template(assembly)["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"
    ]
    return pipeline["Properties"]


def actions(assembly, stage: str) -> list[tuple[str, str, int]]:
    (found,) = [s for s in codepipeline(assembly)["Stages"] if s["Name"] == stage]
    return [(a["Name"], a["ActionTypeId"]["Provider"], a["RunOrder"]) for a in found["Actions"]]


def test_stages_run_in_promotion_order_after_synth_and_self_mutation(promotion):
    assert [s["Name"] for s in codepipeline(promotion)["Stages"]] == [
        "Source", "Build", "UpdatePipeline", "Assets", "dev", "staging", "prod",
    ]  # fmt: skip
    assert codepipeline(promotion)["PipelineType"] == "V2"


def test_a_person_approves_before_prod_and_only_there(promotion):
    assert actions(promotion, "prod")[0] == ("Approve-prod", "Manual", 1)
    assert all(provider != "Manual" for stage in ["dev", "staging"] for _, provider, _ in actions(promotion, stage))
    deploys = [order for name, provider, order in actions(promotion, "prod") if provider == "CloudFormation"]
    assert min(deploys) > 1  # every prod deployment waits for the approval


@pytest.mark.parametrize("stage", ["dev", "staging"])
def test_smoke_test_runs_after_the_stage_deployed(promotion, stage):
    stage_actions = actions(promotion, stage)
    smoke = [order for name, _, order in stage_actions if name == f"SmokeTest-{stage}"]
    assert smoke and smoke[0] > max(order for name, provider, order in stage_actions if provider == "CloudFormation")
    assert not [name for name, _, _ in actions(promotion, "prod") if name.startswith("SmokeTest")]


def build_specs(promotion, name_fragment: str) -> list[dict]:
    projects = [
        r["Properties"]
        for r in pipeline_template(promotion)["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project"
    ]
    return [
        json.loads(p["Source"]["BuildSpec"]) for p in projects if name_fragment in json.dumps(p["Source"]["BuildSpec"])
    ]


def test_smoke_test_invokes_the_stage_endpoint_through_its_role_with_the_stage_outputs(promotion):
    specs = build_specs(promotion, "scripts/smoke_test.py")
    assert len(specs) == 2  # dev and staging
    for spec in specs:
        commands = " ".join(spec["phases"]["build"]["commands"])
        assert 'python3 scripts/smoke_test.py --endpoint-name "$ENDPOINT_NAME"' in commands
        assert '--role-arn "$SMOKE_TEST_ROLE_ARN"' in commands and '--pipeline-name "$PIPELINE_NAME"' in commands
        assert "boto3==" in " ".join(spec["phases"]["install"]["commands"])
    smoke_actions = [
        a for s in codepipeline(promotion)["Stages"] for a in s["Actions"] if a["Name"] == "SmokeTest-staging"
    ]
    env = {v["name"]: v for v in json.loads(smoke_actions[0]["Configuration"]["EnvironmentVariables"])}
    assert set(env) >= {"ENDPOINT_NAME", "PIPELINE_NAME", "SMOKE_TEST_ROLE_ARN", "SERVED_DIGEST"}
    assert env["ENDPOINT_NAME"]["value"].startswith("#{")  # taken from the stage stack's outputs at run time
    assert env["SERVED_DIGEST"]["value"].startswith("#{")
    # staging serves a promoted version: its smoke test checks the endpoint serves exactly the one this release
    # copied; dev trains its own and has no digest to check.
    digest_checks = [" ".join(spec["phases"]["build"]["commands"]) for spec in specs]
    assert sum('--expect-digest "$SERVED_DIGEST"' in commands for commands in digest_checks) == 1


def test_synth_runs_make_synth_with_the_release(promotion):
    (spec,) = build_specs(promotion, "make synth")
    assert spec["phases"]["build"]["commands"] == [
        'make synth CONFIG=config/examples/promotion.yaml RELEASE="$RELEASE"'
    ]
    (synth,) = [a for s in codepipeline(promotion)["Stages"] if s["Name"] == "Build" for a in s["Actions"]]
    env = json.loads(synth["Configuration"]["EnvironmentVariables"])
    assert {"name": "RELEASE", "type": "PLAINTEXT", "value": "#{codepipeline.PipelineExecutionId}"} in env


def test_self_mutation_installs_the_pinned_cli(promotion):
    assert f"aws-cdk@{CDK_CLI_VERSION}" in json.dumps(pipeline_template(promotion))
    package = json.loads((REPO / "package.json").read_text())
    assert package["devDependencies"]["aws-cdk"] == CDK_CLI_VERSION


def test_cross_account_artifacts_use_a_rotated_kms_key(promotion):
    keys = [r["Properties"] for r in pipeline_template(promotion)["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    assert [k["EnableKeyRotation"] for k in keys] == [True]
    assert codepipeline(promotion)["ArtifactStore"]["EncryptionKey"]["Type"] == "KMS"


def test_stage_smoke_test_roles_trust_only_the_pipelines_smoke_test_runner(promotion):
    for stage in ["dev", "staging"]:
        roles = promotion.resources(f"Pipeline-{stage}", "Serving", "AWS::IAM::Role")
        (smoke,) = [
            r["Properties"]
            for r in roles.values()
            if r["Properties"].get("RoleName") == f"llm-platform-{stage}-smoke-test"
        ]
        (statement,) = smoke["AssumeRolePolicyDocument"]["Statement"]
        # The pipeline's account, and there only the CodeBuild role that runs this stage's smoke test.
        assert render(statement["Principal"]) == {"AWS": "arn:aws:iam::111111111111:root"}
        assert statement["Condition"] == {
            "ArnEquals": {"aws:PrincipalArn": f"arn:aws:iam::111111111111:role/llm-platform-{stage}-smoke-test-runner"}
        }
    prod_roles = promotion.resources("Pipeline-prod", "Serving", "AWS::IAM::Role").values()
    assert not [r for r in prod_roles if "smoke-test" in str(r["Properties"].get("RoleName"))]


def test_the_smoke_test_runs_with_the_role_the_stage_trusts(promotion):
    resources = pipeline_template(promotion)["Resources"]
    for stage in ["dev", "staging"]:
        (role_id,) = [
            k
            for k, r in resources.items()
            if r["Type"] == "AWS::IAM::Role"
            and r["Properties"].get("RoleName") == f"llm-platform-{stage}-smoke-test-runner"
        ]
        (project,) = [
            r["Properties"]
            for r in resources.values()
            if r["Type"] == "AWS::CodeBuild::Project"
            and r["Properties"]["ServiceRole"] == {"Fn::GetAtt": [role_id, "Arn"]}
        ]
        assert "scripts/smoke_test.py" in project["Source"]["BuildSpec"]
        (trust,) = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "codebuild.amazonaws.com"}
        assert render(trust["Condition"]) == {
            "StringEquals": {"aws:SourceAccount": "111111111111"},
            "ArnLike": {"aws:SourceArn": "arn:aws:codebuild:us-east-1:111111111111:project/*"},
        }


def test_the_artifact_bucket_denies_plain_http_and_tls_below_1_2_like_the_stage_buckets(promotion):
    resources = pipeline_template(promotion)["Resources"]
    (bucket_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::S3::Bucket"]
    assert codepipeline(promotion)["ArtifactStore"]["Location"] == {"Ref": bucket_id}
    (policy,) = [r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"]
    assert policy["Properties"]["Bucket"] == {"Ref": bucket_id}
    denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    conditions = [s["Condition"] for s in denies]
    assert {"Bool": {"aws:SecureTransport": "false"}} in conditions
    assert {"NumericLessThan": {"s3:TlsVersion": 1.2}} in conditions
    assert all(s["Principal"] == {"AWS": "*"} and s["Action"] == "s3:*" for s in denies)
    bucket = resources[bucket_id]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] is True


def test_eventbridge_starts_the_pipeline_only_for_its_own_rule(promotion):
    resources = pipeline_template(promotion)["Resources"]
    (rule,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert rule["Name"] == "llm-platform-promotion-on-model-approval"
    (target,) = rule["Targets"]
    (trust,) = resources[target["RoleArn"]["Fn::GetAtt"][0]]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert render(trust["Condition"]) == {
        "StringEquals": {"aws:SourceAccount": "111111111111"},
        "ArnEquals": {
            "aws:SourceArn": "arn:aws:events:us-east-1:111111111111:rule/llm-platform-promotion-on-model-approval"
        },
    }


def test_approved_models_start_the_pipeline_and_other_accounts_may_send_their_approvals(promotion):
    resources = pipeline_template(promotion)["Resources"].values()
    (rule,) = [r["Properties"] for r in resources if r["Type"] == "AWS::Events::Rule"]
    assert rule["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker Model Package State Change"],
        "detail": {
            # staging and prod serve copies of dev's versions, which each release registers Approved: only an
            # approval where versions are made starts one.
            "ModelPackageGroupName": ["llm-platform-dev"],
            "ModelApprovalStatus": ["Approved"],
        },
    }
    senders = sorted(
        r["Properties"]["Statement"]["Principal"]["AWS"]
        for r in resources
        if r["Type"] == "AWS::Events::EventBusPolicy"
    )
    assert senders == ["arn:aws:iam::222222222222:root"]
    forward = promotion.resources("Pipeline-dev", "Training", "AWS::Events::Rule")
    (target,) = next(iter(forward.values()))["Properties"]["Targets"]
    assert target["Arn"] == "arn:aws:events:us-east-1:111111111111:event-bus/default"
    for promoting in ("Pipeline-staging", "Pipeline-prod"):
        assert not promotion.resources(promoting, "Training", "AWS::Events::Rule")


def test_promoted_weights_are_looked_up_again_for_every_release(tmp_path):
    first = synthesize(PROMOTION, tmp_path / "a", release="exec-1", only_stage="staging")
    second = synthesize(PROMOTION, tmp_path / "b", release="exec-2", only_stage="staging")

    def release(assembly) -> str:
        (resource,) = assembly.resources("staging", "Serving", "Custom::PromotedWeights").values()
        return resource["Properties"]["Release"]

    assert (release(first), release(second)) == ("exec-1", "exec-2")


def test_stages_in_the_pipeline_are_the_stages_deployed_by_hand(promotion):
    for stage in ["dev", "staging", "prod"]:
        for stack in ["Storage", "Training", "Serving"]:
            # Only construct paths in descriptions differ ("Pipeline/dev/..." against "dev/...").
            by_hand = json.dumps(promotion.template(stage, stack), sort_keys=True)
            piped = json.dumps(promotion.template(f"Pipeline-{stage}", stack), sort_keys=True)
            assert piped.replace(f"(Pipeline/{stage}/", f"({stage}/") == by_hand


def test_pipeline_app_passes_cdk_nag(promotion):
    assert promotion.error is None, promotion.error


def test_pipeline_template_matches_snapshot(promotion, snapshot):
    template = json.loads(normalize_hashes(json.dumps(pipeline_template(promotion), sort_keys=True)))
    assert template == snapshot.use_extension(JSONSnapshotExtension)


def test_the_default_config_has_no_pipeline_and_the_example_does():
    assert load_config(REPO / "config" / "default.yaml").pipeline is None
    assert load_config(PROMOTION).pipeline.approval_before == ("prod",)


def test_eventbridge_forwards_a_stages_approvals_only_for_its_own_rule(promotion):
    template = promotion.template("Pipeline-dev", "Training")
    (rule,) = promotion.resources("Pipeline-dev", "Training", "AWS::Events::Rule").values()
    assert rule["Properties"]["Name"] == "llm-platform-dev-forward-approvals"
    (target,) = rule["Properties"]["Targets"]
    role = template["Resources"][target["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert render(trust["Condition"]) == {
        "StringEquals": {"aws:SourceAccount": "222222222222"},
        "ArnEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:222222222222:rule/llm-platform-dev-forward-approvals"},
    }


def test_smoke_test_runner_role_names_fit_iam_at_the_longest_project_and_stage_names():
    # IAM role names: at most 64 characters; project names have at most 24, stage names 20 (core/config/fields.py).
    assert len(smoke_test_runner_role_name(f"{'p' * 24}-{'s' * 20}")) <= 64
