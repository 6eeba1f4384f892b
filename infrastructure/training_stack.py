"""TrainingStack: the stage's fine-tuning pipeline (SMP), the weights-staging pipeline and the model registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from core.config import ServingConfig, TrainingConfig
from core.naming import PipelineNames
from infrastructure import code_archives
from infrastructure.constructs.execution_role import event_rule_role, vpc_access_policy
from infrastructure.constructs.training_pipeline import TrainingPipelines, registration


def model_approval_pattern(groups: list[str]) -> events.EventPattern:
    """SageMaker's event when a model package version of one of `groups` is approved."""
    return events.EventPattern(
        source=["aws.sagemaker"],
        detail_type=["SageMaker Model Package State Change"],
        detail={"ModelPackageGroupName": groups, "ModelApprovalStatus": ["Approved"]},
    )


class TrainingStack(Stack):
    """Raw data to a registered, evaluated fine-tuned model.

    Args:
        training, serving: the stage's configs (serving says what a registered model will run on).
        names: names of the pipelines and of the model package group.
        serving_image: the LMI image a registered model package runs in.
        forward_model_approvals_to: (account, region) of the promotion pipeline when it is elsewhere.
        token_secret: the name of the stage's Hugging Face token secret (gated models), if any.
        The rest: the stage's storage and the roles the jobs run with.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        training: TrainingConfig,
        serving: ServingConfig,
        names: PipelineNames,
        training_role: iam.IRole,
        staging_role: iam.IRole,
        registry_role: iam.IRole,
        data_bucket: s3.IBucket,
        models_bucket: s3.IBucket,
        artifacts_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        serving_image: str,
        forward_model_approvals_to: tuple[str, str] | None = None,
        token_secret: str | None = None,
        promotion_reader_accounts: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # The jobs' code, and the handler a registered package names (engine deepspeed; registration.py): published
        # once per content in the artifacts bucket, which gives its folder's name (inference/<sha256>/) to the
        # package's OPTION_ENTRYPOINT. No job copies it into the weights: the serving stack's code-packaging function
        # writes the same folder there when it deploys the package, and nothing else may (storage_stack.py).
        self.training_code = code_archives.training_code(self, bucket=artifacts_bucket, encryption_key=encryption_key)
        self.registry_handler = (
            self._registry_handler(serving, artifacts_bucket, encryption_key)
            if registration.serves_handler(serving, training)
            else None
        )
        self.pipelines = TrainingPipelines(
            self,
            "Pipelines",
            training=training,
            serving=serving,
            names=names,
            training_role=training_role,
            staging_role=staging_role,
            registry_role=registry_role,
            data_bucket=data_bucket,
            models_bucket=models_bucket,
            artifacts_bucket=artifacts_bucket,
            encryption_key=encryption_key,
            training_code=self.training_code,
            handler=self.registry_handler,
            serving_image=serving_image,
            token_secret=token_secret,
        )
        self.vpc_access = (
            self._jobs_vpc_access(training, training_role, (staging_role, registry_role))
            if training.vpc is not None
            else None
        )
        self._outputs(names)
        if promotion_reader_accounts:
            self._share_versions(names, promotion_reader_accounts)
        if forward_model_approvals_to:
            self._forward_model_approvals(names, *forward_model_approvals_to)

    def _registry_handler(
        self, serving: ServingConfig, artifacts_bucket: s3.IBucket, encryption_key: kms.IKey
    ) -> code_archives.CodeFolder | None:
        """The handler a registered package names, published under registration.HANDLER_PREFIX."""
        return code_archives.served_handler(
            self,
            "RegistryHandler",
            engine=serving.engine,
            weights_uri=artifacts_bucket.s3_url_for_object(registration.HANDLER_PREFIX),
            log_key=encryption_key,
            weights_key=encryption_key,
        )

    def _jobs_vpc_access(
        self, training: TrainingConfig, training_role: iam.IRole, other_roles: tuple[iam.IRole, ...]
    ) -> iam.Policy:
        """Every job of both pipelines runs in training.vpc (offline_sdk.network): SageMaker creates their network
        interfaces with the role each job runs with. An execution started right after a deploy must find the
        permissions there, so the pipelines wait for them."""
        policy = vpc_access_policy(
            self,
            "JobsVpcAccess",
            role=training_role,
            vpc=training.vpc,
            jobs=True,
            also=tuple(role for role in other_roles if role is not training_role),
        )
        self.pipelines.finetune.node.add_dependency(policy)
        self.pipelines.staging.node.add_dependency(policy)
        return policy

    def _share_versions(self, names: PipelineNames, accounts: Sequence[str]) -> None:
        """The accounts of stages that promote from this one may find and describe its versions (the actions and
        resources of SageMaker's cross-account model registry policy, model-registry-ram-discover.html). The group's
        policy names accounts, not roles: in each, only the stage's promotion role is allowed these actions on this
        group by its own IAM policy (promoted_weights.py). Reading the weights takes the bucket's and key's grants
        too (StorageStack._let_promotions_read), which name the role."""
        group = names.model_package_group
        self.pipelines.model_package_group.model_package_group_policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PromotionDescribesVersions",
                    "Effect": "Allow",
                    "Principal": {"AWS": [f"arn:{self.partition}:iam::{account}:root" for account in accounts]},
                    "Action": [
                        "sagemaker:DescribeModelPackage",
                        "sagemaker:DescribeModelPackageGroup",
                        "sagemaker:ListModelPackages",
                    ],
                    "Resource": [
                        self.format_arn(service="sagemaker", resource="model-package-group", resource_name=group),
                        self.format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*"),
                    ],
                }
            ],
        }

    def _outputs(self, names: PipelineNames) -> None:
        self.finetune_pipeline_output = CfnOutput(self, "FinetunePipelineName", value=names.finetune)
        CfnOutput(self, "StagingPipelineName", value=names.staging)
        CfnOutput(self, "ModelPackageGroupName", value=names.model_package_group)
        CfnOutput(self, "TrainingCodeUri", value=self.training_code.s3_uri)

    def _forward_model_approvals(self, names: PipelineNames, account: str, region: str) -> None:
        """The promotion pipeline lives in another account or region: send it this group's approvals."""
        bus = events.EventBus.from_event_bus_arn(
            self, "PipelineEventBus", f"arn:{self.partition}:events:{region}:{account}:event-bus/default"
        )
        rule_name = f"{names.model_package_group}-forward-approvals"
        events.Rule(
            self,
            "ForwardModelApprovals",
            rule_name=rule_name,
            description=f"Approved versions of {names.model_package_group}, to the promotion pipeline's account",
            event_pattern=model_approval_pattern([names.model_package_group]),
            targets=[
                targets.EventBus(
                    bus,
                    role=event_rule_role(
                        self,
                        "ForwardModelApprovalsRole",
                        rule_name=rule_name,
                        description=f"EventBridge forwards approvals of {names.model_package_group} with this role",
                    ),
                )
            ],
        )
