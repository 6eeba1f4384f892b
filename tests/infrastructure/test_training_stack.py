"""TrainingStack: the pipelines, the model package group, and a pipeline role that can do only what a run needs."""

from __future__ import annotations

import json

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
    actions, resources, condition = got["PassJobRoles"]
    # The staging jobs run with a role of their own, the only writer of pretrained/, gated model or not; the
    # registry step with another, the only writer of registered/.
    assert actions == ["iam:PassRole"] and len(resources) == 3
    assert sorted("TrainingRole" in r for r in resources) == [False, False, True]
    assert sorted("StagingRole" in r for r in resources) == [False, False, True]
    assert sorted("RegistryRole" in r for r in resources) == [False, False, True]
    assert condition == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert got["ReadEvaluationReports"][:2] == (["s3:GetObject"], [resources_of_evaluation(got)])
    # Each run reads the commit to fine-tune from the staged weights' record (JsonGet): that one object.
    (record,) = got["ReadStagedWeightsRecord"][1]
    assert got["ReadStagedWeightsRecord"][0] == ["s3:GetObject"] and record.endswith("/pretrained/gpt-j-6b/main.json")
    assert set(got) == {
        "RunPipelineJobs",
        "RegisterModels",
        "PassJobRoles",
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


VPC_STAGE = """
project: vpcjobs
stages:
  dev:
    region: us-east-1
    removal_policy: destroy
    huggingface_token_secret: vpcjobs/dev/huggingface-token
    training:
      vpc: {subnet_ids: [subnet-0123456789abcdef0], security_group_ids: [sg-0123456789abcdef0]}
    serving:
      engine: vllm
      model: llama-3.1-8b
      dtype: bf16
      instance_type: ml.g5.2xlarge
      context_tokens: 8192
      max_batch_size: 4
"""


@pytest.fixture(scope="module")
def vpc_stage(tmp_path_factory):
    """One stage whose jobs run in a VPC, with a gated served model, so its staging jobs have a role of their own."""
    from tests.cdk_assembly import synthesize

    folder = tmp_path_factory.mktemp("vpc-jobs")
    config = folder / "config.yaml"
    config.write_text(VPC_STAGE)
    return synthesize(config, folder / "out", only_stage="dev")


def test_jobs_in_a_vpc_get_the_network_interfaces_sagemaker_documents_on_both_job_roles(vpc_stage):
    assert vpc_stage.error is None, "\n".join(vpc_stage.findings())
    policies = vpc_stage.resources("dev", "Training", "AWS::IAM::Policy")
    ((logical_id, policy),) = [(k, p["Properties"]) for k, p in policies.items() if k.startswith("JobsVpcAccess")]
    roles = json.dumps(policy["Roles"])
    assert "TrainingRole" in roles and "StagingRole" in roles
    statements = {s["Sid"]: s for s in render(policy["PolicyDocument"])["Statement"]}
    actions = {a for s in statements.values() for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    # The list SageMaker documents for CreateTrainingJob and CreateProcessingJob in a VPC, no more.
    assert actions == {
        "ec2:CreateNetworkInterface",
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeVpcs",
        "ec2:DescribeDhcpOptions",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
    }
    arn = "arn:aws:ec2:us-east-1:<AWS::AccountId>:"
    # Not scoped to the configured subnets (execution_role.vpc_access_policy says why): this account and region
    # only, and interface permissions for SageMaker only.
    assert sorted(statements["CreateInterfaces"]["Resource"]) == [
        f"{arn}network-interface/*",
        f"{arn}security-group/*",
        f"{arn}subnet/*",
    ]
    assert statements["HandInterfacesToSageMaker"]["Condition"] == {
        "StringEquals": {"ec2:AuthorizedService": "sagemaker.amazonaws.com"}
    }
    assert "Condition" not in statements["DeleteInterfaces"]
    # Both pipelines wait for the policy: an execution started right after the deploy has its permissions.
    for pipeline in vpc_stage.resources("dev", "Training", "AWS::SageMaker::Pipeline").values():
        assert logical_id in pipeline["DependsOn"]


def test_a_stage_without_a_training_vpc_gets_no_network_permissions(assembly):
    assert not [k for k in assembly.resources("prod", "Training", "AWS::IAM::Policy") if k.startswith("JobsVpcAccess")]


def test_the_training_stack_publishes_the_handler_whose_folder_the_registered_package_names(assembly, vpc_stage):
    (handler,) = [
        p["Properties"]
        for k, p in assembly.resources("dev", "Training", "Custom::CodePackage").items()
        if k.startswith("RegistryHandler")
    ]
    assert handler["Subfolder"] == "inference/"
    assert render(handler["TargetUri"]).endswith("/code/registry-deepspeed/")
    assert "model.py" in handler["RequiredFiles"]
    # The finetune pipeline is given the folder's name (inference/<sha256>/) for ${HandlerFolder}.
    (finetune,) = [
        p["Properties"]
        for p in assembly.resources("dev", "Training", "AWS::SageMaker::Pipeline").values()
        if p["Properties"]["PipelineName"].endswith("-finetune")
    ]
    _, variables = finetune["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Sub"]
    assert "RegistryHandler" in json.dumps(variables["HandlerFolder"])
    # vLLM runs LMI's own handler: nothing to publish.
    assert not [
        k for k in vpc_stage.resources("dev", "Training", "Custom::CodePackage") if k.startswith("RegistryHandler")
    ]
