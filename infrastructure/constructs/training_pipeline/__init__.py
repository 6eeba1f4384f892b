"""TrainingPipelines: the stage's fine-tuning pipeline, its weights-staging pipeline, and the role that runs them.

The definitions come from finetune_pipeline.py and staging_pipeline.py (the SageMaker SDK, offline, at synth:
offline_sdk.py); their `${Name}` placeholders are
resolved by CloudFormation (Fn::Sub) with the stage's buckets, code archive keys, role and key. The pipelines run
with their own role, which may start only pipeline-named jobs, pass only the training role, and register only into
the stage's model package group.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Fn, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from core import bucket_layout
from core.config import ServingConfig, TrainingConfig
from core.naming import PipelineNames
from infrastructure.constructs.code_package import CodeFolder, CodePackage
from infrastructure.constructs.training_pipeline import finetune_pipeline, offline_sdk, registration, staging_pipeline


class TrainingPipelines(Construct):
    """Args:
    training: the stage's training config (validated: the layout fits the instances).
    serving: the stage's serving config (what a registered model package is meant to run on).
    names: the pipelines' and the model package group's names.
    training_role: the role the fine-tuning jobs run with.
    staging_role: the role the weights-staging jobs run with, their own: the only writer of pretrained/ and the only
        reader of the Hugging Face token (gated models).
    registry_role: the role the registry step runs with: the only writer of registered/, the weights a model package
        names.
    token_secret: the name of the stage's Hugging Face token secret, if it has one; gated repositories' steps get it.
    data_bucket, models_bucket, artifacts_bucket, encryption_key: the stage's storage.
    training_code: the jobs' packaged code.
    handler: the DeepSpeed handler published under registration.HANDLER_PREFIX (engine deepspeed), whose folder the
        registered package's OPTION_ENTRYPOINT names; None for engines LMI serves with its own handler.
    serving_image: the LMI image a registered model package runs in.
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
        training_code: CodePackage,
        handler: CodeFolder | None,
        serving_image: str,
        token_secret: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        values = {
            "DataBucket": data_bucket.bucket_name,
            "ModelsBucket": models_bucket.bucket_name,
            "ArtifactsBucket": artifacts_bucket.bucket_name,
            "TrainingCodeKey": training_code.object_key,
            **({"HandlerFolder": handler.folder} if handler is not None else {}),
            "TrainingRoleName": training_role.role_name,
            "StagingRoleName": staging_role.role_name,
            "RegistryRoleName": registry_role.role_name,
            "KeyArn": encryption_key.key_arn,
        }
        self.model_package_group = sagemaker.CfnModelPackageGroup(
            self,
            "ModelPackageGroup",
            model_package_group_name=names.model_package_group,
            model_package_group_description=f"{training.model} fine-tuned by {names.finetune}",
        )
        job_roles = [training_role, staging_role, registry_role]
        self.role = self._pipeline_role(names, job_roles, encryption_key, data_bucket)
        self._allow_reading_staged_record(training, models_bucket)
        finetune_body = self._finetune_body(training, serving, names=names, serving_image=serving_image)
        staging_body = staging_pipeline.staging_definition(
            training, serving, region=Stack.of(self).region, names=names, token_secret=token_secret
        )
        self.finetune = self._pipeline("Finetune", names.finetune, finetune_body, values, training)
        self.staging = self._pipeline("StageWeights", names.staging, staging_body, values, training)
        self.finetune.node.add_dependency(self.model_package_group)

    def _allow_reading_staged_record(self, training: TrainingConfig, models_bucket: s3.IBucket) -> None:
        """Each fine-tuning run reads the commit to train on from the staged weights' record
        (offline_sdk.staged_commit): that one object, nothing else of the models bucket."""
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadStagedWeightsRecord",
                actions=["s3:GetObject"],
                resources=[models_bucket.arn_for_objects(training.staged_weights.record_key)],
            )
        )

    def _finetune_body(
        self, training: TrainingConfig, serving: ServingConfig, *, names: PipelineNames, serving_image: str
    ) -> str:
        """The fine-tuning pipeline's definition, given the registered package's environment so that its cache keys
        cover serving.properties (finetune_pipeline.finetune_definition)."""
        return finetune_pipeline.finetune_definition(
            training,
            serving,
            region=Stack.of(self).region,
            names=names,
            serving_image=serving_image,
            registered_environment=registration.environment(
                serving, training, handler_folder=offline_sdk.sub("HandlerFolder")
            ),
        )

    def _pipeline(self, construct_id: str, name: str, body: str, values: dict, training: TrainingConfig):
        used = offline_sdk.placeholders_in(body) - set(offline_sdk.PSEUDO_PARAMETERS)
        pipeline = sagemaker.CfnPipeline(
            self,
            construct_id,
            pipeline_name=name,
            role_arn=self.role.role_arn,
            pipeline_definition={
                "PipelineDefinitionBody": Fn.sub(body, {k: v for k, v in values.items() if k in used})
            },
        )
        # RoleArn already orders the pipeline after its role; what must also exist before the pipeline does is the
        # role's policy, so an execution started right after a deploy has its permissions. (Depending on the whole
        # role would repeat the RoleArn's dependency: cfn-lint W3005.)
        pipeline.node.add_dependency(self.role.node.find_child("DefaultPolicy"))
        return pipeline

    def _pipeline_role(
        self, names: PipelineNames, job_roles: list[iam.IRole], key: kms.IKey, data_bucket: s3.IBucket
    ) -> iam.Role:
        """The pipelines' role: SageMaker assumes it for this account only, to run the steps."""
        role = iam.Role(
            self,
            "PipelineRole",
            description=f"Runs the SageMaker pipelines {names.finetune} and {names.staging}",
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
        )
        for statement in self._pipeline_statements(names, job_roles, key, data_bucket):
            role.add_to_policy(statement)
        self._suppress_pipeline_role_findings(role)
        return role

    def _pipeline_statements(
        self, names: PipelineNames, job_roles: list[iam.IRole], key: kms.IKey, data_bucket: s3.IBucket
    ) -> list[iam.PolicyStatement]:
        """What running the steps takes: start the jobs, register into the stage's group, pass the jobs their roles,
        let the jobs use the key, read the evaluation reports."""
        arn = self._sagemaker_arn
        return [
            # SageMaker Pipelines names the jobs it starts pipelines-<execution>-<step>-<suffix>.
            iam.PolicyStatement(
                sid="RunPipelineJobs",
                actions=[
                    "sagemaker:CreateProcessingJob",
                    "sagemaker:DescribeProcessingJob",
                    "sagemaker:StopProcessingJob",
                    "sagemaker:CreateTrainingJob",
                    "sagemaker:DescribeTrainingJob",
                    "sagemaker:StopTrainingJob",
                    "sagemaker:AddTags",
                ],
                resources=[arn("processing-job", "pipelines-*"), arn("training-job", "pipelines-*")],
            ),
            iam.PolicyStatement(
                sid="RegisterModels",
                actions=["sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage", "sagemaker:AddTags"],
                resources=[
                    arn("model-package", f"{names.model_package_group}/*"),
                    arn("model-package-group", names.model_package_group),
                ],
            ),
            iam.PolicyStatement(
                sid="PassJobRoles",
                actions=["iam:PassRole"],
                resources=[role.role_arn for role in job_roles],
                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
            ),
            # Jobs encrypt their volumes and outputs with the stage key through grants made for their caller.
            iam.PolicyStatement(
                sid="EncryptJobVolumes",
                actions=["kms:CreateGrant", "kms:DescribeKey", "kms:Decrypt", "kms:GenerateDataKey"],
                resources=[key.key_arn],
            ),
            # The condition step reads the evaluation report (a property file) itself.
            iam.PolicyStatement(
                sid="ReadEvaluationReports",
                actions=["s3:GetObject"],
                resources=[data_bucket.arn_for_objects(f"{bucket_layout.EVALUATION}*")],
            ),
        ]

    def _sagemaker_arn(self, resource: str, name: str) -> str:
        return Stack.of(self).format_arn(
            service="sagemaker", resource=resource, resource_name=name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )

    def _suppress_pipeline_role_findings(self, role: iam.Role) -> None:
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="SageMaker Pipelines names the jobs and model package versions it creates at run time "
                    "(pipelines-<execution id>-..., <group>/<version>); the statements are limited to those name "
                    "patterns in this account and region, and to this stage's model package group",
                    applies_to=[
                        RegexAppliesTo(
                            regex=r"/^Resource::arn:[^:]+:sagemaker:.*:(processing|training)-job\/pipelines-\*$/"
                        ),
                        RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:sagemaker:.*:model-package\/[a-z0-9-]+\/\*$/"),
                    ],
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Evaluation reports are written per pipeline execution under evaluation/; reading them "
                    "is limited to that prefix of the data bucket",
                    applies_to=[RegexAppliesTo(regex=r"/^Resource::<.*\.Arn>\/evaluation\/\*$/")],
                ),
            ],
            apply_to_children=True,
        )
