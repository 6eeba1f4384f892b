"""An S3 bucket with the defaults this platform never goes without."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from core import bucket_layout

# Old object versions stay recoverable this long after being overwritten or deleted.
NONCURRENT_VERSION_RETENTION = Duration.days(bucket_layout.NONCURRENT_VERSION_DAYS)
# Parts of uploads that never completed cost money and are invisible in listings.
ABORT_INCOMPLETE_UPLOADS_AFTER = Duration.days(7)


def secure_bucket(
    scope: Construct,
    construct_id: str,
    *,
    encryption_key: kms.IKey,
    access_logs: s3.IBucket | None,
    removal_policy: RemovalPolicy,
    versioned: bool,
    lifecycle_rules: list[s3.LifecycleRule] | None = None,
    bucket_name: str | None = None,
) -> s3.Bucket:
    """A private, SSE-KMS, TLS-1.2-only bucket that logs access to `access_logs`.

    Args:
        encryption_key: customer-managed key for default encryption (bucket keys on, to cut KMS calls).
        access_logs: bucket receiving server access logs, under `<construct_id>/`; None: no access logs (the caller
            acknowledges the finding with its reason).
        removal_policy: RETAIN keeps bucket and objects with the stack; DESTROY also empties it first.
        versioned: keep old versions (a delete or overwrite stays recoverable), expired after
            NONCURRENT_VERSION_RETENTION.
        lifecycle_rules: extra rules, added after the defaults.
        bucket_name: a physical name (e.g. PhysicalName.GENERATE_IF_NEEDED for a bucket other accounts use).
    """
    rules = [
        s3.LifecycleRule(
            id="abort-incomplete-uploads",
            abort_incomplete_multipart_upload_after=ABORT_INCOMPLETE_UPLOADS_AFTER,
        )
    ]
    if versioned:
        rules.append(
            s3.LifecycleRule(id="expire-old-versions", noncurrent_version_expiration=NONCURRENT_VERSION_RETENTION)
        )
    return s3.Bucket(
        scope,
        construct_id,
        bucket_name=bucket_name,
        encryption=s3.BucketEncryption.KMS,
        encryption_key=encryption_key,
        bucket_key_enabled=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        versioned=versioned,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=f"{construct_id}/" if access_logs else None,
        lifecycle_rules=rules + (lifecycle_rules or []),
        removal_policy=removal_policy,
        auto_delete_objects=removal_policy == RemovalPolicy.DESTROY,
    )
