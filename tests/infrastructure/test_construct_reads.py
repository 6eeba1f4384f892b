"""The checks' cheap reads of the construct tree (infrastructure/construct_reads.py) give what the plain jsii reads give."""

from __future__ import annotations

import pytest
from aws_cdk import App, CfnResource, NestedStack, Stack, Stage
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from infrastructure import compliance, construct_reads


@pytest.fixture(scope="module")
def tree() -> dict:
    app = App()
    outer = Stack(app, "Outer")
    s3.Bucket(outer, "Bucket")
    CfnResource(outer, "Custom", type="Custom::Thing")
    nested = NestedStack(outer, "Nested")
    sns.Topic(nested, "Topic")
    stage = Stage(app, "Stage")
    inner_stage = Stage(stage, "Inner")
    s3.Bucket(Stack(stage, "StageStack"), "Bucket")
    s3.Bucket(Stack(inner_stage, "InnerStack"), "Bucket")
    return {"app": app, "stage": stage}


def test_each_resource_goes_to_the_stack_that_stack_of_names_with_its_type(tree: dict) -> None:
    grouped = construct_reads.resources_by_stack(tree["app"])
    seen = {}
    for stack, resources in grouped:
        for resource in resources:
            seen[resource.node.path] = (stack.node.path, construct_reads.cfn_type(resource))
    expected = {
        node.node.path: (Stack.of(node).node.path, node.cfn_resource_type)
        for node in tree["app"].node.find_all()
        if isinstance(node, CfnResource)
    }
    assert seen == expected
    # The nested stack's topic is its own, not its parent's; the custom resource's type is read from the resource.
    assert seen["Outer/Nested/Topic/Resource"][0] == "Outer/Nested"
    assert seen["Outer/Custom"][1] == "Custom::Thing"


def test_construct_id_is_the_node_id(tree: dict) -> None:
    bucket = tree["app"].node.find_child("Outer").node.find_child("Bucket")
    assert construct_reads.construct_id(bucket) == "Bucket"
    assert construct_reads.construct_id(bucket) == "Bucket"  # the second read comes from the cache


def test_acknowledgements_leave_out_the_resources_of_nested_stages(tree: dict) -> None:
    """What an aspect added to a stage visits: not a stage inside it (each proxy node returns is a new object, so
    the nested stage's resources are told apart by jsii reference)."""
    paths = {resource.node.path for resource in compliance._own_resources(tree["stage"])}
    assert paths == {"Stage/StageStack/Bucket/Resource"}
