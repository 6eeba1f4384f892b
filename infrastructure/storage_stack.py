"""StorageStack: the stage's KMS key and buckets, and the SageMaker execution roles scoped to them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import ArnFormat, CfnOutput, DefaultStackSynthesizer, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from core import bucket_layout
from core.config import StageConfig
from core.naming import StageNames, component_name
from infrastructure import compliance
from infrastructure.constructs import key_policy
from infrastructure.constructs.code_package import ROLE_SUBPATH
from infrastructure.constructs.execution_role import SageMakerExecutionRole
from infrastructure.constructs.secure_bucket import secure_bucket
from infrastructure.pass_role_guard import pass_role_guard, stage_role_pattern

# Server access logs are kept this long: long enough for a security investigation, not forever.
ACCESS_LOG_RETENTION = Duration.days(365)
# Superseded code archives stay this long: longer than SageMaker's maximum training job run time (28 days).
SUPERSEDED_CODE_GRACE = Duration.days(35)
# Where DefaultStackSynthesizer reads a non-default bootstrap qualifier (`cdk bootstrap --qualifier`).
BOOTSTRAP_QUALIFIER_CONTEXT = "@aws-cdk/core:bootstrapQualifier"


class StorageStack(Stack):
    """What the stage keeps (data, weights, code) and who may touch it.

    Args:
        stage: the stage's config (its removal policy decides the fate of data and key on stack deletion; its serving
            config how long captured requests are kept).
        key_user_role_path: IAM path of the roles the stage's other stacks create; they may use the key, as far as
            their own policies allow.
        endpoint_name: the stage's endpoint (core/naming.py): the hosting role writes its log groups.
        training_images: container images training and processing jobs run; the training role may pull only these.
        serving_images: container images endpoints run; the hosting role may pull only these.
        staging_images: container images the weights-staging jobs run; the staging role may pull only these.
        promotion_role: this stage's names when it serves versions promoted from another stage: its promotion role
            is the only writer of promoted/, which the hosting role then reads; None otherwise.
        promotion_readers: (account, names) of the stages that promote from this one (account None: this one's):
            their promotion roles may read its registered and promoted weights and decrypt them through S3.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage: StageConfig,
        key_user_role_path: str,
        endpoint_name: str,
        training_images: list[str],
        serving_images: list[str],
        staging_images: list[str],
        promotion_role: StageNames | None = None,
        promotion_readers: Sequence[tuple[str | None, StageNames]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        removal = RemovalPolicy.RETAIN if stage.removal_policy == "retain" else RemovalPolicy.DESTROY
        self.key = self._stage_key(removal)
        self.access_logs = self._access_logs_bucket(removal)
        self._buckets(stage, removal)

        # Of pretrained/, only the prefixes of the repositories this stage stages (StagedWeights: the staging jobs
        # write them, training reads its own).
        staged = sorted({w.prefix for w in (stage.training.staged_weights, stage.serving.staged_weights) if w})
        # The weights-staging jobs write pretrained/, with a role of their own: the only one that may write there
        # (the models bucket's policy) and read the Hugging Face token, when the stage has one (gated models). The
        # training role, which runs the fine-tuning code on the weights, only reads them.
        self.training_role = self._training_role(staged, images=training_images)
        self.staging_role = self._staging_role(staged, staging_images)
        # What a model package serves is a copy of its job's weights that only the registry role writes
        # (registered/): the training role could still change trained/ after the version was approved.
        self.registry_role = self._registry_role(staging_images)
        self.huggingface_token = self._huggingface_token(stage.huggingface_token_secret, removal)
        # What only the promotion role writes (promoted/), and the hosting role reads, in a stage that promotes.
        self.promotion_role = promotion_role and promotion_role.promotion_role_arn(self.partition, self.account)
        self.hosting_role = self._hosting_role(stage, serving_images, endpoint_name)

        self._key_users(key_user_role_path)
        self._protect_served_code_and_weights(key_user_role_path)
        self._let_promotions_read(promotion_readers)
        self._outputs(key_user_role_path)

    def _stage_key(self, removal: RemovalPolicy) -> kms.Key:
        """One customer-managed key for everything the stage stores, rotated yearly by KMS. Its policy lets the
        account administer it and names who may use it (key_policy.py): the stage's own roles, CloudWatch Logs for
        the stage's log groups, and CloudFormation's role for encrypting function environments."""
        key = key_policy.administered_key(
            self,
            "Key",
            description="Encrypts the LLM platform's data, weights and code for this stage",
            removal_policy=removal,
            pending_window=Duration.days(30 if removal == RemovalPolicy.RETAIN else 7),
        )
        # CloudWatch Logs encrypts the stage's log groups (custom-resource handlers) with this key too; the encryption
        # context names the log group, so the condition keeps it to this account's and region's log groups.
        key_policy.allow_service(
            key,
            "EncryptStageLogGroups",
            f"logs.{self.region}.amazonaws.com",
            ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": self.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name="*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                }
            },
        )
        return key

    def _access_logs_bucket(self, removal: RemovalPolicy) -> s3.Bucket:
        """Server access logs of the other buckets. S3 delivers access logs only to SSE-S3 buckets, so this one alone
        is not encrypted with the stage's key."""
        bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,  # logs are evidence: a deleted or overwritten log stays recoverable for a while
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-logs", expiration=ACCESS_LOG_RETENTION),
                s3.LifecycleRule(id="expire-old-versions", noncurrent_version_expiration=Duration.days(30)),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
            ],
            removal_policy=removal,
            auto_delete_objects=removal == RemovalPolicy.DESTROY,
        )
        NagSuppressions.add_resource_suppressions(
            bucket,
            [
                NagPackSuppression(
                    id="AwsSolutions-S1",
                    reason="This is the access-log bucket itself; logging it into itself would loop",
                )
            ],
        )
        return bucket

    def _buckets(self, stage: StageConfig, removal: RemovalPolicy) -> None:
        """The data, models and artifacts buckets, encrypted with the stage key and logged to the access-log bucket."""
        buckets = {"encryption_key": self.key, "access_logs": self.access_logs, "removal_policy": removal}
        # Captured requests and responses are prompts and answers people sent: they expire, by the config.
        self.data_bucket = secure_bucket(
            self,
            "Data",
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-captured-data",
                    prefix=bucket_layout.DATA_CAPTURE,
                    expiration=Duration.days(stage.serving.data_capture_expiry_days),
                )
            ],
            **buckets,
        )
        self.models_bucket = secure_bucket(self, "Models", versioned=True, **buckets)
        # Code archives are content-addressed and never overwritten; versioning costs nothing and guards against a
        # mistaken delete. An archive no stack uses any more is tagged superseded (never deleted at once: a
        # rollback or a running job may still need it) and expires after a grace period longer than the longest
        # training job (28 days).
        self.artifacts_bucket = secure_bucket(
            self,
            "Artifacts",
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-superseded-code",
                    prefix=bucket_layout.CODE,
                    tag_filters={"superseded": "true"},
                    expiration=SUPERSEDED_CODE_GRACE,
                )
            ],
            **buckets,
        )

    def _training_role(self, staged: list[str], *, images: list[str]) -> SageMakerExecutionRole:
        """The training and processing jobs' role: read raw data and code, prepare and evaluate data, read pretrained
        weights, write checkpoints (SageMaker syncs deletions) and the fine-tuned weights. Never pretrained/: the
        staging role writes it."""
        role = SageMakerExecutionRole(
            self,
            "TrainingRole",
            description="Runs the fine-tuning pipeline's processing and training jobs",
            log_groups=["/aws/sagemaker/TrainingJobs", "/aws/sagemaker/ProcessingJobs"],
            metric_namespaces=["/aws/sagemaker/TrainingJobs", "/aws/sagemaker/ProcessingJobs"],
            job_types=("training-job", "processing-job"),
        )
        role.allow_read(self.data_bucket, bucket_layout.RAW_DATA, bucket_layout.PREPARED_DATA, bucket_layout.EVALUATION)
        role.allow_write(self.data_bucket, bucket_layout.PREPARED_DATA, bucket_layout.EVALUATION)
        role.allow_read(self.models_bucket, *staged, bucket_layout.CHECKPOINTS, bucket_layout.TRAINED)
        role.allow_write(self.models_bucket, bucket_layout.TRAINED)
        role.allow_write(self.models_bucket, bucket_layout.CHECKPOINTS, delete=True)
        role.allow_read(self.artifacts_bucket, bucket_layout.CODE)
        role.allow_key(self.key, encrypt=True)
        role.allow_volume_encryption(self.key)
        role.allow_pull(*images)
        return role

    def _hosting_role(self, stage: StageConfig, images: list[str], endpoint_name: str) -> SageMakerExecutionRole:
        """The endpoints' role: read the weights and the inference code, write captured requests when data capture
        is on, and the containers' logs: SageMaker writes them as this role into one log group per endpoint and per
        inference component (docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html:
        /aws/sagemaker/Endpoints/[EndpointName]), which the serving stack creates with the stage's retention."""
        role = SageMakerExecutionRole(
            self,
            "HostingRole",
            description="Runs the LMI inference endpoints",
            log_groups=[
                f"/aws/sagemaker/Endpoints/{endpoint_name}",
                f"/aws/sagemaker/InferenceComponents/{component_name(endpoint_name, '*')}",
            ],
            metric_namespaces=["/aws/sagemaker/Endpoints"],
        )
        # Staged weights: only what the endpoint serves (a pinned commit's files, or every commit of the repository
        # it follows main of); fine-tuned weights: trained/.
        served = stage.serving.staged_weights
        role.allow_read(
            self.models_bucket,
            *([served.read_prefix] if served else []),
            bucket_layout.TRAINED,
            bucket_layout.REGISTERED,
            *([bucket_layout.PROMOTED] if self.promotion_role else []),
        )
        role.allow_read(self.artifacts_bucket, bucket_layout.CODE)
        role.allow_write(self.data_bucket, bucket_layout.DATA_CAPTURE)
        role.allow_key(self.key, encrypt=True)
        role.allow_pull(*images)
        return role

    def _key_users(self, role_path: str) -> None:
        """Who may use the stage key besides CloudWatch Logs; each still needs its own IAM allow."""
        key_policy.allow_principals(
            self.key,
            "UseKeyStageRoles",
            [
                self.training_role.role.role_arn,
                self.hosting_role.role.role_arn,
                self.staging_role.role.role_arn,
                self.registry_role.role.role_arn,
                # The training and serving stacks' roles (the pipelines' role, the code-packaging handlers), by path.
                self.format_arn(service="iam", region="", resource="role", resource_name=f"{role_path.strip('/')}/*"),
            ],
        )
        # Lambda encrypts a function's environment with the key of its KmsKeyArn using the permissions of whoever
        # creates or updates the function (AWS Lambda Developer Guide, "Securing environment variables": kms:Encrypt
        # and kms:CreateGrant to configure it, kms:Decrypt to view and manage it): here the CloudFormation execution
        # role of the CDK bootstrap, which deploys every stack of the stage (stage.py's synthesizer), through Lambda
        # only.
        key_policy.allow_principals(
            self.key,
            "EncryptFunctionEnvironments",
            [self._bootstrap_role(DefaultStackSynthesizer.DEFAULT_CLOUDFORMATION_ROLE_ARN)],
            actions=["kms:Encrypt", "kms:Decrypt"],
            conditions={"StringEquals": {"kms:ViaService": f"lambda.{self.region}.{self.url_suffix}"}},
        )

    def _protect_served_code_and_weights(self, role_path: str) -> None:
        """Explicit denies in the models bucket's policy, which no IAM allow of this account overrides:

        - A handler folder (`<served weights>inference/...`, under pretrained/ or trained/) is written by the
          code-packaging functions only (roles under `<role path>code-packaging/`, CodePackage): the endpoint runs
          the model.py there (OPTION_ENTRYPOINT) with every prompt, so no job, and no person, may put one.
        - pretrained/ (each commit's files, its record `<commit>.json`, and `main.json`, which names the commit the
          next deploy serves) is written by the staging role only, besides the handler folders above.
        - registered/ (the weights a model package names) is written by the registry role only, likewise.

        aws:PrincipalArn is the role's ARN, not the session's, for whoever assumed it; the packaging roles are named
        by path, since CloudFormation names them in stacks deployed after this one."""
        packaging = self.format_arn(
            service="iam", region="", resource="role", resource_name=f"{role_path.strip('/')}/{ROLE_SUBPATH}*"
        )
        handler_folders = [
            self.models_bucket.arn_for_objects(f"{prefix}*/{bucket_layout.HANDLER_SUBFOLDER}*")
            for prefix in bucket_layout.SERVED_WEIGHTS
        ]
        promoted = (
            [
                (
                    "OnlyPromotionWritesPromoted",
                    [self.models_bucket.arn_for_objects(f"{bucket_layout.PROMOTED}*")],
                    [self.promotion_role, packaging],
                )
            ]
            if self.promotion_role
            else []
        )
        for sid, resources, writers in (
            ("OnlyCodePackagingWritesHandlers", handler_folders, [packaging]),
            (
                "OnlyStagingWritesPretrained",
                [self.models_bucket.arn_for_objects(f"{bucket_layout.PRETRAINED}*")],
                [self.staging_role.role.role_arn, packaging],
            ),
            (
                "OnlyTheRegistryWritesRegistered",
                [self.models_bucket.arn_for_objects(f"{bucket_layout.REGISTERED}*")],
                [self.registry_role.role.role_arn, packaging],
            ),
            *promoted,
        ):
            self.models_bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    # PutObject also authorizes CopyObject's target and completing a multipart upload.
                    actions=["s3:PutObject"],
                    resources=resources,
                    conditions={"ArnNotLike": {"aws:PrincipalArn": writers}},
                )
            )

    def _let_promotions_read(self, readers: Sequence[tuple[str | None, StageNames]]) -> None:
        """The stages that promote from this one copy its approved versions with their promotion roles: read what a
        model package names (registered/, and promoted/ when this stage promotes in turn), and decrypt it through S3.
        Each grant names the reader's account as principal and its role by aws:PrincipalArn: S3 and KMS refuse a
        policy naming a role that does not exist yet, and the reader's stage deploys after this one."""
        shared = bucket_layout.PACKAGED_WEIGHTS
        for index, (account, names) in enumerate(readers):
            account = account or self.account
            role = names.promotion_role_arn(self.partition, account)
            principal = {"principals": [iam.AccountPrincipal(account)]}
            self.models_bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"PromotionReads{index}",
                    **principal,
                    actions=["s3:GetObject"],
                    resources=[self.models_bucket.arn_for_objects(f"{prefix}*") for prefix in shared],
                    conditions={"ArnEquals": {"aws:PrincipalArn": role}},
                )
            )
            # Listing tells a missing record (404) from a refused one (403), and finds files no record lists.
            self.models_bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"PromotionLists{index}",
                    **principal,
                    actions=["s3:ListBucket"],
                    resources=[self.models_bucket.bucket_arn],
                    conditions={
                        "ArnEquals": {"aws:PrincipalArn": role},
                        "StringLike": {"s3:prefix": [f"{prefix}*" for prefix in shared]},
                    },
                )
            )
            key_policy.allow_principals(
                self.key,
                f"PromotionDecrypts{index}",
                [role],
                actions=["kms:Decrypt"],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{self.region}.{self.url_suffix}"}},
                account=account,
            )

    def _registry_role(self, images: list[str]) -> SageMakerExecutionRole:
        """The fine-tuning pipeline's registry step (training/register_weights.py): copies a job's weights, exactly
        the versions it read, from trained/ into registered/<run>/, which the model package then names."""
        role = SageMakerExecutionRole(
            self,
            "RegistryRole",
            description="Copies fine-tuned weights into registered/ before a version is registered",
            log_groups=["/aws/sagemaker/ProcessingJobs"],
            metric_namespaces=["/aws/sagemaker/ProcessingJobs"],
            job_types=("processing-job",),
        )
        role.allow_read(self.models_bucket, bucket_layout.TRAINED, bucket_layout.REGISTERED)
        role.allow_read_versions(self.models_bucket, bucket_layout.TRAINED)
        role.allow_write(self.models_bucket, bucket_layout.REGISTERED)
        role.allow_read(self.artifacts_bucket, bucket_layout.CODE)
        role.allow_key(self.key, encrypt=True)
        role.allow_volume_encryption(self.key)
        role.allow_pull(*images)
        return role

    def _staging_role(self, staged: list[str], images: list[str]) -> SageMakerExecutionRole:
        """The weights-staging jobs' own role: write the staged repositories' prefixes, read the code, use the key."""
        role = SageMakerExecutionRole(
            self,
            "StagingRole",
            description="Runs the weights-staging jobs: copies Hugging Face repositories into pretrained/",
            log_groups=["/aws/sagemaker/ProcessingJobs"],
            metric_namespaces=["/aws/sagemaker/ProcessingJobs"],
            job_types=("processing-job",),
        )
        role.allow_read(self.models_bucket, *staged)
        role.allow_write(self.models_bucket, *staged)
        role.allow_read(self.artifacts_bucket, bucket_layout.CODE)
        role.allow_key(self.key, encrypt=True)
        role.allow_volume_encryption(self.key)
        role.allow_pull(*images)
        return role

    def _huggingface_token(self, name: str | None, removal: RemovalPolicy) -> secretsmanager.CfnSecret | None:
        """The secret the staging jobs read a Hugging Face token from, created empty: people put the token with
        `aws secretsmanager put-secret-value`, so it is never in a template, a parameter or the CDK's inputs. Encrypted
        with the stage key; only the staging role may read it."""
        if name is None:
            return None
        # Neither SecretString nor GenerateSecretString: "If you omit both ... you create an empty secret" (the
        # CloudFormation schema of AWS::SecretsManager::Secret). The CDK's Secret would generate a random value.
        secret = secretsmanager.CfnSecret(
            self,
            "HuggingFaceToken",
            name=name,
            description="Hugging Face read token for staging gated models; put it with aws secretsmanager "
            "put-secret-value. Only the staging role can read it",
            kms_key_id=self.key.key_arn,
        )
        secret.apply_removal_policy(removal)
        NagSuppressions.add_resource_suppressions(
            secret, [NagPackSuppression(id="AwsSolutions-SMG4", reason=compliance.HUGGINGFACE_TOKEN_ROTATION)]
        )
        self.staging_role.role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadHuggingFaceToken", actions=["secretsmanager:GetSecretValue"], resources=[secret.ref]
            )
        )
        self._huggingface_token_policy(secret)
        self._allow_putting_huggingface_token(name)
        return secret

    def _huggingface_token_policy(self, secret: secretsmanager.CfnSecret) -> None:
        """An explicit deny in the secret's own policy: no other principal of the account reads the token, whatever
        its IAM policies allow (administrators still put new values and manage the secret)."""
        reader = self.staging_role.role.role_arn
        secretsmanager.CfnResourcePolicy(
            self,
            "HuggingFaceTokenPolicy",
            secret_id=secret.ref,
            block_public_policy=True,
            resource_policy={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "OnlyTheStagingRoleReads",
                        "Effect": "Deny",
                        "Principal": {"AWS": "*"},
                        "Action": "secretsmanager:GetSecretValue",
                        "Resource": "*",
                        "Condition": {"StringNotEquals": {"aws:PrincipalArn": reader}},
                    },
                    {
                        "Sid": "TheStagingRoleReads",
                        "Effect": "Allow",
                        "Principal": {"AWS": reader},
                        "Action": "secretsmanager:GetSecretValue",
                        "Resource": "*",
                    },
                ],
            },
        )

    def _allow_putting_huggingface_token(self, name: str) -> None:
        """Whoever puts the token encrypts it with the stage key through Secrets Manager, for this secret only; only
        the staging role (a key user) decrypts it. The secret's ARN is matched by its name (Secrets Manager appends
        six random characters): naming the secret itself would make the key depend on the secret that depends on the
        key."""
        key_policy.allow_principals(
            self.key,
            "PutHuggingFaceToken",
            [self.format_arn(service="iam", region="", resource="*")],
            actions=["kms:GenerateDataKey"],
            conditions={
                "StringEquals": {"kms:ViaService": f"secretsmanager.{self.region}.{self.url_suffix}"},
                "StringLike": {
                    "kms:EncryptionContext:SecretARN": self.format_arn(
                        service="secretsmanager",
                        resource="secret",
                        resource_name=f"{name}-??????",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                },
            },
        )

    def _bootstrap_role(self, template: str) -> str:
        """A CDK bootstrap role's ARN from its synthesizer template, with the qualifier the synthesizer reads from
        context and CloudFormation's own account, region and partition."""
        qualifier = self.node.try_get_context(BOOTSTRAP_QUALIFIER_CONTEXT) or DefaultStackSynthesizer.DEFAULT_QUALIFIER
        for placeholder, value in (
            ("${Qualifier}", qualifier),
            ("${AWS::Partition}", self.partition),
            ("${AWS::AccountId}", self.account),
            ("${AWS::Region}", self.region),
        ):
            template = template.replace(placeholder, value)
        return template

    def _outputs(self, role_path: str) -> None:
        """Names people and scripts need (uploading data, starting runs), and the SCP that guards the job roles;
        later stacks get the objects instead."""
        for name, value in {
            "DataBucketName": self.data_bucket.bucket_name,
            "ModelsBucketName": self.models_bucket.bucket_name,
            "ArtifactsBucketName": self.artifacts_bucket.bucket_name,
            "KeyArn": self.key.key_arn,
            "TrainingRoleArn": self.training_role.role.role_arn,
            "HostingRoleArn": self.hosting_role.role.role_arn,
            "StagingRoleArn": self.staging_role.role.role_arn,
            "RegistryRoleArn": self.registry_role.role.role_arn,
            "PassRoleGuardPolicy": self._pass_role_guard(role_path),
        }.items():
            CfnOutput(self, name, value=value)

    def _pass_role_guard(self, role_path: str) -> str:
        """The SCP that keeps the job roles to the platform (pass_role_guard.py), for the account owner to attach."""
        return pass_role_guard(
            job_role_arns=[
                role.role.role_arn
                for role in (self.training_role, self.staging_role, self.registry_role, self.hosting_role)
            ],
            stage_role_arns=stage_role_pattern(self, role_path),
            cloudformation_role_arn=self._bootstrap_role(DefaultStackSynthesizer.DEFAULT_CLOUDFORMATION_ROLE_ARN),
        )
