"""Reading the cloud assembly: custom-resource values, file assets, and template values resolved as deployed."""

from __future__ import annotations

import json

import pytest

from rehearsal.assembly import Resolver, StackTemplate, Unresolvable, custom_attribute_uses, file_assets

TEMPLATE = {
    "Resources": {
        "Archive": {
            "Type": "Custom::CodePackage",
            "Properties": {},
            "Metadata": {"aws:cdk:path": "staging/Serving/InferenceCode/Archive/Default"},
        },
        "Model": {
            "Type": "AWS::SageMaker::Model",
            "Properties": {
                "PrimaryContainer": {"ModelDataUrl": {"Fn::GetAtt": ["Archive", "Uri"]}, "Image": "lmi:0.27.0"}
            },
            "Metadata": {"aws:cdk:path": "staging/Serving/Endpoint/Model"},
        },
        "Pipeline": {
            "Type": "AWS::SageMaker::Pipeline",
            "Properties": {
                "PipelineDefinition": {
                    "PipelineDefinitionBody": {
                        "Fn::Sub": ['{"code": "${Code}", "uri": "${Archive.Uri}"}', {"Code": "x"}]
                    }
                }
            },
        },
        "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
    },
    "Outputs": {
        "InferenceCodeUri": {"Value": {"Fn::GetAtt": ["Archive", "Uri"]}},
        "KeyArn": {"Value": {"Fn::GetAtt": ["Key", "Arn"]}},
    },
}


def stack(template=TEMPLATE, assets_file=None) -> StackTemplate:
    return StackTemplate("llm-platform-staging-serving", "staging/Serving", template, assets_file)


def test_finds_every_use_of_a_custom_resources_data_in_properties_sub_strings_and_outputs():
    uses = [(u.where, u.source, u.user_type) for u in custom_attribute_uses(stack())]
    source = "staging/Serving/InferenceCode/Archive/Default.Uri (Custom::CodePackage)"
    assert uses == [
        ("staging/Serving/Endpoint/Model: PrimaryContainer.ModelDataUrl", source, "AWS::SageMaker::Model"),
        ("staging/Serving/Pipeline: PipelineDefinition.PipelineDefinitionBody", source, "AWS::SageMaker::Pipeline"),
        ("staging/Serving output InferenceCodeUri", source, "output"),
    ]


def resolver(**overrides) -> Resolver:
    arguments = {
        "physical_ids": {"Archive": "archive-1", "Key": "key-1", "Bucket": "data-bucket-1"},
        "types": {"Archive": "Custom::CodePackage", "Key": "AWS::KMS::Key", "Bucket": "AWS::S3::Bucket"},
        "exports": {"storage:DataBucket": "data-bucket-1"},
        "pseudo": {"AWS::AccountId": "123456789012", "AWS::Region": "us-east-1", "AWS::Partition": "aws"},
        "attribute": lambda resource_type, physical_id, attribute: f"arn:{resource_type}:{physical_id}:{attribute}",
    }
    return Resolver(**{**arguments, **overrides})


def test_resolves_the_intrinsics_the_cdk_writes_against_the_deployed_stack():
    r = resolver()
    assert r.resolve({"Fn::Join": ["", ["s3://", {"Fn::ImportValue": "storage:DataBucket"}, "/pretrained/"]]}) == (
        "s3://data-bucket-1/pretrained/"
    )
    assert r.resolve({"Fn::Join": [":", ["arn", {"Ref": "AWS::Partition"}, {"Ref": "AWS::AccountId"}]]}) == (
        "arn:aws:123456789012"
    )
    assert r.resolve({"Ref": "Bucket"}) == "data-bucket-1"
    assert r.resolve({"Fn::GetAtt": ["Key", "Arn"]}) == "arn:AWS::KMS::Key:key-1:Arn"
    assert r.resolve({"Fn::GetAtt": "Key.Arn"}) == "arn:AWS::KMS::Key:key-1:Arn"
    assert r.resolve({"Fn::Select": [1, {"Fn::Split": ["/", "a/b/c"]}]}) == "b"
    assert r.resolve({"Fn::Sub": "cdk-assets-${AWS::AccountId}-${AWS::Region}/${Bucket}/${Key.Arn}"}) == (
        "cdk-assets-123456789012-us-east-1/data-bucket-1/arn:AWS::KMS::Key:key-1:Arn"
    )
    assert r.resolve({"Fn::Sub": ["${Name}-x", {"Name": {"Ref": "Bucket"}}]}) == "data-bucket-1-x"
    # Nested structures resolve throughout; plain values stay as they are.
    assert r.resolve({"Statement": [{"Resource": {"Ref": "Bucket"}, "Effect": "Allow"}], "Version": 1}) == {
        "Statement": [{"Resource": "data-bucket-1", "Effect": "Allow"}],
        "Version": 1,
    }


def test_values_only_a_custom_resource_or_an_unknown_function_produces_are_unresolvable():
    r = resolver()
    with pytest.raises(Unresolvable, match=r"Archive\.Uri comes from a custom resource \(Custom::CodePackage\)"):
        r.resolve({"Fn::GetAtt": ["Archive", "Uri"]})
    with pytest.raises(Unresolvable, match="no export named storage:Missing"):
        r.resolve({"Fn::ImportValue": "storage:Missing"})
    with pytest.raises(Unresolvable, match="Fn::If is not evaluated"):
        r.resolve({"Fn::If": ["Cond", "a", "b"]})
    with pytest.raises(Unresolvable, match="Ref Nope"):
        r.resolve({"Ref": "Nope"})


def test_reads_each_attribute_once():
    calls = []
    r = resolver(attribute=lambda t, p, a: calls.append((t, p, a)) or "arn")
    r.resolve([{"Fn::GetAtt": ["Key", "Arn"]}, {"Fn::GetAtt": ["Key", "Arn"]}])
    assert calls == [("AWS::KMS::Key", "key-1", "Arn")]


def test_file_assets_name_the_bootstrap_bucket_of_the_account_and_region(tmp_path):
    assets = tmp_path / "stack.assets.json"
    destination = {"bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}", "objectKey": "abc.zip"}
    assets.write_text(json.dumps({"files": {"abc": {"source": {}, "destinations": {"current": destination}}}}))
    assert file_assets(stack(assets_file=assets), account="111111111111", region="eu-west-1") == [
        ("cdk-hnb659fds-assets-111111111111-eu-west-1", "abc.zip")
    ]
    assert file_assets(stack(), account="111111111111", region="eu-west-1") == []
