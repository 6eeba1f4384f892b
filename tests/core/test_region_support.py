"""Regions: a stage's region must have every image the stage runs and every CloudFormation resource type its stacks
use; synth says which region, stack, field and type, instead of a traceback or a failed deploy."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_sagemaker as sagemaker

import app as cdk_app
from core import region_support
from core.api_limits import aws_tables
from core.catalog import images
from core.config import ConfigError, load_config
from core.config.fields import aws_regions
from infrastructure import region_checks
from tests.cdk_assembly import cdk_context

SMP_V2 = "    training: {precision: bf16, smp: {version: 2, tensor_parallel_degree: 1, hybrid_shard_degree: 8}}\n"


def config_file(tmp_path: Path, region: str, extra: str = "") -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text(f"stages:\n  dev:\n    region: {region}\n    removal_policy: destroy\n{extra}")
    return path


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("region", "extra", "lacking", "field"),
    [
        ("af-south-1", SMP_V2, "SMP v2 training image", "training.smp.version"),
        ("ap-east-2", "", "LMI image for engine deepspeed", "serving.engine"),
        # No DLC registry at all in the European Sovereign Cloud: the LMI images are missing with the rest.
        ("eusc-de-east-1", "", "LMI image for engine deepspeed", "serving.engine"),
    ],
)
def test_a_region_without_an_image_the_stage_needs_is_refused_with_the_regions_that_work(
    tmp_path, region, extra, lacking, field
):
    path = config_file(tmp_path, region, extra)
    with pytest.raises(ConfigError) as error:
        cdk_app.build_app(App(), load_config(path), config_path=str(path))
    message = str(error.value)
    assert message.startswith(f"{path}: invalid configuration:\n  - stages.dev.region: {region} has no ")
    assert lacking in message.split(" (chosen by ", 1)[0]
    assert field in message.split(" (chosen by ", 1)[1].split(";", 1)[0]
    assert "; image tables of the SageMaker SDK 2.257.7 pinned here); regions with every image this stage needs: " in (
        message
    )
    working = message.rsplit(": ", 1)[1].split(", ")
    assert "us-east-1" in working and region not in working


def test_the_regions_offered_are_exactly_those_where_every_lookup_succeeds(tmp_path):
    stage = load_config(config_file(tmp_path, "us-east-1", SMP_V2)).stages["dev"]
    regions = sorted(aws_regions())
    needs = region_support.stage_images(stage)
    for region in regions:
        found = all(images.supported_regions(lookup, [region]) for _, _, lookup in needs)
        failed = []
        for _, _, lookup in needs:
            try:
                lookup(region)
            except ValueError:
                failed.append(lookup)
        assert found == (not failed), region


def test_smp_v2_has_images_in_fewer_regions_than_the_cdk_knows():
    """The issue's count: the pinned SDK has no SMP v2 image in 29 of the CDK's regions, and SMP v1's (the
    PyTorch 1.13.1 DLC) is missing from 6 of them."""
    regions = sorted(aws_regions())
    for version, missing in ((1, 6), (2, 29)):
        supported = images.supported_regions(lambda r, v=version: images.training_image(r, v), regions)
        assert len(regions) - len(supported) == missing


def _stack_with_a_model_package_group(region: str) -> App:
    app = App()
    stack = Stack(app, "Registry", stack_name="llm-dev-training", env=Environment(region=region))
    sagemaker.CfnModelPackageGroup(stack, "Group", model_package_group_name="llm-dev")
    app.node.add_validation(region_checks.ResourceTypesInRegion(app))
    return app


def test_a_stack_using_a_resource_type_its_region_lacks_fails_synth():
    with pytest.raises(
        RuntimeError,
        match=r"llm-dev-training: CloudFormation in cn-northwest-1 has no AWS::SageMaker::ModelPackageGroup "
        r"\(cfn-lint 1\.58\.0 provider schemas of ",
    ):
        _stack_with_a_model_package_group("cn-northwest-1").synth()
    assert _stack_with_a_model_package_group("us-east-1").node.validate() == []


@pytest.mark.parametrize(
    "region",
    # me-south-1: cfn-lint has no list for it; us-iso-east-1: its list is a copy of us-east-1's.
    ["me-south-1", "us-iso-east-1"],
)
def test_a_region_without_a_published_resource_list_cannot_be_checked_and_is_refused(region):
    (problem,) = _stack_with_a_model_package_group(region).node.validate()
    assert problem.startswith(f"llm-dev-training: the CloudFormation resource types of {region} are not published")


@pytest.mark.bad_input("config")
@pytest.mark.parametrize("region", ["cn-north-1", "cn-northwest-1"])
def test_a_china_stage_is_refused_at_synth_naming_stack_type_and_region(tmp_path, region):
    """The China regions have every image (the SDK serves them) but CloudFormation there has no model registry."""
    path = config_file(tmp_path, region)
    app = App(context=cdk_context())
    cdk_app.build_app(app, load_config(path), config_path=str(path))
    (problem,) = app.node.validate()
    assert problem.startswith(
        f"llm-platform-dev-training: CloudFormation in {region} has no AWS::SageMaker::ModelPackageGroup "
        f"({aws_tables.resource_types_source()}); regions with every resource type of this stack: "
    )
    offered = problem.rsplit(": ", 1)[1].split(", ")
    assert {"us-east-1", "us-gov-west-1"} <= set(offered) and not any(r.startswith("cn-") for r in offered)


def test_govcloud_west_has_every_image_and_resource_type_a_default_stage_uses(assembly, tmp_path):
    config = load_config(config_file(tmp_path, "us-gov-west-1"))
    assert region_support.image_problems(config, sorted(aws_regions())) == []
    used = {
        resource["Type"]
        for stack in assembly.templates["dev"].values()
        for resource in stack["Resources"].values()
        if not resource["Type"].startswith("Custom::")
    }
    assert "AWS::SageMaker::ModelPackageGroup" in used
    assert aws_tables.missing_resource_types("us-gov-west-1", used) == []
    assert aws_tables.missing_resource_types("cn-north-1", used) == ["AWS::SageMaker::ModelPackageGroup"]


def test_a_resource_type_outside_the_table_is_named_with_the_command_that_adds_it():
    with pytest.raises(
        ValueError, match=r"AWS::Bedrock::Agent: not in cfn_resource_types\.json.*python -m generators\.aws_tables"
    ):
        aws_tables.missing_resource_types("us-east-1", {"AWS::Bedrock::Agent", "Custom::CodePackage"})
