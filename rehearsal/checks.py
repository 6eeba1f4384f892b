"""What the emulator can represent, compared with the synthesized templates, after deploy and after a redeploy.

Expected values come from the templates, resolved against the deployed stacks (`assembly.Resolver`): a check
compares what CloudFormation was asked to create with what the emulator holds, so it needs no copy of the
stacks' design. Something the templates ask for that the emulator does not represent is a `Gap`, never a pass.
"""

from __future__ import annotations

import json
import re
from typing import Any

from botocore.exceptions import ClientError

from rehearsal.assembly import Resolver, StackTemplate, Unresolvable, file_assets
from rehearsal.deployment import Aws, Deployment
from rehearsal.findings import Check, Finding, Gap, differences, error_code, summarize

# --- after deploy --------------------------------------------------------------------------------------------


def stacks_complete(d: Deployment) -> Check:
    statuses = {
        s.stack_name: d.aws("cloudformation").describe_stacks(StackName=s.stack_name)["Stacks"][0]["StackStatus"]
        for s in d.stacks
    }
    problems = [f"{name} is {status}" for name, status in statuses.items() if status != "CREATE_COMPLETE"]
    return summarize("stacks created", problems, f"{', '.join(statuses)}: CREATE_COMPLETE")


def assets_published(d: Deployment) -> Check:
    assets = [a for s in d.stacks for a in file_assets(s, account=d.account, region=d.region)]
    missing = []
    for bucket, key in assets:
        try:
            d.aws("s3").head_object(Bucket=bucket, Key=key)
        except ClientError:
            missing.append(f"s3://{bucket}/{key} is missing")
    buckets_used = sorted({b for b, _ in assets})
    return summarize(
        "assets published",
        missing,
        f"all {len(assets)} file assets (code zips, templates) are in {', '.join(buckets_used)}",
    )


def kms_keys(d: Deployment) -> Check:
    kms, problems, described = d.aws("kms"), [], []
    for stack, logical_id, resource, key_id in d.resources("AWS::KMS::Key"):
        where, properties = stack.path_of(logical_id), resource.get("Properties", {})
        metadata = kms.describe_key(KeyId=key_id)["KeyMetadata"]
        rotation = kms.get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"]
        policy = json.loads(kms.get_key_policy(KeyId=key_id, PolicyName="default")["Policy"])
        expected = {
            "KeyState": "Enabled" if properties.get("Enabled", True) else "Disabled",
            "Description": properties.get("Description"),
            "KeyRotationEnabled": bool(properties.get("EnableKeyRotation", False)),
            "KeyPolicy": d.resolver(stack).resolve(properties.get("KeyPolicy")),
        }
        actual = {
            "KeyState": metadata["KeyState"],
            "Description": metadata.get("Description"),
            "KeyRotationEnabled": rotation,
            "KeyPolicy": policy,
        }
        problems += [f"{where}: {line}" for line in differences(expected, actual)]
        described.append(f"{where} ({'rotation on' if rotation else 'no rotation'})")
    return summarize(
        "KMS keys",
        problems,
        f"{len(described)} enabled, description and key policy as the templates resolve them: " + ", ".join(described),
    )


# The bucket properties moto's CloudFormation handler for AWS::S3::Bucket applies (moto 5.2.5 also applies Tags).
# A property outside this set that the emulator shows unset is a gap, not a failure; once set, it is compared.
EMULATED_BUCKET_PROPERTIES = {"BucketEncryption"}


def _bucket_properties(s3: Any, bucket: str) -> dict[str, Any]:
    """What the S3 API shows for each bucket property; None (or False) where it shows the property unset."""

    def read(call: str, extract, missing_codes: tuple[str, ...]) -> Any:
        try:
            return extract(getattr(s3, call)(Bucket=bucket))
        except ClientError as err:
            if error_code(err) in missing_codes:
                return None
            raise

    encryption = read(
        "get_bucket_encryption",
        lambda r: r["ServerSideEncryptionConfiguration"]["Rules"][0],
        ("ServerSideEncryptionConfigurationNotFoundError",),
    )
    return {
        "BucketEncryption": encryption and encryption.get("ApplyServerSideEncryptionByDefault"),
        "BucketKeyEnabled": bool(encryption and encryption.get("BucketKeyEnabled")),
        "VersioningConfiguration": read("get_bucket_versioning", lambda r: r.get("Status"), ()),
        "PublicAccessBlockConfiguration": read(
            "get_public_access_block",
            lambda r: r["PublicAccessBlockConfiguration"],
            ("NoSuchPublicAccessBlockConfiguration",),
        ),
        "LifecycleConfiguration": read(
            "get_bucket_lifecycle_configuration",
            lambda r: sorted(rule["ID"] for rule in r["Rules"]),
            ("NoSuchLifecycleConfiguration",),
        ),
        "LoggingConfiguration": read("get_bucket_logging", lambda r: r.get("LoggingEnabled"), ()),
        "OwnershipControls": read(
            "get_bucket_ownership_controls",
            lambda r: r["OwnershipControls"]["Rules"][0]["ObjectOwnership"],
            ("OwnershipControlsNotFoundError",),
        ),
    }


def _expected_bucket_properties(properties: dict[str, Any], resolver: Resolver) -> dict[str, Any]:
    """The same properties as the template asks for them (absent ones left out)."""
    expected: dict[str, Any] = {}
    rules = properties.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
    if rules:
        expected["BucketEncryption"] = resolver.resolve(rules[0]["ServerSideEncryptionByDefault"])
        if "BucketKeyEnabled" in rules[0]:
            expected["BucketKeyEnabled"] = bool(rules[0]["BucketKeyEnabled"])
    if "VersioningConfiguration" in properties:
        expected["VersioningConfiguration"] = properties["VersioningConfiguration"]["Status"]
    if "PublicAccessBlockConfiguration" in properties:
        expected["PublicAccessBlockConfiguration"] = properties["PublicAccessBlockConfiguration"]
    if "LifecycleConfiguration" in properties:
        expected["LifecycleConfiguration"] = sorted(r["Id"] for r in properties["LifecycleConfiguration"]["Rules"])
    if "LoggingConfiguration" in properties:
        logging = properties["LoggingConfiguration"]
        expected["LoggingConfiguration"] = {
            "TargetBucket": resolver.resolve(logging.get("DestinationBucketName")),
            "TargetPrefix": logging.get("LogFilePrefix", ""),
        }
    if "OwnershipControls" in properties:
        expected["OwnershipControls"] = properties["OwnershipControls"]["Rules"][0]["ObjectOwnership"]
    return expected


def buckets(d: Deployment) -> list[Finding]:
    s3, problems, encryption_kinds, not_emulated = d.aws("s3"), [], [], {}
    count = 0
    for stack, logical_id, resource, name in d.resources("AWS::S3::Bucket"):
        count += 1
        where = stack.path_of(logical_id)
        expected = _expected_bucket_properties(resource.get("Properties", {}), d.resolver(stack))
        actual = _bucket_properties(s3, name)
        for prop, value in expected.items():
            if prop not in EMULATED_BUCKET_PROPERTIES and actual[prop] in (None, False):
                not_emulated.setdefault(prop, []).append(where)
            else:
                problems += [f"{where}: {line}" for line in differences(value, actual[prop], prop)]
        algorithm = (actual["BucketEncryption"] or {}).get("SSEAlgorithm", "none")
        encryption_kinds.append(
            "SSE-KMS" if algorithm == "aws:kms" else "SSE-S3" if algorithm == "AES256" else algorithm
        )
    kinds = ", ".join(f"{encryption_kinds.count(k)} {k}" for k in sorted(set(encryption_kinds)))
    findings: list[Finding] = [
        summarize(
            "S3 buckets",
            problems,
            f"{count} buckets exist; default encryption (and every other property the emulator keeps) as the templates "
            f"resolve it: {kinds}",
        )
    ]
    if not_emulated:
        findings.append(
            Gap(
                f"S3 bucket properties {', '.join(sorted(not_emulated))} "
                f"(set on {max(len(v) for v in not_emulated.values())} buckets)",
                "moto's CloudFormation handler for AWS::S3::Bucket applies only BucketEncryption (without "
                "BucketKeyEnabled) and Tags; the deployed buckets show none of these",
            )
        )
    return findings


def bucket_policies(d: Deployment) -> list[Finding]:
    s3, problems, missing, checked = d.aws("s3"), [], [], 0
    for stack, logical_id, resource, _ in d.resources("AWS::S3::BucketPolicy"):
        resolver, properties = d.resolver(stack), resource["Properties"]
        bucket = resolver.resolve(properties["Bucket"])
        try:
            policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
        except ClientError as err:
            if error_code(err) != "NoSuchBucketPolicy":
                raise
            missing.append(stack.path_of(logical_id))
            continue
        checked += 1
        problems += [
            f"{stack.path_of(logical_id)}: {line}"
            for line in differences(resolver.resolve(properties["PolicyDocument"]), policy)
        ]
    findings: list[Finding] = []
    if checked:
        findings.append(summarize("S3 bucket policies", problems, f"{checked} as the templates resolve them"))
    if missing:
        findings.append(
            Gap(
                f"S3 bucket policies ({len(missing)}: TLS-only access, access-log delivery)",
                "not created (moto skips AWS::S3::BucketPolicy); GetBucketPolicy finds none",
            )
        )
    return findings


def iam_roles(d: Deployment) -> Check:
    iam, problems, count = d.aws("iam"), [], 0
    for stack, logical_id, resource, role_name in d.resources("AWS::IAM::Role"):
        count += 1
        where = stack.path_of(logical_id)
        try:
            expected = d.resolver(stack).resolve(resource["Properties"]["AssumeRolePolicyDocument"])
        except Unresolvable as err:
            problems.append(f"{where}: trust policy not comparable: {err}")
            continue
        actual = iam.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
        problems += [f"{where}: {line}" for line in differences(expected, actual, "trust")]
    return summarize("IAM roles", problems, f"{count} roles exist, trust policies as the templates resolve them")


LOG_GROUP_ARN = (
    "moto resolves Fn::GetAtt <log group>.Arn to arn:...:log-group:<name>, without the ':*' CloudFormation ends it "
    "with, so these statements are compared in moto's form and their real resource string is not checked"
)


def _log_group_arn_uses(stack: StackTemplate, value: Any) -> int:
    """How many Fn::GetAtt <AWS::Logs::LogGroup>.Arn are in `value`."""
    if isinstance(value, list):
        return sum(_log_group_arn_uses(stack, v) for v in value)
    if not isinstance(value, dict):
        return 0
    target = value.get("Fn::GetAtt")
    if isinstance(target, list) and target[1] == "Arn":
        return int(stack.resources.get(target[0], {}).get("Type") == "AWS::Logs::LogGroup")
    return sum(_log_group_arn_uses(stack, v) for v in value.values())


def iam_policies(d: Deployment) -> list[Finding]:
    iam, problems, count, log_group_arns = d.aws("iam"), [], 0, 0
    deploy_time: list[str] = []
    for stack, logical_id, resource, _ in d.resources("AWS::IAM::Policy"):
        where, resolver, properties = stack.path_of(logical_id), d.resolver(stack), resource["Properties"]
        log_group_arns += _log_group_arn_uses(stack, properties["PolicyDocument"])
        try:
            document = resolver.resolve(properties["PolicyDocument"])
            name = resolver.resolve(properties["PolicyName"])
            roles = [resolver.resolve(r) for r in properties.get("Roles", [])]
        except Unresolvable as err:
            if "comes from a custom resource" not in str(err):
                problems.append(f"{where}: not comparable: {err}")
            else:
                # A resource named from a deploy-time value (the code package writing beside the weights the lookup
                # finds): moto never runs the lookup, so the document cannot be what AWS would hold.
                deploy_time.append(f"{where} ({err})")
            continue
        for role in roles:
            count += 1
            try:
                actual = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
            except ClientError as err:
                problems.append(f"{where}: not attached to role {role} ({error_code(err)})")
                continue
            problems += [f"{where} on {role}: {line}" for line in differences(document, actual)]
    findings: list[Finding] = [
        summarize(
            "IAM policies",
            problems,
            f"{count} policy attachments, each document as the template resolves it (deployed bucket, key, log group "
            "and role ARNs, across stacks)",
        )
    ]
    if log_group_arns:
        findings.append(Gap(f"the log group ARNs in {log_group_arns} IAM policy statements", LOG_GROUP_ARN))
    for where in deploy_time:
        findings.append(Gap(f"the IAM policy {where}", "not compared: it names a value only a deploy computes"))
    return findings


def _one(d: Deployment, resource_type: str) -> tuple[StackTemplate, str, dict[str, Any], str]:
    found = list(d.resources(resource_type))
    if len(found) != 1:
        raise AssertionError(f"expected one {resource_type} in the stage's templates, found {len(found)}")
    return found[0]


def sagemaker_model(d: Deployment) -> list[Finding]:
    stack, logical_id, resource, arn = _one(d, "AWS::SageMaker::Model")
    resolver, properties = d.resolver(stack), resource["Properties"]
    model = d.aws("sagemaker").describe_model(ModelName=arn.rsplit("/", 1)[-1])
    container_template = properties["PrimaryContainer"]
    container = model.get("PrimaryContainer", {})
    where = stack.path_of(logical_id)
    environment, unresolved = _model_environment(resolver, container_template.get("Environment", {}))
    findings: list[Finding] = [
        _model_summary(resolver, properties, model, environment, unresolved),
        *(
            Gap(
                f"the SageMaker model's {name} (PrimaryContainer.Environment of {where})",
                f"{err}, which never ran; the model was created with {container.get('Environment', {}).get(name)!r}",
            )
            for name, err in unresolved.items()
        ),
    ]
    findings += _model_data_source(resolver, container_template, container, where)
    findings += _model_network(resolver, properties, model, where)
    return findings


def _model_environment(resolver: Resolver, template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Unresolvable]]:
    """The container's variables as the template resolves them, and apart those only a custom resource produces (the
    staged weights' commit, read at deploy time): those are a gap, not a difference, as the handler never ran."""
    environment, unresolved = {}, {}
    for name, value in template.items():
        try:
            environment[name] = resolver.resolve(value)
        except Unresolvable as err:
            unresolved[name] = err
    return environment, unresolved


def _model_summary(
    resolver: Resolver,
    properties: dict[str, Any],
    model: dict[str, Any],
    environment: dict[str, Any],
    unresolved: dict[str, Unresolvable],
) -> Finding:
    """The model's image, resolvable variables and role against the template's."""
    container = model.get("PrimaryContainer", {})
    expected = {
        "Image": properties["PrimaryContainer"]["Image"],
        "Environment": environment,
        "ExecutionRoleArn": resolver.resolve(properties["ExecutionRoleArn"]),
    }
    actual = {
        "Image": container.get("Image"),
        "Environment": {k: v for k, v in container.get("Environment", {}).items() if k not in unresolved},
        "ExecutionRoleArn": model.get("ExecutionRoleArn"),
    }
    variables = ", ".join(f"{k}={v}" for k, v in actual["Environment"].items())
    return summarize(
        "SageMaker model",
        differences(expected, actual),
        f"image {actual['Image']}; {variables}; role {actual['ExecutionRoleArn'].rsplit('/', 1)[-1]}",
    )


def _model_data_source(
    resolver: Resolver, container_template: dict[str, Any], container: dict[str, Any], where: str
) -> list[Finding]:
    """The weights prefix the model serves against the template's; a gap when only a custom resource produces it."""
    try:
        model_data = resolver.resolve(container_template.get("ModelDataSource"))
    except Unresolvable as err:
        return [
            Gap(
                f"the SageMaker model's weights prefix (PrimaryContainer.ModelDataSource of {where})",
                f"{err}, which never ran; the model was created with {container.get('ModelDataSource')!r}",
            )
        ]
    if container.get("ModelDataSource") != model_data:
        return [Check("SageMaker model data source", False, f"expected {model_data}, got {container}")]
    return []


def _model_network(resolver: Resolver, properties: dict[str, Any], model: dict[str, Any], where: str) -> list[Finding]:
    """The model's VPC and network isolation against the template's."""
    findings: list[Finding] = []
    vpc = resolver.resolve(properties.get("VpcConfig"))
    if (model.get("VpcConfig") or None) != vpc:
        findings.append(Check("SageMaker model VPC", False, f"expected {vpc}, got {model.get('VpcConfig')}"))
    isolation = resolver.resolve(properties.get("EnableNetworkIsolation", False))
    if model.get("EnableNetworkIsolation") != isolation:
        # moto's SageMaker model drops the flag (it always answers False): seen here, so reported as what it is.
        findings.append(
            Gap(
                f"the SageMaker model's network isolation (EnableNetworkIsolation of {where})",
                f"the template sets {isolation}; moto created the model with {model.get('EnableNetworkIsolation')!r}",
            )
        )
    return findings


def endpoint_config(d: Deployment) -> Check:
    stack, _, resource, arn = _one(d, "AWS::SageMaker::EndpointConfig")
    resolver, properties = d.resolver(stack), resource["Properties"]
    config = d.aws("sagemaker").describe_endpoint_config(EndpointConfigName=arn.rsplit("/", 1)[-1])
    expected_variants = resolver.resolve(properties["ProductionVariants"])
    actual_variants = [
        {k: v.get(k) for k in e} for e, v in zip(expected_variants, config["ProductionVariants"], strict=False)
    ]
    problems = differences(expected_variants, actual_variants, "ProductionVariants")
    if len(config["ProductionVariants"]) != len(expected_variants):
        problems.append(f"{len(config['ProductionVariants'])} variants, expected {len(expected_variants)}")
    for key in ("DataCaptureConfig", "KmsKeyId"):
        # moto answers {} for a DataCaptureConfig that was not set.
        problems += differences(resolver.resolve(properties.get(key)), config.get(key) or None, key)
    variant = config["ProductionVariants"][0]
    capture = config.get("DataCaptureConfig", {})
    capture_text = (
        f"data capture {capture.get('InitialSamplingPercentage')}% to {capture.get('DestinationS3Uri')}"
        if capture.get("EnableCapture")
        else "no data capture"
    )
    # An endpoint that hosts inference components names no model in its variants: the components bring them.
    model_text = f"model {variant['ModelName'][-40:]}" if "ModelName" in variant else "no model (inference components)"
    return summarize(
        "SageMaker endpoint config",
        problems,
        f"{variant['VariantName']}: {variant['InitialInstanceCount']} x {variant['InstanceType']}, start-up health "
        f"check {variant.get('ContainerStartupHealthCheckTimeoutInSeconds')} s, download "
        f"{variant.get('ModelDataDownloadTimeoutInSeconds')} s, {model_text}; {capture_text}",
    )


def endpoint(d: Deployment) -> list[Finding]:
    stack, logical_id, resource, arn = _one(d, "AWS::SageMaker::Endpoint")
    resolver, properties = d.resolver(stack), resource["Properties"]
    deployed_name = arn.rsplit("/", 1)[-1]
    described = d.aws("sagemaker").describe_endpoint(EndpointName=deployed_name)
    expected_config = resolver.resolve(properties["EndpointConfigName"])
    problems = differences(
        {"EndpointStatus": "InService", "EndpointConfigName": expected_config},
        {k: described.get(k) for k in ("EndpointStatus", "EndpointConfigName")},
    )
    findings: list[Finding] = [
        summarize("SageMaker endpoint", problems, f"InService on endpoint config {expected_config[-40:]}")
    ]
    wanted_name = properties.get("EndpointName")
    if wanted_name and wanted_name != deployed_name:
        findings.append(
            Gap(
                f"the endpoint's name ({stack.path_of(logical_id)} asks for {wanted_name!r})",
                f"moto ignores the EndpointName property and names it {deployed_name!r}",
            )
        )
    if "DeploymentConfig" in properties and "DeploymentConfig" not in described:
        findings.append(
            Gap(
                "the endpoint's DeploymentConfig (blue/green traffic shifting, auto-rollback on the alarms)",
                "moto's endpoint keeps no DeploymentConfig (DescribeEndpoint has none)",
            )
        )
    return findings


# In the order they are printed; each takes the Deployment and returns a Check, a Gap or a list of them.
AFTER_DEPLOY = [
    stacks_complete,
    assets_published,
    kms_keys,
    buckets,
    bucket_policies,
    iam_roles,
    iam_policies,
    sagemaker_model,
    endpoint_config,
    endpoint,
]


# --- redeploy ------------------------------------------------------------------------------------------------


def stack_event_counts(aws: Aws, stacks: list[StackTemplate]) -> dict[str, int]:
    cloudformation = aws("cloudformation")
    return {
        s.stack_name: sum(
            len(page["StackEvents"])
            for page in cloudformation.get_paginator("describe_stack_events").paginate(StackName=s.stack_name)
        )
        for s in stacks
    }


def redeploy_changed_nothing(
    stacks: list[StackTemplate], cli_output: str, events_before: dict[str, int], events_after: dict[str, int]
) -> Check:
    problems = []
    for stack in stacks:
        # cdk deploy prints `✅  staging/Storage (llm-platform-staging-storage) (no changes)` for a skipped stack.
        if not re.search(
            rf"{re.escape(stack.display_name)} \({re.escape(stack.stack_name)}\) \(no changes\)", cli_output
        ):
            problems.append(f"cdk deploy did not report '{stack.display_name} ... (no changes)'")
        if events_after[stack.stack_name] != events_before[stack.stack_name]:
            problems.append(
                f"{stack.stack_name} has {events_after[stack.stack_name] - events_before[stack.stack_name]} new events"
            )
    return summarize(
        "redeploy is a no-op", problems, f"{len(stacks)} stacks report no changes; no stack event was added"
    )
