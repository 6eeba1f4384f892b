"""ServingStack: the stage's LMI inference endpoint, sized and checked when the config loaded."""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from stacks import code_archives, layout
from stacks.config import ServingConfig
from stacks.constructs.lmi_endpoint import LmiEndpoint

AWS_CUSTOM_RESOURCE_SINGLETON = "AWS679f53fac002430cb0da5b7982bd2287"


class ServingStack(Stack):
    """One LMI endpoint, its scaling, alarms and dashboard.

    Args:
        serving: the stage's serving config (already validated: the model fits the instance).
        endpoint_name: the endpoint's stable name.
        image_uri: the LMI container image for the engine and region.
        serving_properties: the engine's serving.properties rendered for the stage, packaged with the handler.
        hosting_role: the role the endpoint runs with.
        models_bucket: holds the staged pretrained weights and the fine-tuned ones.
        data_bucket: receives captured requests.
        artifacts_bucket: where the inference code archive goes.
        encryption_key: the stage key.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        serving: ServingConfig,
        endpoint_name: str,
        image_uri: str,
        serving_properties: str,
        hosting_role: iam.IRole,
        models_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        artifacts_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.code = code_archives.inference_code(
            self,
            "InferenceCode",
            bucket=artifacts_bucket,
            encryption_key=encryption_key,
            engine=serving.engine,
            serving_properties=serving_properties,
            use="inference",
        )
        weights_uri = self._weights_uri(serving, models_bucket, hosting_role)
        self.endpoint = LmiEndpoint(
            self,
            "Endpoint",
            config=serving,
            endpoint_name=endpoint_name,
            image_uri=image_uri,
            code_uri=self.code.s3_uri,
            weights_uri=weights_uri,
            role=hosting_role,
            encryption_key=encryption_key,
            data_bucket=data_bucket,
        )
        CfnOutput(self, "EndpointName", value=endpoint_name)
        CfnOutput(self, "InferenceCodeUri", value=self.code.s3_uri)

    def _weights_uri(self, serving: ServingConfig, models_bucket: s3.IBucket, role: iam.IRole) -> str:
        """The S3 prefix of the weights to serve; a model package's is read at deploy time, never at synth."""
        weights = serving.weights
        if weights.source == "pretrained":
            return models_bucket.s3_url_for_object(f"{layout.PRETRAINED}{serving.model}/")
        if weights.source == "s3":
            bucket, _, prefix = weights.s3_uri.removeprefix("s3://").partition("/")
            policy = iam.Policy(
                self,
                "ReadExternalWeights",
                statements=[
                    iam.PolicyStatement(
                        actions=["s3:GetObject"], resources=[f"arn:{self.partition}:s3:::{bucket}/{prefix}*"]
                    ),
                    iam.PolicyStatement(
                        actions=["s3:ListBucket"],
                        resources=[f"arn:{self.partition}:s3:::{bucket}"],
                        conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
                    ),
                ],
                roles=[role],
            )
            NagSuppressions.add_resource_suppressions(
                policy,
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason="The endpoint reads every file of the configured weights prefix; the statement is "
                        "limited to that bucket and prefix",
                        applies_to=[
                            RegexAppliesTo(
                                regex=f"/^Resource::arn:[^:]+:s3:::{re.escape(bucket)}\\/{re.escape(prefix)}\\*$/"
                            )
                        ],
                    )
                ],
            )
            return weights.s3_uri
        # A registered model package: its container environment names the weights (set by the training pipeline's
        # Register step); read it when the stack deploys.
        describe = cr.AwsCustomResource(
            self,
            "ModelPackageWeights",
            on_update=cr.AwsSdkCall(
                service="SageMaker",
                action="describeModelPackage",
                parameters={"ModelPackageName": weights.model_package_arn},
                physical_resource_id=cr.PhysicalResourceId.of(weights.model_package_arn),
                output_paths=["InferenceSpecification.Containers.0.Environment.WEIGHTS_S3_URI"],
            ),
            policy=cr.AwsCustomResourcePolicy.from_sdk_calls(resources=[weights.model_package_arn]),
            install_latest_aws_sdk=False,
        )
        # The CDK runs every AwsCustomResource of a stack through one singleton function, created at the stack's top.
        singleton = self.node.find_child(AWS_CUSTOM_RESOURCE_SINGLETON)
        NagSuppressions.add_resource_suppressions(
            singleton,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason="The CDK's AwsCustomResource function logs with AWSLambdaBasicExecutionRole; its only "
                    "other permission is DescribeModelPackage on the configured package",
                    applies_to=[
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
                    ],
                ),
                NagPackSuppression(
                    id="AwsSolutions-L1",
                    reason="AwsCustomResource's function runs the Node.js runtime aws-cdk-lib pins for it",
                ),
            ],
            apply_to_children=True,
        )
        return describe.get_response_field("InferenceSpecification.Containers.0.Environment.WEIGHTS_S3_URI")
