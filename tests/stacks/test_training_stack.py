"""TrainingStack: the pipelines, the model package group, and a pipeline role that can do only what a run needs."""

from __future__ import annotations

import pytest

from tests.cdk_assembly import render, short_id


def one(assembly, stage: str, type_: str) -> dict:
    (resource,) = assembly.resources(stage, "Training", type_).values()
    return resource["Properties"]


def pipeline_role_statements(assembly, stage: str = "prod") -> dict[str, tuple]:
    policies = [
        p["Properties"]
        for p in assembly.resources(stage, "Training", "AWS::IAM::Policy").values()
        if "PipelineRole" in str(p["Properties"]["Roles"])
    ]
    (policy,) = policies
    out = {}
    for s in render(policy["PolicyDocument"]["Statement"]):
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        out[s["Sid"]] = (sorted(actions), sorted(map(str, resources)), s.get("Condition"))
    return out


@pytest.mark.parametrize("stage", ["dev", "staging", "prod"])
def test_stage_has_a_finetune_and_a_staging_pipeline_and_a_model_package_group(assembly, stage):
    names = {
        p["Properties"]["PipelineName"]
        for p in assembly.resources(stage, "Training", "AWS::SageMaker::Pipeline").values()
    }
    assert names == {f"llm-platform-{stage}-finetune", f"llm-platform-{stage}-stage-weights"}
    assert one(assembly, stage, "AWS::SageMaker::ModelPackageGroup")["ModelPackageGroupName"] == f"llm-platform-{stage}"


def test_pipeline_role_runs_pipeline_jobs_passes_only_the_training_role_and_registers_only_here(assembly):
    account = "<AWS::AccountId>"
    got = pipeline_role_statements(assembly)
    assert got["RunPipelineJobs"][0] == sorted(
        [
            "sagemaker:AddTags",
            "sagemaker:CreateProcessingJob",
            "sagemaker:CreateTrainingJob",
            "sagemaker:DescribeProcessingJob",
            "sagemaker:DescribeTrainingJob",
            "sagemaker:StopProcessingJob",
            "sagemaker:StopTrainingJob",
        ]
    )
    assert got["RunPipelineJobs"][1] == [
        f"arn:aws:sagemaker:us-east-1:{account}:processing-job/pipelines-*",
        f"arn:aws:sagemaker:us-east-1:{account}:training-job/pipelines-*",
    ]
    assert got["RegisterModels"][1] == [
        f"arn:aws:sagemaker:us-east-1:{account}:model-package-group/llm-platform-prod",
        f"arn:aws:sagemaker:us-east-1:{account}:model-package/llm-platform-prod/*",
    ]
    actions, resources, condition = got["PassTrainingRole"]
    assert actions == ["iam:PassRole"] and len(resources) == 1 and "TrainingRole" in resources[0]
    assert condition == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert got["ReadEvaluationReports"][:2] == (["s3:GetObject"], [resources_of_evaluation(got)])
    # Each run reads the commit to fine-tune from the staged weights' record (JsonGet): that one object.
    (record,) = got["ReadStagedWeightsRecord"][1]
    assert got["ReadStagedWeightsRecord"][0] == ["s3:GetObject"] and record.endswith("/pretrained/gpt-j-6b/main.json")
    assert set(got) == {
        "RunPipelineJobs",
        "RegisterModels",
        "PassTrainingRole",
        "EncryptJobVolumes",
        "ReadEvaluationReports",
        "ReadStagedWeightsRecord",
    }


def resources_of_evaluation(got: dict) -> str:
    (resource,) = got["ReadEvaluationReports"][1]
    assert resource.endswith("/evaluation/*")
    return resource


def test_pipeline_role_trusts_only_sagemaker_for_this_account(assembly):
    roles = {short_id(k): v["Properties"] for k, v in assembly.resources("prod", "Training", "AWS::IAM::Role").items()}
    role = roles["PipelinesPipelineRole"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert render(statement["Condition"]) == {"StringEquals": {"aws:SourceAccount": "<AWS::AccountId>"}}
    assert "ManagedPolicyArns" not in role


def test_outputs_name_the_pipelines_and_the_group(assembly):
    outputs = {
        short_id(k): v["Value"] for k, v in assembly.template("dev", "Training")["Outputs"].items() if "Export" not in v
    }
    assert outputs["FinetunePipelineName"] == "llm-platform-dev-finetune"
    assert outputs["StagingPipelineName"] == "llm-platform-dev-stage-weights"
    assert outputs["ModelPackageGroupName"] == "llm-platform-dev"


def test_training_role_may_pull_the_training_and_processing_images(assembly):
    policies = assembly.resources("prod", "Storage", "AWS::IAM::Policy")
    training = next(p for p in policies.values() if "TrainingRole" in str(p["Properties"]["Roles"]))
    pulls = [s for s in training["Properties"]["PolicyDocument"]["Statement"] if s["Sid"].startswith("PullImages")]
    assert [s["Resource"] for s in pulls] == ["arn:aws:ecr:us-east-1:763104351884:repository/pytorch-training"]
