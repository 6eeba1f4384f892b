"""CodePackage: a source folder (plus files rendered from config) packaged at deploy time into an S3 archive; and
CodeFolder: the same, published as plain files inside another S3 prefix.

SageMaker wants code as a gzipped tarball: the training toolkit's `sagemaker_submit_directory` (files at the top) and
a registered model's `model.tar.gz` (one top-level directory). A custom resource builds it during `cdk deploy` from the
folder, shipped as a CDK asset, and writes it to the stage's artifacts bucket under a key that contains the
archive's SHA-256: unchanged inputs keep the key and replace nothing; any change gives a new key and a clean update.
An endpoint's handler goes beside the weights instead (CodeFolder: `<weights prefix>inference/<sha256>/`), since
SageMaker delivers one uncompressed prefix to /opt/ml/model (S3ModelDataSource) and the weights are never copied.
The handler is in `runtime/`; one Lambda and Provider per stack serve every package in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import jsii
from aws_cdk import Aspects, CustomResource, Duration, Fn, IAspect, Size, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
ASSET_EXCLUDES = ["__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".DS_Store"]
# Room in /tmp for the source zip and the archive side by side; memory use does not depend on their size.
EPHEMERAL_STORAGE = Size.gibibytes(4)
# The packaging function's role lives under this folder of whatever IAM path the stack's roles get
# (<role path>code-packaging/): the models bucket's policy lets only roles there write a handler folder
# (infrastructure/storage_stack.py), and the storage stack cannot name a role another stack creates.
ROLE_SUBPATH = "code-packaging/"


class CodePackage(Construct):
    """A code archive in S3, rebuilt whenever its source folder or rendered files change.

    Args:
        source: folder to package (excluding caches: __pycache__, *.pyc).
        bucket: where the archive goes (the stage's artifacts bucket).
        encryption_key: the bucket's KMS key (the handler encrypts the archive with it; it also encrypts the
            handler's log groups).
        prefix: key prefix of this package, ending in '/'; archives land at `<prefix><sha256>/<archive_name>`.
        archive_name: file name, e.g. `sourcedir.tar.gz` or `model.tar.gz`.
        top_level_dir: put every file under this directory in the archive (LMI layout); '' = files at the top.
        rendered_files: file name -> text, added to the archive, replacing a source file of the same name.
        required_files: files that must be in the archive (from the folder or rendered); deploys fail otherwise.

    Attributes:
        s3_uri: `s3://bucket/key` of the archive (a deploy-time value).
        bucket_name, object_key, sha256, size_bytes: the same, taken apart.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: Path,
        bucket: s3.IBucket,
        encryption_key: kms.IKey,
        prefix: str,
        archive_name: str,
        top_level_dir: str = "",
        rendered_files: Mapping[str, str] | None = None,
        required_files: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        if not prefix.endswith("/"):
            raise ValueError(f"CodePackage prefix {prefix!r} must end with '/'")
        if not source.is_dir():
            raise ValueError(f"CodePackage source {source} is not a directory")
        self.source = s3_assets.Asset(self, "Source", path=str(source), exclude=ASSET_EXCLUDES)
        provider = _PackagingProvider.of(self, encryption_key)
        provider.allow(self.source, bucket, encryption_key, prefix)
        resource = CustomResource(
            self,
            "Archive",
            service_token=provider.service_token,
            resource_type="Custom::CodePackage",
            properties={
                "SourceBucket": self.source.s3_bucket_name,
                "SourceKey": self.source.s3_object_key,
                "TargetBucket": bucket.bucket_name,
                "TargetPrefix": prefix,
                "ArchiveName": archive_name,
                "TopLevelDirectory": top_level_dir,
                "RenderedFiles": dict(sorted((rendered_files or {}).items())),
                "RequiredFiles": sorted(required_files),
            },
        )
        self.s3_uri = resource.get_att_string("Uri")
        self.bucket_name = resource.get_att_string("Bucket")
        self.object_key = resource.get_att_string("Key")
        self.sha256 = resource.get_att_string("Sha256")
        self.size_bytes = resource.get_att_string("SizeBytes")


class CodeFolder(Construct):
    """A source folder's files, uncompressed, at `<target_uri><subfolder><sha256>/`, written once and never changed.

    Args:
        source: folder to publish (excluding caches: __pycache__, *.pyc).
        target_uri: `s3://bucket/prefix/` to publish into (may be a deploy-time value).
        subfolder: the folder under `target_uri` that holds every published version, ending in '/'.
        encryption_key: encrypts the packaging function's log groups.
        target_key: the KMS key the target bucket encrypts with, which the function must use to write there (None:
            the bucket's own arrangement, e.g. an external bucket whose owner grants it).
        required_files: files the folder must hold; deploys fail otherwise.
        exclude: source files left out (asset exclude patterns).

    Attributes:
        folder: `<subfolder><sha256>/`, relative to `target_uri` (a deploy-time value).
        s3_uri, sha256, size_bytes: where the files are, their content hash, their total size.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: Path,
        target_uri: str,
        subfolder: str,
        encryption_key: kms.IKey,
        target_key: kms.IKey | None,
        required_files: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        if not subfolder.endswith("/") or subfolder.startswith("/"):
            raise ValueError(f"CodeFolder subfolder {subfolder!r} must be relative and end with '/'")
        if not source.is_dir():
            raise ValueError(f"CodeFolder source {source} is not a directory")
        if not Token.is_unresolved(target_uri) and not (target_uri.startswith("s3://") and target_uri.endswith("/")):
            raise ValueError(f"CodeFolder target_uri {target_uri!r} must be s3://bucket/prefix/")
        self.source = s3_assets.Asset(self, "Source", path=str(source), exclude=[*ASSET_EXCLUDES, *exclude])
        provider = _PackagingProvider.of(self, encryption_key)
        provider.allow_objects(self.source, object_arn(self, target_uri, f"{subfolder}*"), target_key)
        resource = CustomResource(
            self,
            "Files",
            service_token=provider.service_token,
            resource_type="Custom::CodePackage",
            properties={
                "SourceBucket": self.source.s3_bucket_name,
                "SourceKey": self.source.s3_object_key,
                "TargetUri": target_uri,
                "Subfolder": subfolder,
                "RequiredFiles": sorted(required_files),
            },
        )
        self.s3_uri = resource.get_att_string("Uri")
        self.sha256 = resource.get_att_string("Sha256")
        self.size_bytes = resource.get_att_string("SizeBytes")
        self.folder = f"{subfolder}{self.sha256}/"


def object_arn(scope: Construct, s3_uri: str, suffix: str) -> str:
    """`arn:<partition>:s3:::<bucket>/<prefix><suffix>` of `s3://<bucket>/<prefix>`, also when the URI is a
    deploy-time value (CloudFormation splits it then)."""
    partition = Stack.of(scope).partition
    if Token.is_unresolved(s3_uri):
        return f"arn:{partition}:s3:::{Fn.select(1, Fn.split('s3://', s3_uri))}{suffix}"
    return f"arn:{partition}:s3:::{s3_uri.removeprefix('s3://')}{suffix}"


class _PackagingProvider(Construct):
    """The handler Lambda and the Provider framework in front of it; one per stack, shared by its packages."""

    ID = "CodePackaging"

    @classmethod
    def of(cls, scope: Construct, log_key: kms.IKey) -> _PackagingProvider:
        stack = Stack.of(scope)
        existing = stack.node.try_find_child(cls.ID)
        return existing if isinstance(existing, cls) else cls(stack, cls.ID, log_key=log_key)

    def __init__(self, scope: Construct, construct_id: str, *, log_key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self.handler_role = iam.Role(
            self,
            "HandlerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Builds code archives for SageMaker; reads its source assets, writes only its prefixes",
        )
        Aspects.of(self.handler_role).add(_UnderSubpath())
        handler_logs = logs.LogGroup(self, "HandlerLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=log_key)
        handler_logs.grant_write(self.handler_role)
        self.handler = lambda_.Function(
            self,
            "Handler",
            description="Packages code folders into content-addressed tar.gz archives in S3",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="code_package_handler.on_event",
            code=lambda_.Code.from_asset(str(RUNTIME_DIR), exclude=ASSET_EXCLUDES),
            role=self.handler_role,
            timeout=Duration.minutes(10),
            memory_size=1024,
            ephemeral_storage_size=EPHEMERAL_STORAGE,
            log_group=handler_logs,
        )
        framework_role = iam.Role(
            self,
            "FrameworkRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="CDK custom resource framework in front of the code packaging handler",
        )
        framework_logs = logs.LogGroup(
            self, "FrameworkLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=log_key
        )
        framework_logs.grant_write(framework_role)
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.handler,
            framework_on_event_role=framework_role,
            log_group=framework_logs,
            provider_function_env_encryption=log_key,
        )
        self.service_token = self.provider.service_token
        NagSuppressions.add_resource_suppressions(
            framework_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The CDK Provider framework invokes any published version of its own handler "
                    "function (`<arn>:*`); no other function",
                    applies_to=[RegexAppliesTo(regex=r"/^Resource::<CodePackagingHandler[0-9A-F]{8}\.Arn>:\*$/")],
                ),
            ],
            apply_to_children=True,
        )

    def allow_objects(self, asset: s3_assets.Asset, objects: str, key: kms.IKey | None) -> None:
        """Let the handler read `asset` and write the plain files `objects` (an S3 object ARN pattern), never
        replacing one: it reads a file's metadata before writing, and puts only what is missing."""
        self.handler_role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[objects])
        )
        self._read_asset(asset, key)
        NagSuppressions.add_resource_suppressions(
            self.handler_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="A handler folder is content-addressed (<weights prefix>inference/<sha256>/...): its keys "
                    "are only known after packaging; the statement is limited to the inference/ folder of the "
                    "served weights",
                    applies_to=[RegexAppliesTo(regex=r"/^Resource::arn:.*inference\/\*$/")],
                ),
            ],
            apply_to_children=True,
        )

    def allow(self, asset: s3_assets.Asset, bucket: s3.IBucket, key: kms.IKey, prefix: str) -> None:
        """Let the handler read `asset` and write archives under `prefix` of `bucket` (and nothing else there)."""
        self.handler_role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "s3:AbortMultipartUpload",
                    "s3:DeleteObjectTagging",
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:PutObjectTagging",
                ],
                resources=[bucket.arn_for_objects(f"{prefix}*")],
            )
        )
        self._read_asset(asset, key)
        NagSuppressions.add_resource_suppressions(
            self.handler_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Archives are content-addressed: their keys (<prefix><sha256>/<name>) are only known "
                    "after packaging; the statement is limited to this package's prefix",
                    applies_to=[RegexAppliesTo(regex=f"/^Resource::<.*\\.Arn>/{prefix}\\*$/")],
                ),
            ],
            apply_to_children=True,
        )

    def _read_asset(self, asset: s3_assets.Asset, key: kms.IKey | None) -> None:
        asset.grant_read(self.handler_role)
        if key is not None:
            key.grant_encrypt_decrypt(self.handler_role)
        NagSuppressions.add_resource_suppressions(
            self.handler_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="CDK's asset grant: read-only access (Get*/List*) to the bootstrap asset bucket that holds "
                    "the source folders cdk deploy publishes",
                    applies_to=[
                        "Action::s3:GetBucket*",
                        "Action::s3:GetObject*",
                        "Action::s3:List*",
                        RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:s3:::cdk-[a-z0-9]+-assets-.*\/\*$/"),
                    ],
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="KMS grant for S3 server-side encryption: GenerateDataKey*/ReEncrypt* on the stage key only",
                    applies_to=["Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"],
                ),
            ],
            apply_to_children=True,
        )


@jsii.implements(IAspect)
class _UnderSubpath:
    """Put a role under ROLE_SUBPATH of the path it has when the app synthesizes: the stage places its stacks' roles
    (stage.py) after they are built, so the folder is added last."""

    def visit(self, node: object) -> None:
        if isinstance(node, iam.CfnRole):
            path = node.path or "/"
            if not path.endswith(ROLE_SUBPATH):
                node.path = f"{path}{ROLE_SUBPATH}"
