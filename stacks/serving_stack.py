"""ServingStack: the stage's LMI inference endpoint, sized and checked when the config loaded."""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from stacks import code_archives
from stacks.catalog.models import StagedWeights
from stacks.config import ServingConfig
from stacks.constructs.lmi_endpoint import LmiEndpoint

AWS_CUSTOM_RESOURCE_SINGLETON = "AWS679f53fac002430cb0da5b7982bd2287"
# The deploy-time lookup of where the served weights are, whichever the source: a stage has at most one.
WEIGHTS_LOOKUP = "WeightsLookup"


def smoke_test_role_name(endpoint_name: str) -> str:
    """The role in the stage's account that the smoke test assumes."""
    return f"{endpoint_name}-smoke-test"


def smoke_test_runner_role_name(endpoint_name: str) -> str:
    """The promotion pipeline's CodeBuild role (in the pipeline's account) that runs the smoke test and is the only
    principal the stage's smoke-test role trusts. At most 63 characters: project and stage names are capped at 24
    and 20."""
    return f"{endpoint_name}-smoke-test-runner"


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
        model_package_group: the stage's model package group (weights source 'latest_approved' by default).
        finetune_pipeline_name: the stage's fine-tuning pipeline (the smoke test checks it exists).
        release: changes with every pipeline execution, so deploy-time lookups run again ('' by hand).
        smoke_test_account: the promotion pipeline's account, whose smoke-test CodeBuild role (and nothing else
            there) may assume this stage's smoke-test role; None: no role.
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
        model_package_group: str,
        finetune_pipeline_name: str,
        release: str = "",
        smoke_test_account: str | None = None,
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
        weights_uri = self._weights_uri(
            serving, models_bucket, hosting_role, model_package_group, release, encryption_key
        )
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
        staged = serving.staged_weights
        if staged is not None and staged.pinned:
            # A pinned commit's location is a literal: only this makes the model wait for its record's check.
            self.endpoint.model.node.add_dependency(self.node.find_child(WEIGHTS_LOOKUP))
        self.endpoint_name_output = CfnOutput(self, "EndpointName", value=endpoint_name)
        CfnOutput(self, "InferenceCodeUri", value=self.code.s3_uri)
        self.smoke_test_role_output = (
            self._smoke_test_role(endpoint_name, finetune_pipeline_name, smoke_test_account)
            if smoke_test_account
            else None
        )

    def _weights_uri(
        self,
        serving: ServingConfig,
        models_bucket: s3.IBucket,
        role: iam.IRole,
        default_group: str,
        release: str,
        encryption_key: kms.IKey,
    ) -> str:
        """The S3 prefix of the weights to serve; what only exists once something ran (a staging, a registered model
        package) is read at deploy time, never at synth."""
        weights = serving.weights
        if weights.source == "pretrained":
            return self._staged_weights_uri(serving.staged_weights, models_bucket, release, encryption_key)
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
        # Register step). Read when the stack deploys, never at synth.
        lookup_logs = self._lookup_logs(encryption_key)
        if weights.source == "latest_approved":
            # The newest Approved version of the group. The release is part of the lookup's physical id: a new
            # release (every pipeline execution) looks again; a deploy by hand keeps what it found unless RELEASE
            # is given.
            group = weights.model_package_group or default_group
            latest = cr.AwsCustomResource(
                self,
                "LatestApprovedModelPackage",
                on_update=cr.AwsSdkCall(
                    service="SageMaker",
                    action="listModelPackages",
                    parameters={
                        "ModelPackageGroupName": group,
                        "ModelApprovalStatus": "Approved",
                        "SortBy": "CreationTime",
                        "SortOrder": "Descending",
                        "MaxResults": 1,
                    },
                    physical_resource_id=cr.PhysicalResourceId.of(f"{group}@{release or 'manual'}"),
                    output_paths=["ModelPackageSummaryList.0.ModelPackageArn"],
                ),
                policy=cr.AwsCustomResourcePolicy.from_statements(
                    [iam.PolicyStatement(actions=["sagemaker:ListModelPackages"], resources=["*"])]
                ),
                install_latest_aws_sdk=False,
                log_group=lookup_logs,
            )
            package_arn = latest.get_response_field("ModelPackageSummaryList.0.ModelPackageArn")
            package_resources = [self._package_versions_arn(group)]
        else:
            latest = None
            package_arn, package_resources = weights.model_package_arn, [weights.model_package_arn]
        describe = cr.AwsCustomResource(
            self,
            WEIGHTS_LOOKUP,
            on_update=cr.AwsSdkCall(
                service="SageMaker",
                action="describeModelPackage",
                parameters={"ModelPackageName": package_arn},
                physical_resource_id=cr.PhysicalResourceId.of(package_arn),
                output_paths=["InferenceSpecification.Containers.0.Environment.WEIGHTS_S3_URI"],
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=["sagemaker:DescribeModelPackage"], resources=package_resources)]
            ),
            install_latest_aws_sdk=False,
            log_group=lookup_logs,
        )
        self._suppress_lookup_findings(*(c for c in (describe, latest) if c is not None))
        return describe.get_response_field("InferenceSpecification.Containers.0.Environment.WEIGHTS_S3_URI")

    def _staged_weights_uri(
        self, staged: StagedWeights, models_bucket: s3.IBucket, release: str, encryption_key: kms.IKey
    ) -> str:
        """pretrained/<name>/<commit>/ of what the staging pipeline copied, after reading the commit's record when
        the stack deploys: staging writes it after the last file, so the endpoint never starts on a staging that
        stopped half-way, nor before one ran (the deploy stops here, not at the endpoint's health check, up to 47
        minutes later). Pinned, the commit comes from the config and the record only has to exist; following main, it
        comes from main's record, read again on each release (a deploy by hand keeps the commit it found unless RELEASE
        is given, as for latest_approved): staging main again changes what is served only at the next deploy.

        HeadObject returns the record's metadata, where staging put the commit (CloudFormation cannot parse the
        JSON body); it needs s3:GetObject on that one key and decrypts nothing, so the lookup gets no key grant.
        """
        key = staged.record_key
        record = cr.AwsCustomResource(
            self,
            WEIGHTS_LOOKUP,
            on_update=cr.AwsSdkCall(
                service="S3",
                action="headObject",
                parameters={"Bucket": models_bucket.bucket_name, "Key": key},
                physical_resource_id=cr.PhysicalResourceId.of(key if staged.pinned else f"{key}@{release or 'manual'}"),
                output_paths=["Metadata.commit"],
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=["s3:GetObject"], resources=[models_bucket.arn_for_objects(key)])]
            ),
            install_latest_aws_sdk=False,
            log_group=self._lookup_logs(encryption_key),
        )
        self._suppress_lookup_findings()
        if staged.pinned:
            return models_bucket.s3_url_for_object(staged.files_prefix(staged.revision))
        return models_bucket.s3_url_for_object(staged.prefix) + record.get_response_field("Metadata.commit") + "/"

    def _lookup_logs(self, encryption_key: kms.IKey) -> logs.LogGroup:
        return logs.LogGroup(
            self, "WeightsLookupLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=encryption_key
        )

    def _smoke_test_role(self, endpoint_name: str, pipeline_name: str, account: str) -> CfnOutput:
        """What the promotion pipeline's smoke test may do in this stage: invoke and describe the endpoint and look
        up the fine-tuning pipeline. Named, so the pipeline (in another account, perhaps) can name it too.

        Trusted: the pipeline account, on condition that the caller is the smoke test's CodeBuild role there
        (aws:PrincipalArn). Naming that role as the principal instead would make IAM check that it exists when this
        stack deploys, and pin its unique id: a stage deployed before the pipeline, or a re-created CodeBuild role,
        would break the trust.
        """
        runner = f"arn:{self.partition}:iam::{account}:role/{smoke_test_runner_role_name(endpoint_name)}"
        role = iam.Role(
            self,
            "SmokeTestRole",
            role_name=smoke_test_role_name(endpoint_name),
            description=f"Assumed by the promotion pipeline's smoke test of {endpoint_name}",
            assumed_by=iam.AccountPrincipal(account).with_conditions({"ArnEquals": {"aws:PrincipalArn": runner}}),
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["sagemaker:InvokeEndpoint", "sagemaker:DescribeEndpoint"],
                resources=[self.format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name)],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["sagemaker:DescribePipeline"],
                resources=[self.format_arn(service="sagemaker", resource="pipeline", resource_name=pipeline_name)],
            )
        )
        return CfnOutput(self, "SmokeTestRoleArn", value=role.role_arn)

    def _package_versions_arn(self, group: str) -> str:
        return self.format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*")

    def _suppress_lookup_findings(self, *lookups: cr.AwsCustomResource) -> None:
        # The CDK runs every AwsCustomResource of a stack through one singleton function at the stack's top.
        singleton = self.node.find_child(AWS_CUSTOM_RESOURCE_SINGLETON)
        NagSuppressions.add_resource_suppressions(
            singleton,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason="The CDK's AwsCustomResource function logs with AWSLambdaBasicExecutionRole; its other "
                    "permissions only read where the served weights are: the configured model package (group), or "
                    "the record of the staged weights",
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
        for lookup in lookups:
            NagSuppressions.add_resource_suppressions(
                lookup,
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason="ListModelPackages has no resource-level permissions; DescribeModelPackage is "
                        "limited to the versions of the configured model package group",
                        applies_to=[
                            "Resource::*",
                            RegexAppliesTo(
                                regex=r"/^Resource::arn:[^:]+:sagemaker:.*:model-package\/[A-Za-z0-9-]+\/\*$/"
                            ),
                        ],
                    )
                ],
                apply_to_children=True,
            )
