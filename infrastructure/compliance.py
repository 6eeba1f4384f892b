"""Security checks beyond AwsSolutions: cdk-nag's NIST 800-53 R5 and HIPAA Security packs and checkov, and what is
acknowledged.

The AwsSolutions acknowledgements sit next to the resources they concern. The compliance packs and checkov repeat a
handful of rules over resource types the platform uses on purpose; their acknowledgements are this one table,
applied by check() to exactly the resources each entry matches, with the reason (checkov reads its skips from the
same resources' template metadata). docs/acknowledgements.md lists every cdk-nag acknowledgement per resource as
synthesized (`make acknowledgements`; a test keeps it current).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import Aspects, CfnResource, Stage, Token
from aws_cdk import aws_sagemaker as sagemaker
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NagPackSuppression, NagSuppressions, NIST80053R5Checks
from constructs import Construct, IConstruct

from core.catalog.instances import INSTANCE_TYPES
from infrastructure import construct_reads

PACKS = ("NIST.800.53.R5", "HIPAA.Security")


def check(scope: Construct) -> None:
    """Run every pack over `scope` (a Stage or a Stack, complete: call this after building it), after the
    acknowledgements below are applied.

    The acknowledgements are applied here, from Python, rather than by an aspect: an aspect written in Python costs a
    callback from node for every construct at synth (a second or more per app), and the scope is complete now.
    """
    for resource in _own_resources(scope):
        _acknowledge(resource)
    for pack in (AwsSolutionsChecks(verbose=True), NIST80053R5Checks(verbose=True), HIPAASecurityChecks(verbose=True)):
        Aspects.of(scope).add(pack)


@dataclass(frozen=True)
class Acknowledgement:
    rules: tuple[str, ...]  # cdk-nag rule names without the pack prefix
    checkov: tuple[str, ...]  # the same findings in checkov's words
    resource_type: str  # the CloudFormation type it concerns
    reason: str
    only_where: Callable[[CfnResource], bool] | None = None  # narrower than every resource of that type


def _bucket_named(*ids: str) -> Callable[[CfnResource], bool]:
    return lambda resource: resource.node.scope.node.id in ids


def _in_cdk_pipelines(resource: CfnResource) -> bool:
    """A resource CDK Pipelines generates (inside the PipelineStack's CodePipeline construct)."""
    return resource.node.path.startswith("Pipeline/Pipeline/")


def _pipeline_artifacts(resource: CfnResource) -> bool:
    """The promotion pipeline's artifact bucket (PipelineStack's ArtifactsBucket)."""
    return resource.node.path == "Pipeline/ArtifactsBucket/Resource"


def _nvme_endpoint_config(node: CfnResource) -> bool:
    if not isinstance(node, sagemaker.CfnEndpointConfig):
        return False
    variants = node.production_variants
    types = [getattr(v, "instance_type", None) for v in (variants if isinstance(variants, list) else [])]
    known = [t for t in types if isinstance(t, str) and not Token.is_unresolved(t)]
    return bool(known) and all(t in INSTANCE_TYPES and not INSTANCE_TYPES[t].volume_size_supported for t in known)


# A Hugging Face user access token cannot be rotated by a Secrets Manager rotation function: the Hub has no API that
# issues or revokes one (tokens are created and revoked in the account's settings on huggingface.co).
HUGGINGFACE_TOKEN_ROTATION = (
    "The stage's Hugging Face read token: the Hub offers no API to issue or revoke user access tokens, so no "
    "rotation function could make a new one; people rotate it on huggingface.co and put the new value, and only "
    "the weights-staging role can read it"
)

ACKNOWLEDGEMENTS = [
    Acknowledgement(
        ("SecretsManagerRotationEnabled",),
        ("CKV2_AWS_57",),
        "AWS::SecretsManager::Secret",
        HUGGINGFACE_TOKEN_ROTATION,
    ),
    Acknowledgement(
        ("IAMNoInlinePolicy",),
        (),
        "AWS::IAM::Policy",
        "Each AWS::IAM::Policy here is attached to exactly one role, created and deleted with it, and lists only that "
        "role's permissions; a customer-managed policy would add a separately versioned object and narrow nothing",
    ),
    Acknowledgement(
        ("LambdaDLQ", "LambdaConcurrency", "LambdaInsideVPC"),
        ("CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117"),
        "AWS::Lambda::Function",
        "Custom-resource handlers only: CloudFormation invokes them synchronously during deploys (failures go back "
        "to the stack, so a dead-letter queue would hold nothing), at deploy cadence (no concurrency to cap), and "
        "they reach only S3 and SageMaker APIs, so a VPC would add endpoints to run without reducing exposure",
    ),
    Acknowledgement(
        ("S3BucketReplicationEnabled",),
        (),
        "AWS::S3::Bucket",
        "Cross-region replication is a disaster-recovery choice with its own region and cost; the data and model "
        "buckets are versioned, and weights can be re-created by the pipelines",
    ),
    Acknowledgement(
        ("S3BucketLoggingEnabled", "S3DefaultEncryptionKMS"),
        ("CKV_AWS_18",),
        "AWS::S3::Bucket",
        "The server-access-log bucket itself: logging it into itself would loop, and S3 delivers access logs only "
        "to buckets encrypted with SSE-S3",
        only_where=_bucket_named("AccessLogs"),
    ),
    Acknowledgement(
        ("S3BucketLoggingEnabled",),
        ("CKV_AWS_18",),
        "AWS::S3::Bucket",
        "The promotion pipeline's artifact bucket: it holds the build artifacts of this pipeline's executions only, "
        "encrypted with the pipeline's key; every deployment it makes is recorded by CloudFormation and CloudTrail",
        only_where=_pipeline_artifacts,
    ),
    Acknowledgement(
        ("SageMakerEndpointConfigurationKMSKeyConfigured",),
        (),
        "AWS::SageMaker::EndpointConfig",
        "The endpoint's instance type has instance-local NVMe storage (p4d, g5, ...), which SageMaker encrypts in "
        "hardware and for which it refuses a KmsKeyId; on instance types with EBS volumes the stage key is set",
        only_where=_nvme_endpoint_config,
    ),
    Acknowledgement(
        ("CodeBuildProjectSourceRepoUrl",),
        (),
        "AWS::CodeBuild::Project",
        "CDK Pipelines' CodeBuild projects take their source from CodePipeline artifacts, not from a GitHub or "
        "Bitbucket URL, so there is no repository credential to protect with OAuth",
    ),
    Acknowledgement(
        (),
        ("CKV_AWS_111",),
        "AWS::IAM::Policy",
        "CDK Pipelines' generated roles start and stop the pipeline's own CodeBuild builds (CDK writes those "
        "statements on all projects); the roles can be assumed only by CodePipeline and CodeBuild",
        only_where=_in_cdk_pipelines,
    ),
]


def _own_resources(scope: IConstruct) -> list[CfnResource]:
    """The CloudFormation resources of `scope` but those of nested stages: what an aspect added to `scope` visits.
    Two jsii calls per stage, not one per construct."""
    everything = scope.node.find_all()
    own = construct_reads.ref(scope)
    nested = {
        construct_reads.ref(node)
        for stage in everything
        if isinstance(stage, Stage) and construct_reads.ref(stage) != own
        for node in stage.node.find_all()
    }
    return [node for node in everything if isinstance(node, CfnResource) and construct_reads.ref(node) not in nested]


def _acknowledge(resource: CfnResource) -> None:
    """Applies the ACKNOWLEDGEMENTS that match `resource`, for cdk-nag and for checkov."""
    resource_type = construct_reads.cfn_type(resource)
    nag, checkov = [], []
    for acknowledgement in ACKNOWLEDGEMENTS:
        if acknowledgement.resource_type != resource_type:
            continue
        if acknowledgement.only_where and not acknowledgement.only_where(resource):
            continue
        nag += [
            NagPackSuppression(id=f"{pack}-{rule}", reason=acknowledgement.reason)
            for pack in PACKS
            for rule in acknowledgement.rules
        ]
        checkov += [{"id": check, "comment": acknowledgement.reason} for check in acknowledgement.checkov]
    if nag:
        NagSuppressions.add_resource_suppressions(resource, nag)
    if checkov:
        # checkov reads skips from the resource's own template metadata: scoped to exactly this resource.
        resource.add_metadata("checkov", {"skip": checkov})
