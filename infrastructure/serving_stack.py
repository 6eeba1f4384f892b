"""ServingStack: the stage's LMI inference endpoint, sized and checked when the config loaded."""

from __future__ import annotations

import dataclasses
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

from core import bucket_layout
from core.catalog.models import StagedWeights
from core.config import ServingConfig
from core.config.promotion import PromotionSource
from core.naming import (
    PROMOTED_FROM_OUTPUT,
    SERVED_DIGEST_OUTPUT,
    SERVED_PACKAGE_OUTPUT,
    StageNames,
    component_name,
    smoke_test_role_name,
    smoke_test_runner_role_name,
)
from infrastructure import code_archives
from infrastructure.constructs import inference_components, package_lookup
from infrastructure.constructs.adapter_components import AdapterComponents, adapter_names
from infrastructure.constructs.execution_role import vpc_access_policy
from infrastructure.constructs.lmi_endpoint import LmiEndpoint
from infrastructure.constructs.promoted_weights import PromotedVersion, PromotionProvider

AWS_CUSTOM_RESOURCE_SINGLETON = "AWS679f53fac002430cb0da5b7982bd2287"
# The deploy-time lookup of where the served weights are, whichever the source: a stage has at most one.
WEIGHTS_LOOKUP = "WeightsLookup"
# Where a registered full fine-tune keeps its weights prefix (DescribeModelPackage's output).
PACKAGE_WEIGHTS = "InferenceSpecification.Containers.0.ModelDataSource.S3DataSource.S3Uri"


@dataclasses.dataclass(frozen=True)
class WeightsSources:
    """What finding the served weights needs: the stage's models bucket, the hosting role that reads them, the
    default model package group, the release (a new one looks again) and the key of the lookups' logs."""

    models_bucket: s3.IBucket
    role: iam.IRole
    default_group: str
    release: str
    encryption_key: kms.IKey
    promote: Promote | None = None  # weights source 'promoted': copies a source's version in at deploy time


@dataclasses.dataclass
class Promote:
    """Promotion into this stage: its names, the stages it promotes from, the image its copies are registered for,
    and what each release promoted (the first site's version is the stack's record, SERVED_*_OUTPUT)."""

    names: StageNames
    sources: dict[str, PromotionSource]
    image_uri: str
    promoted: list[PromotedVersion] = dataclasses.field(default_factory=list)

    def __call__(self, where: Construct, construct_id: str, weights: Any, sources: WeightsSources) -> str:
        """The ARN of this stage's copy of `weights`' source version (a deploy-time value)."""
        provider = PromotionProvider.of(
            where, names=self.names, models_bucket=sources.models_bucket, encryption_key=sources.encryption_key
        )
        version = provider.promote(
            where,
            construct_id,
            source=self.sources[weights.from_stage],
            version=weights.version,
            image_uri=self.image_uri,
            release=sources.release,
        )
        self.promoted.append(version)
        return version.package_arn


class ServingStack(Stack):
    """One LMI endpoint, its scaling, alarms and dashboard.

    Args:
        serving: the stage's serving config (already validated: the model fits the instance).
        endpoint_name: the endpoint's stable name.
        image_uri: the LMI container image for the engine and region.
        hosting_role: the role the endpoint runs with.
        models_bucket: holds the staged pretrained weights and the fine-tuned ones.
        data_bucket: receives captured requests.
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
        hosting_role: iam.IRole,
        models_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        model_package_group: str,
        finetune_pipeline_name: str,
        release: str = "",
        smoke_test_account: str | None = None,
        promote: Promote | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        sources = WeightsSources(
            models_bucket=models_bucket,
            role=hosting_role,
            default_group=model_package_group,
            release=release,
            encryption_key=encryption_key,
            promote=promote,
        )
        component_scopes = self._component_scopes(serving)
        components = {name: self._served(where, config, sources) for name, (where, config) in component_scopes.items()}
        weights_uri, self.code = self._served(self, serving, sources) if not serving.components else (None, None)
        network_policy = self._vpc_access(serving, hosting_role)
        self.endpoint = LmiEndpoint(
            self,
            "Endpoint",
            config=serving,
            endpoint_name=endpoint_name,
            image_uri=image_uri,
            weights_uri=weights_uri,
            code=self.code,
            role=hosting_role,
            encryption_key=encryption_key,
            data_bucket=data_bucket,
            components=components or None,
        )
        self._wait_for_pinned_weights(serving, component_scopes)
        if network_policy is not None:
            self._wait_for_network_access(network_policy)
        self.adapters = self._adapter_components(serving, endpoint_name, sources) if adapter_names(serving) else None
        self._outputs(endpoint_name)
        self.served_digest_output = self._promotion_outputs(promote)
        self.smoke_test_role_output = (
            self._smoke_test_role(
                endpoint_name,
                finetune_pipeline_name,
                smoke_test_account,
                components=[component_name(endpoint_name, c.name) for c in serving.components]
                + [component_name(endpoint_name, a) for a in adapter_names(serving)],
                promoted=sources if self.served_digest_output else None,
            )
            if smoke_test_account
            else None
        )

    def _component_scopes(self, serving: ServingConfig) -> dict[str, tuple[Construct, ServingConfig]]:
        """Each inference component has its own weights, so its own lookups and handler, under a scope of its own;
        by component name, with the component's serving config."""
        return {
            name: (Construct(self, f"Component{inference_components.construct_id(name)}"), config)
            for name, config in (serving.component_servings() if serving.components else {}).items()
        }

    def _served(
        self, where: Construct, config: ServingConfig, sources: WeightsSources
    ) -> tuple[str, code_archives.CodeFolder | None]:
        """The weights prefix of one model, and its handler inside it: deploy-time lookups and the handler under
        `where` (the stack, or one inference component's scope)."""
        uri = self._weights_uri(config, sources, scope=where)
        # The handler goes into the served prefix, beside the weights (engine deepspeed; vllm needs none): SageMaker
        # delivers that one prefix, and the weights are never copied per deploy. The weights of source 's3' are in a
        # bucket this stage does not own: its owner grants the writes and their key (README, "Serving weights").
        handler = code_archives.served_handler(
            where,
            "InferenceCode",
            engine=config.engine,
            weights_uri=uri,
            log_key=sources.encryption_key,
            weights_key=None if config.weights.source == "s3" else sources.encryption_key,
        )
        return uri, handler

    def _wait_for_pinned_weights(
        self, serving: ServingConfig, component_scopes: dict[str, tuple[Construct, ServingConfig]]
    ) -> None:
        """A pinned commit's location is a literal: only an explicit dependency makes the model wait for its
        record's check."""
        endpoint = self.endpoint
        models = [(endpoint.model, self, serving)] if endpoint.model is not None else []
        models += [(endpoint.component_models[name], *component_scopes[name]) for name in component_scopes]
        for model, where, config in models:
            staged = config.staged_weights
            if staged is not None and staged.pinned:
                model.node.add_dependency(where.node.find_child(WEIGHTS_LOOKUP))

    def _adapter_components(
        self, serving: ServingConfig, endpoint_name: str, sources: WeightsSources
    ) -> AdapterComponents:
        """The adapters, each an inference component over its base's."""
        adapters = AdapterComponents(
            self,
            "Adapters",
            config=serving,
            endpoint_name=endpoint_name,
            endpoint=self.endpoint.endpoint,
            base_components=self.endpoint.components.components,
            role=sources.role,
            default_group=sources.default_group,
            release=sources.release,
            encryption_key=sources.encryption_key,
            promote=(lambda where, cid, weights: sources.promote(where, cid, weights, sources))
            if sources.promote
            else None,
        )
        if adapters.lookups:
            self._suppress_lookup_findings()
        return adapters

    def _outputs(self, endpoint_name: str) -> None:
        if self.adapters is not None:
            # What requests may name: clients list these when a name is unknown (core/component_lookup.py).
            CfnOutput(self, "AdapterComponentNames", value=",".join(self.adapters.names.values()))
        self.endpoint_name_output = CfnOutput(self, "EndpointName", value=endpoint_name)
        if self.code is not None:
            CfnOutput(self, "InferenceCodeUri", value=self.code.s3_uri)

    def _promotion_outputs(self, promote: Promote | None) -> CfnOutput | None:
        """What this release serves, when it is promoted: the version of the stage's group, the version it was
        copied from, and the copy's digest (the smoke test compares the endpoint's weights with it; llmp status shows
        them). The first promoted site's: the endpoint's weights, else its first component's or adapter's."""
        if promote is None or not promote.promoted:
            return None
        served = promote.promoted[0]
        CfnOutput(self, SERVED_PACKAGE_OUTPUT, value=served.package_arn)
        CfnOutput(self, PROMOTED_FROM_OUTPUT, value=served.source_package_arn)
        return CfnOutput(self, SERVED_DIGEST_OUTPUT, value=served.digest)

    def _weights_uri(self, serving: ServingConfig, sources: WeightsSources, *, scope: Construct) -> str:
        """The S3 prefix of the weights to serve; what only exists once something ran (a staging, a registered model
        package) is read at deploy time, never at synth. The lookups go under `scope`: the stack, or one inference
        component's scope (each component looks up its own weights)."""
        weights = serving.weights
        if weights.source == "pretrained":
            return self._staged_weights_uri(
                serving.staged_weights, sources.models_bucket, sources.release, sources.encryption_key, scope
            )
        if weights.source == "s3":
            self._allow_reading_external_weights(weights.s3_uri, sources.role, scope)
            return weights.s3_uri
        return self._package_weights_uri(serving, sources, scope)

    def _allow_reading_external_weights(self, uri: str, role: iam.IRole, scope: Construct) -> None:
        """The hosting role reads the configured prefix of a bucket this stage does not own (source 's3')."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        policy = iam.Policy(
            scope,
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

    def _package_weights_uri(self, serving: ServingConfig, sources: WeightsSources, scope: Construct) -> str:
        """A registered model package's weights: its container's ModelDataSource is the weights prefix (the training
        pipeline's Register step, training_pipeline/registration.py). Read when the stack deploys, never at synth."""
        weights = serving.weights
        lookup_logs = self._lookup_logs(sources.encryption_key, scope)
        if weights.source == "latest_approved":
            # The newest Approved version of the group. The release is part of the lookup's physical id: a new
            # release (every pipeline execution) looks again; a deploy by hand keeps what it found unless RELEASE
            # is given.
            group = weights.model_package_group or sources.default_group
            latest = package_lookup.newest_approved(
                scope, "LatestApprovedModelPackage", group=group, release=sources.release, log_group=lookup_logs
            )
            package_arn = latest.get_response_field(package_lookup.NEWEST_ARN)
            package_resources = [package_lookup.versions_arn(self, group)]
        elif weights.source == "promoted":
            latest = None
            package_arn = sources.promote(scope, "PromotedWeights", weights, sources)
            package_resources = [package_lookup.versions_arn(self, sources.default_group)]
        else:
            latest = None
            package_arn, package_resources = weights.model_package_arn, [weights.model_package_arn]
        describe = package_lookup.described(
            scope,
            WEIGHTS_LOOKUP,
            package_arn=package_arn,
            readable=package_resources,
            output_path=PACKAGE_WEIGHTS,
            log_group=lookup_logs,
        )
        self._suppress_lookup_findings(*(c for c in (describe, latest) if c is not None))
        return describe.get_response_field(PACKAGE_WEIGHTS)

    def _staged_weights_uri(
        self,
        staged: StagedWeights,
        models_bucket: s3.IBucket,
        release: str,
        encryption_key: kms.IKey,
        scope: Construct,
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
            scope,
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
            log_group=self._lookup_logs(encryption_key, scope),
        )
        self._suppress_lookup_findings()
        if staged.pinned:
            return models_bucket.s3_url_for_object(staged.files_prefix(staged.revision))
        return models_bucket.s3_url_for_object(staged.prefix) + record.get_response_field("Metadata.commit") + "/"

    def _vpc_access(self, serving: ServingConfig, role: iam.IRole) -> iam.Policy | None:
        """What SageMaker documents the execution role of a Model in a VPC needs (sagemaker-roles.html, "CreateModel
        API: Execution Role Permissions"): network interfaces in the configured subnets, behind the configured
        security groups, for SageMaker's instances only."""
        if serving.vpc is None:
            return None
        return vpc_access_policy(self, "VpcAccess", role=role, vpc=serving.vpc)

    def _wait_for_network_access(self, policy: iam.Policy) -> None:
        """SageMaker creates network interfaces in the VPC with the hosting role when it creates a Model there and
        when it starts instances: with inference components VpcConfig sits on the EndpointConfig, which names no
        Model, so the EndpointConfig and the Endpoint must wait for the grant themselves (the role has no other ec2:*
        grant; without the dependency CloudFormation may create them first). Components, adapters included, wait
        through the Endpoint they name."""
        endpoint = self.endpoint
        for resource in (
            endpoint.model,
            *endpoint.component_models.values(),
            endpoint.endpoint_config,
            endpoint.endpoint,
        ):
            if resource is not None:
                resource.node.add_dependency(policy)

    def _lookup_logs(self, encryption_key: kms.IKey, scope: Construct) -> logs.LogGroup:
        return logs.LogGroup(
            scope, "WeightsLookupLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=encryption_key
        )

    def _smoke_test_role(
        self,
        endpoint_name: str,
        pipeline_name: str,
        account: str,
        *,
        components: list[str],
        promoted: WeightsSources | None,
    ) -> CfnOutput:
        """What the promotion pipeline's smoke test may do in this stage: invoke the endpoint (also streamed) and
        describe it, and look up the fine-tuning pipeline. `components`: the inference components (adapters
        included) it invokes by name; the grant names their ARNs beside the endpoint's, so that the call is allowed
        whichever of the two IAM authorizes a component's invocation against. Named, so the pipeline (in another
        account, perhaps) can name it too.

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
                # InvokeEndpointWithResponseStream is its own IAM action; its API reference also names
                # sagemaker:InvokeEndpoint as the permission it needs, which the non-streamed checks use anyway.
                actions=[
                    "sagemaker:InvokeEndpoint",
                    "sagemaker:InvokeEndpointWithResponseStream",
                    "sagemaker:DescribeEndpoint",
                ],
                resources=[
                    self.format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name),
                    *(
                        self.format_arn(service="sagemaker", resource="inference-component", resource_name=name)
                        for name in components
                    ),
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["sagemaker:DescribePipeline"],
                resources=[self.format_arn(service="sagemaker", resource="pipeline", resource_name=pipeline_name)],
            )
        )
        if promoted is not None:
            self._allow_checking_served_weights(role, endpoint_name, promoted)
        return CfnOutput(self, "SmokeTestRoleArn", value=role.role_arn)

    def _allow_checking_served_weights(self, role: iam.Role, endpoint_name: str, sources: WeightsSources) -> None:
        """A promoted stage's smoke test follows the endpoint to the weights it serves and compares their record
        with the release's digest (scripts/smoke_test.py --expect-digest): describe the endpoint's configs, models
        and components, read the record and each file's checksum under promoted/, decrypting through S3 only."""
        arn = self.format_arn
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "sagemaker:DescribeEndpointConfig",
                    "sagemaker:DescribeModel",
                    "sagemaker:DescribeInferenceComponent",
                ],
                resources=[
                    arn(service="sagemaker", resource="endpoint-config", resource_name=f"{endpoint_name}*"),
                    arn(service="sagemaker", resource="model", resource_name="*"),
                    arn(service="sagemaker", resource="inference-component", resource_name=f"{endpoint_name}*"),
                ],
            )
        )
        # ListInferenceComponents has no resource-level permissions.
        role.add_to_policy(iam.PolicyStatement(actions=["sagemaker:ListInferenceComponents"], resources=["*"]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[sources.models_bucket.arn_for_objects(f"{bucket_layout.PROMOTED}*")],
            )
        )
        # Listing finds a file beside the recorded ones (which the engine might load), and tells a missing record
        # (404) from a refused one (403).
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[sources.models_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{bucket_layout.PROMOTED}*"]}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[sources.encryption_key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{self.region}.{self.url_suffix}"}},
            )
        )
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The smoke test of a promoted stage reads the served weights' record and checksums under "
                    "promoted/, and describes the endpoint's configs and models, whose names CloudFormation "
                    "generates; ListInferenceComponents has no resource-level permissions",
                    applies_to=[
                        "Resource::*",
                        RegexAppliesTo(regex=r"/^Resource::<.*\.Arn>\/promoted\/\*$/"),
                        RegexAppliesTo(
                            regex=r"/^Resource::arn:[^:]+:sagemaker:[^:]+:.+:(endpoint-config|model|inference-component)\/.*\*$/"
                        ),
                    ],
                )
            ],
            apply_to_children=True,
        )

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
