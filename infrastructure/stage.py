"""PlatformStage: one copy of the whole platform for one environment (dev, staging, prod)."""

from __future__ import annotations

from typing import Any

from aws_cdk import DefaultStackSynthesizer, Environment, RemovalPolicies, RemovalPolicy, Stack, Stage, Tags
from aws_cdk import aws_iam as iam
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from core.catalog import images
from core.config import PlatformConfig, promotion
from core.naming import StageNames
from infrastructure.serving_stack import Promote, ServingStack
from infrastructure.storage_stack import StorageStack
from infrastructure.training_stack import TrainingStack


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
        stage_names = StageNames(config.project, stage_name)
        serving_image = images.serving_image(stage.region, stage.serving.engine)
        self.storage = self._storage_stack(config, stage_name, stage_names, serving_image=serving_image)
        self.training = self._training_stack(config, stage_name, stage_names, serving_image=serving_image)
        self.serving = self._serving_stack(
            config, stage_name, stage_names, serving_image=serving_image, release=release
        )
        for stack in (self.training, self.serving):
            _place_roles(stack, stage_names.role_path)
        self._stage_wide_settings(config, stage_name)

    def _storage_stack(
        self, config: PlatformConfig, stage_name: str, stage_names: StageNames, *, serving_image: str
    ) -> StorageStack:
        """The key, the buckets and the roles; each role may pull only the images its jobs run."""
        stage = config.stages[stage_name]
        return StorageStack(
            self,
            "Storage",
            stack_name=stage_names.stack("storage"),
            description=f"{config.project} {stage_name}: KMS key, buckets and SageMaker execution roles",
            synthesizer=deploy_synthesizer(stage.region),
            stage=stage,
            key_user_role_path=stage_names.role_path,
            endpoint_name=stage_names.endpoint,
            training_images=[
                images.training_image(stage.region, stage.training.smp.version),
                images.processing_image(stage.region, stage.training.processing_instance_type),
                images.processing_image(stage.region, stage.training.evaluate_instance_type),
            ],
            serving_images=[serving_image],
            staging_images=[images.processing_image(stage.region, stage.training.processing_instance_type)],
            promotion_role=stage_names if promotion.promotes(config, stage_name) else None,
            promotion_readers=[
                (account, StageNames(config.project, target))
                for target, account in promotion.promoted_into(config, stage_name).items()
            ],
        )

    def _training_stack(
        self, config: PlatformConfig, stage_name: str, stage_names: StageNames, *, serving_image: str
    ) -> TrainingStack:
        """The pipelines and the model registry, on the storage stack's buckets and roles."""
        stage = config.stages[stage_name]
        return TrainingStack(
            self,
            "Training",
            stack_name=stage_names.stack("training"),
            synthesizer=deploy_synthesizer(stage.region),
            description=f"{config.project} {stage_name}: fine-tuning pipeline for {stage.training.model} with SMP",
            training=stage.training,
            serving=stage.serving,
            names=stage_names.pipelines,
            training_role=self.storage.training_role.role,
            staging_role=self.storage.staging_role.role,
            registry_role=self.storage.registry_role.role,
            token_secret=stage.huggingface_token_secret,
            data_bucket=self.storage.data_bucket,
            models_bucket=self.storage.models_bucket,
            artifacts_bucket=self.storage.artifacts_bucket,
            encryption_key=self.storage.key,
            serving_image=serving_image,
            forward_model_approvals_to=_forwarded_approvals(config, stage_name),
            promotion_reader_accounts=sorted(
                {
                    account
                    for account in promotion.promoted_into(config, stage_name).values()
                    if account is not None and account != config.stage_account(stage_name)
                }
            ),
        )

    def _serving_stack(
        self, config: PlatformConfig, stage_name: str, stage_names: StageNames, *, serving_image: str, release: str
    ) -> ServingStack:
        """The endpoint, on the storage stack's buckets and hosting role."""
        stage = config.stages[stage_name]
        pipeline = config.pipeline
        return ServingStack(
            self,
            "Serving",
            stack_name=stage_names.stack("serving"),
            synthesizer=deploy_synthesizer(stage.region),
            description=f"{config.project} {stage_name}: LMI endpoint for {stage.serving.model}",
            serving=stage.serving,
            endpoint_name=stage_names.endpoint,
            image_uri=serving_image,
            hosting_role=self.storage.hosting_role.role,
            models_bucket=self.storage.models_bucket,
            data_bucket=self.storage.data_bucket,
            encryption_key=self.storage.key,
            model_package_group=stage_names.pipelines.model_package_group,
            finetune_pipeline_name=stage_names.pipelines.finetune,
            release=release,
            smoke_test_account=pipeline.account if pipeline and stage_name in pipeline.smoke_test_after else None,
            promote=Promote(stage_names, promotion.sources_of(config, stage_name), serving_image)
            if promotion.promotes(config, stage_name)
            else None,
        )

    def _stage_wide_settings(self, config: PlatformConfig, stage_name: str) -> None:
        """The stage's tags, and what its stacks keep when they are deleted."""
        for key, value in config.stage_tags(stage_name).items():
            Tags.of(self).add(key, value)
        # What a stage keeps when its stacks are deleted is one decision, its removal_policy: every key and log group
        # follows it, not CDK's per-construct defaults (buckets too, in StorageStack, which empties them first).
        removal = (
            RemovalPolicy.RETAIN if config.stages[stage_name].removal_policy == "retain" else RemovalPolicy.DESTROY
        )
        RemovalPolicies.of(self).apply(removal, apply_to_resource_types=["AWS::KMS::Key", "AWS::Logs::LogGroup"])


def _forwarded_approvals(config: PlatformConfig, stage_name: str) -> tuple[str, str] | None:
    """(account, region) of the promotion pipeline when model approvals trigger it and it is in another account or
    region than the stage; None otherwise, and for a stage that promotes: its versions are copies that a release
    registers, Approved, and must not start another."""
    stage, pipeline = config.stages[stage_name], config.pipeline
    if (
        pipeline
        and pipeline.trigger_on_model_approval
        and not promotion.promotes(config, stage_name)
        and (config.stage_account(stage_name), stage.region) != (pipeline.account, pipeline.region)
    ):
        return pipeline.account, pipeline.region
    return None


def _place_roles(stack: Stack, path: str) -> None:
    """Put the roles CloudFormation names in `stack` under `path` (named roles keep theirs: a new path would replace
    them, which CloudFormation refuses for a custom name)."""
    for node in stack.node.find_all():
        # role_name is a token even when unset (the L2 passes its physical name): resolve it to know.
        if isinstance(node, iam.CfnRole) and stack.resolve(node.role_name) is None:
            node.path = path
