"""Adapter inference components: LoRA adapters served over a base model's inference component.

Each adapter is an AWS::SageMaker::InferenceComponent with no Model and no compute of its own: its Specification
names the base component (BaseInferenceComponentName) and the adapter's archive (Container.ArtifactUrl, a .tar.gz);
SageMaker loads it into the base component's copies, whose vLLM engine runs with LoRA slots
(core/config/lora_serving.py). A request names the adapter component in InvokeEndpoint's
InferenceComponentName, like any component.

Promotion: an adapter from the registry (latest_approved) is found by a deploy-time lookup whose physical id changes
with the release, like the served weights' (serving_stack.py). A newly approved version changes only this resource's
ArtifactUrl: CloudFormation updates the adapter component alone, and the base component, its Model and the endpoint
config are the same resources with the same properties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_cdk import Fn, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from core.config import ServingConfig
from core.config.lora_serving import ADAPTER_ARCHIVE, AdapterConfig
from core.naming import component_name
from infrastructure.constructs import package_lookup
from infrastructure.constructs.inference_components import construct_id

# Where a LoRA package (training_pipeline/finetune_pipeline.py, Register) keeps the adapter folder, its archive in it.
ADAPTER_LOCATION = "InferenceSpecification.Containers.0.Environment.ADAPTER_S3_URI"


class AdapterComponents(Construct):
    """The adapter components of an endpoint, each attached to its base component.

    Args:
        config: the stage's serving config (with components).
        endpoint_name: the endpoint's name.
        endpoint: the endpoint.
        base_components: each base component's resource, by component name.
        role: the role the endpoint's containers run with; it reads the adapters' archives.
        default_group: the stage's model package group (source latest_approved without a group).
        release: changes with every pipeline execution, so the registry lookups run again ('' by hand).
        encryption_key: encrypts the lookups' log group.
        promote: for adapters of source 'promoted': (scope, construct id, weights) -> the ARN of this stage's copy
            of the source's version (serving_stack.Promote).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id_: str,
        *,
        config: ServingConfig,
        endpoint_name: str,
        endpoint: sagemaker.CfnEndpoint,
        base_components: dict[str, sagemaker.CfnInferenceComponent],
        role: iam.IRole,
        default_group: str,
        release: str,
        encryption_key: kms.IKey,
        promote: Callable[[Construct, str, Any], str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id_)
        self._role, self._group, self._release, self._key = role, default_group, release, encryption_key
        self._promote = promote
        self._log_group: logs.LogGroup | None = None
        self.names: dict[str, str] = {}
        self.components: dict[str, sagemaker.CfnInferenceComponent] = {}
        self.lookups: list[cr.AwsCustomResource] = []
        self.policies: list[iam.Policy] = []
        for component in config.components:
            for adapter in component.adapters:
                where, base = Construct(self, construct_id(adapter.name)), base_components[component.name]
                name = component_name(endpoint_name, adapter.name)
                # What CreateInferenceComponent documents for an adapter: the base component and the archive only;
                # ComputeResourceRequirements omitted, it runs in the base component's copies.
                resource = sagemaker.CfnInferenceComponent(
                    where,
                    "Component",
                    inference_component_name=name,
                    endpoint_name=endpoint.attr_endpoint_name,
                    specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                        base_inference_component_name=base.inference_component_name,
                        container=sagemaker.CfnInferenceComponent.InferenceComponentContainerSpecificationProperty(
                            artifact_url=self._archive_url(where, adapter)
                        ),
                    ),
                )
                # The base is named, not referenced (the resource has no name attribute): wait for it explicitly.
                resource.node.add_dependency(base)
                self.names[adapter.name] = name
                self.components[adapter.name] = resource
                if adapter.weights.source == "s3":
                    # SageMaker reads the archive with the endpoint's role when it creates the component.
                    resource.node.add_dependency(self.policies[-1])

    def _logs(self) -> logs.LogGroup:
        """One log group for every adapter lookup's function."""
        if self._log_group is None:
            self._log_group = logs.LogGroup(
                self, "LookupLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=self._key
            )
        return self._log_group

    def _archive_url(self, where: Construct, adapter: AdapterConfig) -> str:
        """s3://.../adapter.tar.gz of the adapter: the configured archive, or the one in a registered package's
        adapter folder, read when the stack deploys."""
        weights, stack = adapter.weights, Stack.of(self)
        if weights.source == "s3":
            bucket, _, key = weights.s3_uri.removeprefix("s3://").partition("/")
            policy = iam.Policy(
                where,
                "ReadAdapter",
                statements=[
                    iam.PolicyStatement(
                        actions=["s3:GetObject"], resources=[f"arn:{stack.partition}:s3:::{bucket}/{key}"]
                    )
                ],
                roles=[self._role],
            )
            self.policies.append(policy)
            return weights.s3_uri
        if weights.source == "latest_approved":
            group = weights.model_package_group or self._group
            latest = package_lookup.newest_approved(
                where, "LatestApprovedAdapter", group=group, release=self._release, log_group=self._logs()
            )
            self.lookups.append(latest)
            package = latest.get_response_field(package_lookup.NEWEST_ARN)
            resources = [package_lookup.versions_arn(where, group)]
        elif weights.source == "promoted":
            package = self._promote(where, "PromotedAdapter", weights)
            resources = [package_lookup.versions_arn(where, self._group)]
        else:
            package, resources = weights.model_package_arn, [weights.model_package_arn]
        describe = package_lookup.described(
            where,
            "AdapterLookup",
            package_arn=package,
            readable=resources,
            output_path=ADAPTER_LOCATION,
            log_group=self._logs(),
        )
        self.lookups.append(describe)
        for lookup in (describe, *([latest] if weights.source == "latest_approved" else [])):
            NagSuppressions.add_resource_suppressions(
                lookup,
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason="ListModelPackages has no resource-level permissions; DescribeModelPackage is "
                        "limited to the versions of the adapter's model package group",
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
        # The package's ADAPTER_S3_URI is the training job's uncompressed output folder (S3ModelArtifacts, ending
        # in '/'); the LoRA job writes the archive into it.
        return Fn.join("", [describe.get_response_field(ADAPTER_LOCATION), ADAPTER_ARCHIVE])


def adapter_names(config: ServingConfig) -> list[str]:
    """Every adapter's short name, in config order (what requests give, prefixed with the endpoint's name)."""
    return [a.name for c in config.components for a in c.adapters]
