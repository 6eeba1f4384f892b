"""PromotedWeights: a version approved in another stage, copied into this stage when the stack deploys.

A custom resource (promotion/handler.py behind the CDK Provider framework) finds the source stage's newest Approved
version (or the pinned one), copies the weights its package names into this stage's models bucket
(`promoted/<source group>/<version>/`), checks every file's size and SHA-256 against the source's record, writes the
record last, and registers the copy in this stage's own model package group, Approved, naming its source. The
endpoint then serves that package like any other (serving_stack.py): nothing it runs stays in the source's account.

Copying takes as long as the weights are large: the Provider calls is_complete every minute, each call copies what
it can in its 15 minutes, for at most two hours. The release is a property, so every release looks again; a version
already copied is found and nothing is copied twice.

One role per stack, named (StageNames.promotion_role) under the stage's role path, so that the source stage's bucket,
key and group can name it before it exists (docs/promotion.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Aws, CustomResource, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from core import bucket_layout
from core.config.promotion import PromotionSource
from core.naming import StageNames

REPO = Path(__file__).resolve().parents[2]
# The Lambda's code is the promotion/ package, imported as a package (promotion.handler), as the tests import it.
ASSET_EXCLUDE = ["*", ".*", "!promotion", "!promotion/*.py"]
# Lambda's longest run; each is_complete call leaves itself two minutes (promotion/handler.py).
HANDLER_TIMEOUT = Duration.minutes(15)
# The Provider's longest wait: BLOOM-176B's 350 GB at a few hundred MB/s is well inside it.
TOTAL_TIMEOUT = Duration.hours(2)


@dataclass(frozen=True)
class PromotedVersion:
    """What a promoted version is known by once it is copied: deploy-time values of the custom resource."""

    package_arn: str  # the version of this stage's group that names the copy
    source_package_arn: str  # the approved version it was copied from
    digest: str  # promotion/weights_record.py files_digest of the copy
    weights_uri: str  # s3://<models bucket>/promoted/<source group>/<version>/


class PromotionProvider(Construct):
    """The promotion role, the handler and the Provider framework; one per stack, shared by its promoted sites."""

    ID = "Promotion"

    @classmethod
    def of(cls, scope: Construct, **kwargs) -> PromotionProvider:
        stack = Stack.of(scope)
        existing = stack.node.try_find_child(cls.ID)
        return existing if isinstance(existing, cls) else cls(stack, cls.ID, **kwargs)

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: StageNames,
        models_bucket: s3.IBucket,
        encryption_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.names, self.models_bucket = names, models_bucket
        self.role = iam.Role(
            self,
            "Role",
            role_name=names.promotion_role,
            path=names.role_path,
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Copies approved versions from other stages into {names.prefix} and registers them",
        )
        self._allow_target(models_bucket, encryption_key)
        handler_logs = logs.LogGroup(
            self, "HandlerLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=encryption_key
        )
        handler_logs.grant_write(self.role)
        code = lambda_.Code.from_asset(str(REPO), exclude=ASSET_EXCLUDE)
        functions = {
            entry: lambda_.Function(
                self,
                construct_id,
                description=description,
                runtime=lambda_.Runtime.PYTHON_3_14,
                handler=f"promotion.handler.{entry}",
                code=code,
                role=self.role,
                timeout=HANDLER_TIMEOUT,
                memory_size=1024,
                log_group=handler_logs,
            )
            for entry, construct_id, description in (
                ("on_event", "OnEvent", "Finds the approved version to promote into this stage"),
                ("is_complete", "IsComplete", "Copies, verifies and registers a promoted version"),
            )
        }
        framework_logs = logs.LogGroup(
            self, "FrameworkLogs", retention=logs.RetentionDays.ONE_YEAR, encryption_key=encryption_key
        )
        framework_roles = {
            name: iam.Role(
                self,
                name,
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"CDK custom resource framework ({what}) in front of the promotion handler",
            )
            for name, what in (("FrameworkRole", "events"), ("FrameworkWaiterRole", "completion and timeout"))
        }
        for role in framework_roles.values():
            framework_logs.grant_write(role)
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=functions["on_event"],
            is_complete_handler=functions["is_complete"],
            query_interval=Duration.minutes(1),
            total_timeout=TOTAL_TIMEOUT,
            framework_on_event_role=framework_roles["FrameworkRole"],
            framework_complete_and_timeout_role=framework_roles["FrameworkWaiterRole"],
            log_group=framework_logs,
            provider_function_env_encryption=encryption_key,
            # Each completion check logs its progress in the handler's log group; the waiter only calls it again.
            disable_waiter_state_machine_logging=True,
        )
        self._acknowledge(stack)

    def _allow_target(self, bucket: s3.IBucket, key: kms.IKey) -> None:
        """Write and read promoted/ of this stage's models bucket (its key encrypts what it writes), and register
        versions in this stage's group."""
        stack = Stack.of(self)
        group = self.names.model_package_group
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="WritePromoted",
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[bucket.arn_for_objects(f"{bucket_layout.PROMOTED}*")],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ListPromoted",
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{bucket_layout.PROMOTED}*"]}},
            )
        )
        key.grant_encrypt_decrypt(self.role)
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="RegisterPromoted",
                actions=["sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage"],
                resources=[
                    stack.format_arn(service="sagemaker", resource="model-package-group", resource_name=group),
                    stack.format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*"),
                ],
            )
        )
        # ListModelPackages has no resource-level permissions (the Service Authorization Reference lists none).
        self.role.add_to_policy(
            iam.PolicyStatement(sid="ListVersions", actions=["sagemaker:ListModelPackages"], resources=["*"])
        )

    def allow_source(self, source: PromotionSource) -> None:
        """Read the approved versions of `source`: describe them, read their weights, decrypt them through S3. The
        source's bucket is only known from a package (CloudFormation names it), so objects are matched by the
        source's account (s3:ResourceAccount) and prefixes; its key likewise, by account and through S3."""
        stack = Stack.of(self)
        account = source.account or Aws.ACCOUNT_ID
        name = _title(source.stage)

        def source_arn(service: str, resource: str, resource_name: str) -> str:
            return stack.format_arn(
                service=service, region=source.region, account=account, resource=resource, resource_name=resource_name
            )

        in_source_account = {"s3:ResourceAccount": account}
        for statement in (
            iam.PolicyStatement(
                sid=f"Describe{name}Versions",
                actions=["sagemaker:DescribeModelPackage"],
                resources=[source_arn("sagemaker", "model-package", f"{source.group}/*")],
            ),
            iam.PolicyStatement(
                sid=f"Read{name}Weights",
                actions=["s3:GetObject"],
                resources=[f"arn:{stack.partition}:s3:::*/{prefix}*" for prefix in bucket_layout.PACKAGED_WEIGHTS],
                conditions={"StringEquals": in_source_account},
            ),
            iam.PolicyStatement(
                sid=f"List{name}Weights",
                actions=["s3:ListBucket"],
                resources=[f"arn:{stack.partition}:s3:::*"],
                conditions={
                    "StringEquals": in_source_account,
                    "StringLike": {"s3:prefix": [f"{prefix}*" for prefix in bucket_layout.PACKAGED_WEIGHTS]},
                },
            ),
            iam.PolicyStatement(
                sid=f"Decrypt{name}Weights",
                actions=["kms:Decrypt"],
                resources=[source_arn("kms", "key", "*")],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{source.region}.{stack.url_suffix}"}},
            ),
        ):
            self.role.add_to_policy(statement)

    def _acknowledge(self, stack: Stack) -> None:
        NagSuppressions.add_resource_suppressions(
            self,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Promotion reads a source stage's weights, whose bucket and key CloudFormation named in "
                    "that stage: objects under registered/ and promoted/ of buckets of the source's account only "
                    "(s3:ResourceAccount), keys of that account through S3 only (kms:ViaService); it writes only "
                    "promoted/ of this stage's bucket and registers only in this stage's group; "
                    "ListModelPackages has no resource-level permissions",
                    applies_to=[
                        "Resource::*",
                        RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:s3:::\*(\/(registered|promoted)\/\*)?$/"),
                        RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:kms:[^:]+:.+:key\/\*$/"),
                        RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:sagemaker:[^:]+:.+:model-package\/.+\/\*$/"),
                        RegexAppliesTo(regex=r"/^Resource::<.*\.Arn>\/promoted\/\*$/"),
                        "Action::kms:GenerateDataKey*",
                        "Action::kms:ReEncrypt*",
                    ],
                ),
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The CDK Provider framework invokes any published version of its own handler functions "
                    "(`<arn>:*`) and runs its own waiter state machine; no other function",
                    applies_to=[RegexAppliesTo(regex=r"/^Resource::<.*\.Arn>:\*$/")],
                ),
                NagPackSuppression(
                    id="AwsSolutions-SF1",
                    reason="The CDK Provider framework's waiter state machine only calls the completion check again "
                    "once a minute; each call logs the copy's progress, file by file, to the handler's encrypted log "
                    "group, so the waiter's own events would add nothing",
                ),
                NagPackSuppression(
                    id="AwsSolutions-SF2",
                    reason="The CDK Provider framework's waiter state machine offers no tracing setting; it only "
                    "calls the completion check once a minute, which logs what it does",
                ),
            ],
            apply_to_children=True,
        )

    def promote(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: PromotionSource,
        version: int | None,
        image_uri: str,
        release: str,
    ) -> PromotedVersion:
        """Copy `source`'s newest Approved version (or `version`) into this stage when the stack deploys."""
        stack = Stack.of(self)
        self.allow_source(source)
        group_arn = stack.format_arn(
            service="sagemaker",
            region=source.region,
            account=source.account or Aws.ACCOUNT_ID,
            resource="model-package-group",
            resource_name=source.group,
        )
        resource = CustomResource(
            scope,
            construct_id,
            service_token=self.provider.service_token,
            resource_type="Custom::PromotedWeights",
            properties={
                "SourceGroupArn": group_arn,
                "SourceStage": source.stage,
                "SourceRegion": source.region,
                "Version": "" if version is None else str(version),
                "TargetGroup": self.names.model_package_group,
                "TargetBucket": self.models_bucket.bucket_name,
                "TargetRegion": stack.region,
                "DestinationRoot": bucket_layout.PROMOTED,
                "ImageUri": image_uri,
                # A pinned version is looked up once; the newest is looked up again on every release.
                "Release": release if version is None else "",
            },
        )
        return PromotedVersion(
            package_arn=resource.get_att_string("PackageArn"),
            source_package_arn=resource.get_att_string("SourcePackageArn"),
            digest=resource.get_att_string("Digest"),
            weights_uri=resource.get_att_string("WeightsUri"),
        )


def _title(stage: str) -> str:
    return "".join(part.capitalize() for part in stage.replace("_", "-").split("-"))
