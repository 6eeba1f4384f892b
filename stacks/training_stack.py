"""TrainingStack: the stage's fine-tuning pipeline (SMP), the weights-staging pipeline and the model registry."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks import code_archives
from stacks.config import ServingConfig, TrainingConfig
from stacks.constructs.execution_role import event_rule_role
from stacks.constructs.training_pipeline import TrainingPipelines
from stacks.constructs.training_pipeline.definition import PipelineNames


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
        serving_image, serving_properties: the LMI image and rendered serving.properties a registered model carries.
        forward_model_approvals_to: (account, region) of the promotion pipeline when it is elsewhere.
        The rest: the stage's storage and the role the jobs run with.
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
        data_bucket: s3.IBucket,
        models_bucket: s3.IBucket,
        artifacts_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        serving_image: str,
        serving_properties: str,
        forward_model_approvals_to: tuple[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # The jobs' code, and the inference code a registered model package carries.
        self.training_code = code_archives.training_code(self, bucket=artifacts_bucket, encryption_key=encryption_key)
        self.registry_code = code_archives.inference_code(
            self,
            "RegistryInferenceCode",
            bucket=artifacts_bucket,
            encryption_key=encryption_key,
            engine=serving.engine,
            serving_properties=serving_properties,
            use="registry",
        )
        self.pipelines = TrainingPipelines(
            self,
            "Pipelines",
            training=training,
            serving=serving,
            names=names,
            training_role=training_role,
            data_bucket=data_bucket,
            models_bucket=models_bucket,
            artifacts_bucket=artifacts_bucket,
            encryption_key=encryption_key,
            training_code=self.training_code,
            inference_code=self.registry_code,
            serving_image=serving_image,
        )
        self.finetune_pipeline_output = CfnOutput(self, "FinetunePipelineName", value=names.finetune)
        CfnOutput(self, "StagingPipelineName", value=names.staging)
        CfnOutput(self, "ModelPackageGroupName", value=names.model_package_group)
        CfnOutput(self, "TrainingCodeUri", value=self.training_code.s3_uri)

        if forward_model_approvals_to:
            # The promotion pipeline lives in another account or region: send it this group's approvals.
            account, region = forward_model_approvals_to
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
