"""Every name the platform gives an AWS resource, computed once from the project and stage names.

The stacks build their resources with these, the API-limit rules check these same strings against each API's
limits (core/api_limits/rules.py), and the CLI finds the deployed stacks by them. A name is derived here and only
here, so the three cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

# What each scaling metric's policy name ends with (classic endpoint: per instance; components: per copy).
VARIANT_POLICY_SUFFIXES = {"concurrency": "concurrent-requests", "invocations": "invocations-per-instance"}
COMPONENT_POLICY_SUFFIXES = {"concurrency": "concurrent-requests", "invocations": "invocations-per-copy"}


# The serving stack's outputs of a stage whose weights are promoted from another stage (weights source 'promoted'):
# what each release deployed, read by the pipeline's smoke test and by `llmp status`.
SERVED_PACKAGE_OUTPUT = "ServedModelPackageArn"  # the version of the stage's own group it serves
PROMOTED_FROM_OUTPUT = "PromotedFromPackageArn"  # the approved version it was copied from
SERVED_DIGEST_OUTPUT = "ServedWeightsDigest"  # promotion/weights_record.py files_digest of what it serves


def promotion_pipeline(project: str) -> str:
    """The CodePipeline that takes a commit through the stages."""
    return f"{project}-promotion"


def component_name(endpoint_name: str, name: str) -> str:
    """An inference component's name, which requests give as InferenceComponentName (adapters are components too)."""
    return f"{endpoint_name}-{name}"


def variant_policy_name(endpoint_name: str, scaling_metric: str) -> str:
    """The classic endpoint variant's target-tracking policy."""
    return f"{endpoint_name}-{VARIANT_POLICY_SUFFIXES[scaling_metric]}"


def component_policy_name(component: str, scaling_metric: str) -> str:
    """An inference component's target-tracking policy."""
    return f"{component}-{COMPONENT_POLICY_SUFFIXES[scaling_metric]}"


def scale_from_zero_policy_name(component: str) -> str:
    """The step policy that wakes a component scaled to zero copies."""
    return f"{component}-scale-from-zero"


def smoke_test_role_name(endpoint_name: str) -> str:
    """The role in the stage's account that the smoke test assumes."""
    return f"{endpoint_name}-smoke-test"


def smoke_test_runner_role_name(endpoint_name: str) -> str:
    """The promotion pipeline's CodeBuild role (in the pipeline's account) that runs the smoke test and is the only
    principal the stage's smoke-test role trusts. At most 63 characters: project and stage names are capped at 24
    and 20."""
    return f"{endpoint_name}-smoke-test-runner"


@dataclass(frozen=True)
class StageNames:
    """The names of one stage's resources: `<project>-<stage>` and what is built on it."""

    project: str
    stage: str

    @property
    def prefix(self) -> str:
        """`<project>-<stage>`: the endpoint and the model package group are named exactly this."""
        return f"{self.project}-{self.stage}"

    @property
    def endpoint(self) -> str:
        return self.prefix

    @property
    def model_package_group(self) -> str:
        return self.prefix

    def stack(self, part: str) -> str:
        """A stack's name: `part` is storage, training or serving."""
        return f"{self.prefix}-{part}"

    @property
    def finetune_pipeline(self) -> str:
        return f"{self.prefix}-finetune"

    @property
    def staging_pipeline(self) -> str:
        return f"{self.prefix}-stage-weights"

    @property
    def role_path(self) -> str:
        """The IAM path of the roles the stage's training and serving stacks create: the stage key trusts this path,
        as their names are CloudFormation's to choose and are not known when the storage stack deploys."""
        return f"/{self.project}/{self.stage}/"

    @property
    def promotion_role(self) -> str:
        """The role that copies an approved version from another stage into this one (weights source 'promoted'):
        named, because the source stage's bucket, key and model package group name it before it exists."""
        return f"{self.prefix}-promotion"

    def promotion_role_arn(self, partition: str, account: str) -> str:
        """The promotion role's ARN, under the stage's role path: what a source stage's policies name before the
        role exists (they name it as a condition on aws:PrincipalArn, which needs no existing principal)."""
        return f"arn:{partition}:iam::{account}:role{self.role_path}{self.promotion_role}"

    @property
    def smoke_test_role(self) -> str:
        return smoke_test_role_name(self.endpoint)

    @property
    def smoke_test_runner_role(self) -> str:
        return smoke_test_runner_role_name(self.endpoint)

    def component(self, name: str) -> str:
        return component_name(self.endpoint, name)

    def variant_policy(self, scaling_metric: str) -> str:
        return variant_policy_name(self.endpoint, scaling_metric)

    @property
    def pipelines(self) -> PipelineNames:
        return PipelineNames(
            finetune=self.finetune_pipeline, staging=self.staging_pipeline, model_package_group=self.model_package_group
        )


@dataclass(frozen=True)
class PipelineNames:
    """What the training stack names: its two pipelines and the model package group they register into."""

    finetune: str
    staging: str
    model_package_group: str
