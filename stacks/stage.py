"""PlatformStage: one copy of the whole platform for one environment (dev, staging, prod)."""

from __future__ import annotations

from typing import Any

from aws_cdk import DefaultStackSynthesizer, Environment, RemovalPolicies, RemovalPolicy, Stack, Stage, Tags
from aws_cdk import aws_iam as iam
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from stacks.catalog import images
from stacks.config import PlatformConfig
from stacks.constructs.training_pipeline.definition import PipelineNames
from stacks.serving_stack import ServingStack
from stacks.storage_stack import StorageStack
from stacks.training_stack import TrainingStack


def role_path(project: str, stage: str) -> str:
    """The IAM path of the roles a stage's training and serving stacks create: the stage key trusts this path, as
    their names are CloudFormation's to choose and are not known when the storage stack deploys."""
    return f"/{project}/{stage}/"


def deploy_synthesizer(region: str) -> DefaultStackSynthesizer:
    """The CDK bootstrap's roles, with the region's partition written out rather than left as `${AWS::Partition}`.

    CDK Pipelines copies these ARNs into its CloudFormation deploy actions, where the placeholder would become an
    Fn::Join that cfn-lint's E3703 (an action's RoleArn must be a role ARN) cannot read. Same roles, same qualifier
    (from context, as the default synthesizer reads it): `cdk deploy` by hand is unchanged.
    """
    partition = RegionInfo.get(region).partition

    def literal(template: str) -> str:
        return template.replace("${AWS::Partition}", partition)

    return DefaultStackSynthesizer(
        deploy_role_arn=literal(DefaultStackSynthesizer.DEFAULT_DEPLOY_ROLE_ARN),
        cloud_formation_execution_role=literal(DefaultStackSynthesizer.DEFAULT_CLOUDFORMATION_ROLE_ARN),
    )


class PlatformStage(Stage):
    """Every stack of one environment, created from that environment's config.

    The same class is synthesized for `cdk deploy` by hand and deployed by the promotion pipeline, so both deploy
    exactly the same thing.

    Args:
        config: the whole platform config (for the project name, tags and the promotion pipeline).
        stage_name: which of `config.stages` this is.
        release: an identifier of this deployment (the pipeline execution); deploy-time lookups run again when it
            changes. '' for deploys by hand.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PlatformConfig,
        stage_name: str,
        release: str = "",
        **kwargs: Any,
    ) -> None:
        stage = config.stages[stage_name]
        account = config.stage_account(stage_name)
        super().__init__(scope, construct_id, env=Environment(account=account, region=stage.region), **kwargs)
        prefix = f"{config.project}-{stage_name}"
        names = PipelineNames(
            finetune=f"{prefix}-finetune", staging=f"{prefix}-stage-weights", model_package_group=prefix
        )
        pipeline = config.pipeline
        forward_approvals = (
            (pipeline.account, pipeline.region)
            if pipeline
            and pipeline.trigger_on_model_approval
            and (account, stage.region) != (pipeline.account, pipeline.region)
            else None
        )
        serving_image = images.serving_image(stage.region, stage.serving.engine)
        roles_path = role_path(config.project, stage_name)

        self.storage = StorageStack(
            self,
            "Storage",
            stack_name=f"{prefix}-storage",
            description=f"{config.project} {stage_name}: KMS key, buckets and SageMaker execution roles",
            synthesizer=deploy_synthesizer(stage.region),
            stage=stage,
            key_user_role_path=roles_path,
            training_images=[
                images.training_image(stage.region, stage.training.smp.version),
                images.processing_image(stage.region, stage.training.processing_instance_type),
                images.processing_image(stage.region, stage.training.evaluate_instance_type),
            ],
            serving_images=[serving_image],
            staging_images=[images.processing_image(stage.region, stage.training.processing_instance_type)],
        )

        self.training = TrainingStack(
            self,
            "Training",
            stack_name=f"{prefix}-training",
            synthesizer=deploy_synthesizer(stage.region),
            description=f"{config.project} {stage_name}: fine-tuning pipeline for {stage.training.model} with SMP",
            training=stage.training,
            serving=stage.serving,
            names=names,
            training_role=self.storage.training_role.role,
            staging_role=self.storage.staging_role.role,
            token_secret=stage.huggingface_token_secret,
            data_bucket=self.storage.data_bucket,
            models_bucket=self.storage.models_bucket,
            artifacts_bucket=self.storage.artifacts_bucket,
            encryption_key=self.storage.key,
            serving_image=serving_image,
            forward_model_approvals_to=forward_approvals,
        )

        self.serving = ServingStack(
            self,
            "Serving",
            stack_name=f"{prefix}-serving",
            synthesizer=deploy_synthesizer(stage.region),
            description=f"{config.project} {stage_name}: LMI endpoint for {stage.serving.model}",
            serving=stage.serving,
            endpoint_name=prefix,
            image_uri=serving_image,
            hosting_role=self.storage.hosting_role.role,
            models_bucket=self.storage.models_bucket,
            data_bucket=self.storage.data_bucket,
            encryption_key=self.storage.key,
            model_package_group=names.model_package_group,
            finetune_pipeline_name=names.finetune,
            release=release,
            smoke_test_account=pipeline.account if pipeline and stage_name in pipeline.smoke_test_after else None,
        )

        for stack in (self.training, self.serving):
            _place_roles(stack, roles_path)

        for key, value in config.stage_tags(stage_name).items():
            Tags.of(self).add(key, value)
        # What a stage keeps when its stacks are deleted is one decision, its removal_policy: every key and log group
        # follows it, not CDK's per-construct defaults (buckets too, in StorageStack, which empties them first).
        removal = RemovalPolicy.RETAIN if stage.removal_policy == "retain" else RemovalPolicy.DESTROY
        RemovalPolicies.of(self).apply(removal, apply_to_resource_types=["AWS::KMS::Key", "AWS::Logs::LogGroup"])


def _place_roles(stack: Stack, path: str) -> None:
    """Put the roles CloudFormation names in `stack` under `path` (named roles keep theirs: a new path would replace
    them, which CloudFormation refuses for a custom name)."""
    for node in stack.node.find_all():
        # role_name is a token even when unset (the L2 passes its physical name): resolve it to know.
        if isinstance(node, iam.CfnRole) and stack.resolve(node.role_name) is None:
            node.path = path
