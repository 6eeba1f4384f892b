"""LmiEndpoint: a SageMaker real-time endpoint running an LMI container, with scaling, alarms and a dashboard.

What the LMI reference did with create_model / create_endpoint_config / create_endpoint in a notebook, as L1
resources (neither the alpha L2 nor the gen-AI constructs carry the start-up timeouts, volume rules and KMS rules
together: @aws-cdk/aws-sagemaker-alpha's endpoint-config.ts, awslabs/generative-ai-cdk-constructs'
sagemaker_deployment):
- Model and EndpointConfig get no physical names: any change replaces them and updates the endpoint in place,
  blue/green, rolling back automatically when an alarm fires while traffic shifts.
- The endpoint keeps a stable name (`<project>-<stage>`) so clients and alarms can name it.
- VolumeSizeInGB and KmsKeyId are set only on instance types with EBS storage: on local-NVMe types (p4d, g5, ...)
  SageMaker rejects both, and the NVMe volume is encrypted by the hardware.
- The log groups the containers write to (`/aws/sagemaker/Endpoints/<endpoint>`, and with components
  `/aws/sagemaker/InferenceComponents/<component>`) belong to the stack, created before the endpoint and its
  components: left to SageMaker they would keep what the handler logs forever, unencrypted by the stage key.
"""

from __future__ import annotations

import functools
from typing import Protocol

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from core import bucket_layout, placement, serving_properties
from core.config import ServingConfig
from core.endpoint_settings import MODEL_DIR, ROUTING, TRAFFIC, VARIANT
from infrastructure.constructs import endpoint_scaling, inference_components, key_policy
from infrastructure.constructs.alarms import alarms_above, gpu_memory_alarm

# How long the endpoint's log groups keep what the containers write: a year, as every other log group of the stage
# (code packaging, the weights lookup).
LOG_RETENTION = logs.RetentionDays.ONE_YEAR
ENDPOINT_LOGS = "/aws/sagemaker/Endpoints"
COMPONENT_LOGS = "/aws/sagemaker/InferenceComponents"


def container_log_group(scope: Construct, construct_id: str, *, name: str, key: kms.IKey) -> logs.LogGroup:
    """The log group SageMaker writes a container's stdout and stderr to, owned by the stack: a retention, and the
    stage key (whose policy lets CloudWatch Logs use it for this account's log groups).

    SageMaker creates the group on first write when it does not exist; a group it created before this stack owned it
    makes the stack's create fail (AlreadyExists) until that group is deleted or imported."""
    return logs.LogGroup(scope, construct_id, log_group_name=name, retention=LOG_RETENTION, encryption_key=key)


class ServedCode(Protocol):
    """The handler SageMaker delivers beside the weights: `folder` is its place inside the served prefix
    (`inference/<sha256>/`, a deploy-time value), the same under /opt/ml/model."""

    folder: str


def lmi_model(
    scope: Construct,
    construct_id: str,
    *,
    config: ServingConfig,
    image_uri: str,
    weights_uri: str,
    code: ServedCode | None,
    role: iam.IRole,
) -> sagemaker.CfnModel:
    """The SageMaker Model of an LMI engine: SageMaker copies the served prefix, uncompressed, to /opt/ml/model
    before the container starts, and the container runs without network access unless the config says otherwise.

    Args:
        config: the stage's serving config (engine, serving keys, network isolation, VPC).
        image_uri: the LMI container image.
        weights_uri: `s3://bucket/prefix/` of the served weights (may be a deploy-time value); the whole prefix is
            delivered, the handler's `inference/<sha256>/` folder included.
        code: the handler inside that prefix (engine deepspeed); None for engines LMI serves with its own handler.
        role: the hosting execution role; it must read the prefix (and decrypt it) and, with a VPC, manage the
            instances' network interfaces.

    The engine's serving.properties keys travel as OPTION_* environment variables (DJL reads them as option.*, and
    OPTION_ENGINE as engine): the delivered folder holds weights and handler only, so one prefix serves every stage
    config without a copy per deploy.
    """
    if (config.engine == "deepspeed") != (code is not None):
        raise ValueError(
            f"engine {config.engine}: "
            + ("needs the handler delivered beside the weights" if code is None else "runs LMI's own handler")
        )
    entry_point = None if code is None else f"{MODEL_DIR}/{code.folder}model.py"
    vpc = config.vpc
    return sagemaker.CfnModel(
        scope,
        construct_id,
        execution_role_arn=role.role_arn,
        enable_network_isolation=config.network_isolation,
        vpc_config=(
            sagemaker.CfnModel.VpcConfigProperty(
                subnets=list(vpc.subnet_ids), security_group_ids=list(vpc.security_group_ids)
            )
            if vpc is not None
            else None
        ),
        primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
            image=image_uri,
            model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                    s3_uri=weights_uri, s3_data_type="S3Prefix", compression_type="None"
                )
            ),
            environment=serving_properties.environment(config, entry_point=entry_point),
        ),
    )


class LmiEndpoint(Construct):
    """The endpoint of one stage.

    Args:
        config: the stage's serving config.
        endpoint_name: the endpoint's stable name.
        image_uri: the LMI container image.
        weights_uri: S3 prefix of the served weights (may be a deploy-time value), delivered by SageMaker.
        code: the handler delivered inside that prefix (deepspeed), or None (vllm).
        components: with config.components, each component's (weights_uri, code) by name, in place of weights_uri
            and code: each component is a Model of its own (infrastructure/constructs/inference_components.py).
        role: the hosting execution role.
        encryption_key: encrypts captured data, and the volume where the instance allows.
        data_bucket: receives captured requests under capture/ when data capture is on.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ServingConfig,
        endpoint_name: str,
        image_uri: str,
        weights_uri: str | None,
        code: ServedCode | None,
        role: iam.IRole,
        encryption_key: kms.IKey,
        data_bucket: s3.IBucket,
        components: dict[str, tuple[str, ServedCode | None]] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.endpoint_name = endpoint_name
        self.hosts_components = bool(config.components)
        self._models(image_uri=image_uri, weights_uri=weights_uri, code=code, role=role, components=components)
        self.endpoint_config = self._endpoint_config(role=role, encryption_key=encryption_key, data_bucket=data_bucket)
        self.topic = self._alarm_topic()
        # Rollback triggers: what means failure whatever the engine. With components, errors and latency are per
        # component (InferenceComponents); the instances' disk stays the endpoint's.
        self.alarms = self._alarms(("Disk",) if self.hosts_components else ("Errors5xx", "LatencyP90", "Disk"))
        # Notify only, and only where the engine's GPU memory follows its load (alarms.gpu_memory_alarm).
        self.notify_alarms = (
            self._alarms(("GpuMemory",)) if not self.hosts_components and gpu_memory_alarm(config.engine) else []
        )
        self.endpoint = self._endpoint()
        self.log_groups = {
            endpoint_name: container_log_group(
                self, "Logs", name=f"{ENDPOINT_LOGS}/{endpoint_name}", key=encryption_key
            )
        }
        self.endpoint.node.add_dependency(self.log_groups[endpoint_name])
        self.components = self._inference_components() if self.hosts_components else None
        self._component_log_groups(encryption_key)
        self._variant_scaling()
        self.dashboard = self._dashboard()

    # --- parts ------------------------------------------------------------------------------------------------

    def _models(
        self,
        *,
        image_uri: str,
        weights_uri: str | None,
        code: ServedCode | None,
        role: iam.IRole,
        components: dict[str, tuple[str, ServedCode | None]] | None,
    ) -> None:
        """The Model the variant runs (`self.model`), or with components one Model per component, each with its own
        weights (`self.component_models`), the variant then holding instances only."""
        if not self.hosts_components:
            self.model = lmi_model(
                self, "Model", config=self.config, image_uri=image_uri, weights_uri=weights_uri, code=code, role=role
            )
            self.component_models = {}
            return
        servings = self.config.component_servings()
        self.model = None
        self.component_models = {
            name: lmi_model(
                self,
                f"Model{inference_components.construct_id(name)}",
                config=servings[name],
                image_uri=image_uri,
                weights_uri=served_uri,
                code=served_code,
                role=role,
            )
            for name, (served_uri, served_code) in (components or {}).items()
        }
        if set(self.component_models) != set(servings):
            raise ValueError(f"components: Models for {sorted(servings)}, given {sorted(self.component_models)}")

    def _endpoint_config(
        self, *, role: iam.IRole, encryption_key: kms.IKey, data_bucket: s3.IBucket
    ) -> sagemaker.CfnEndpointConfig:
        """The endpoint config: its one production variant, its volume key and its data capture."""
        config, hosts_components = self.config, self.hosts_components
        volume_size_supported = config.catalog_instance.volume_size_supported
        vpc = config.vpc
        return sagemaker.CfnEndpointConfig(
            self,
            "Config",
            # An endpoint of components runs their containers with this role, isolated and in this VPC as its
            # Models are (CreateEndpointConfig: ExecutionRoleArn, EnableNetworkIsolation, VpcConfig).
            execution_role_arn=role.role_arn if hosts_components else None,
            enable_network_isolation=config.network_isolation if hosts_components else None,
            vpc_config=(
                sagemaker.CfnEndpointConfig.VpcConfigProperty(
                    subnets=list(vpc.subnet_ids), security_group_ids=list(vpc.security_group_ids)
                )
                if hosts_components and vpc is not None
                else None
            ),
            production_variants=[
                inference_components.components_variant(config, variant_name=VARIANT, routing=ROUTING[config.routing])
                if hosts_components
                else self._model_variant()
            ],
            kms_key_id=encryption_key.key_arn if volume_size_supported else None,
            data_capture_config=self._data_capture(data_bucket, encryption_key),
        )

    def _model_variant(self) -> sagemaker.CfnEndpointConfig.ProductionVariantProperty:
        """The classic endpoint's variant: instances running `self.model`."""
        config = self.config
        volume_size_supported = config.catalog_instance.volume_size_supported
        return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=VARIANT,
            model_name=self.model.attr_model_name,
            instance_type=config.instance_type,
            initial_instance_count=config.autoscaling.min_instances,
            initial_variant_weight=1.0,
            model_data_download_timeout_in_seconds=config.download_timeout,
            container_startup_health_check_timeout_in_seconds=config.startup_timeout,
            inference_ami_version=config.inference_ami_version,  # the host driver a CUDA 13 image needs
            volume_size_in_gb=config.volume_size_gib if volume_size_supported else None,
            routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(routing_strategy=ROUTING[config.routing]),
        )

    def _alarm_topic(self) -> sns.Topic:
        """The topic the alarms publish to, with its own key, and the config's e-mail subscriptions.

        CloudWatch publishes alarms to the topic, so the topic's key must admit it: a key of its own keeps the stage
        key's policy free of this service grant. CloudWatch may use it only for alarms of this account and region
        (aws:SourceAccount, aws:SourceArn: the confused-deputy guard); the account only administers it."""
        stack = Stack.of(self)
        topic_key = key_policy.administered_key(
            self, "AlarmsKey", description=f"Encrypts the alarm topic of {self.endpoint_name}"
        )
        key_policy.allow_service(
            topic_key,
            "PublishAlarms",
            "cloudwatch.amazonaws.com",
            ["kms:Decrypt", "kms:GenerateDataKey*"],
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": stack.format_arn(
                        service="cloudwatch",
                        resource="alarm",
                        resource_name="*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                },
            },
        )
        topic = sns.Topic(
            self, "Alarms", display_name=f"{self.endpoint_name} alarms", master_key=topic_key, enforce_ssl=True
        )
        for email in self.config.alarms.emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        return topic

    def _endpoint(self) -> sagemaker.CfnEndpoint:
        """The endpoint, updated blue/green and rolled back on `self.alarms` (a classic endpoint); components update
        by rolling their own copies (inference_components.py)."""
        return sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            deployment_config=(
                None
                if self.hosts_components
                else sagemaker.CfnEndpoint.DeploymentConfigProperty(
                    blue_green_update_policy=self._blue_green(),
                    auto_rollback_configuration=sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
                        alarms=[sagemaker.CfnEndpoint.AlarmProperty(alarm_name=a.alarm_name) for a in self.alarms]
                    ),
                )
            ),
        )

    def _inference_components(self) -> inference_components.InferenceComponents:
        """The components on the endpoint, one per `self.component_models`."""
        return inference_components.InferenceComponents(
            self,
            "Components",
            config=self.config,
            endpoint_name=self.endpoint_name,
            endpoint=self.endpoint,
            variant_name=VARIANT,
            models=self.component_models,
            topic=self.topic,
        )

    def _component_log_groups(self, key: kms.IKey) -> None:
        """Each component's log group, created before the component: a component's containers log to a group of
        their own, named after the component, not to the endpoint's."""
        if self.components is None:
            return
        for name, resource in self.components.components.items():
            component = self.components.names[name]
            group = container_log_group(
                self, f"Logs{inference_components.construct_id(name)}", name=f"{COMPONENT_LOGS}/{component}", key=key
            )
            resource.node.add_dependency(group)
            self.log_groups[component] = group

    def _variant_scaling(self) -> None:
        """The classic variant's instance scaling, when it may grow (components scale in InferenceComponents)."""
        scaling = self.config.autoscaling
        if not self.hosts_components and scaling.max_instances > scaling.min_instances:
            endpoint_scaling.variant_scaling(
                self,
                endpoint_name=self.endpoint_name,
                variant_name=VARIANT,
                endpoint=self.endpoint,
                scaling=scaling,
                concurrency_target=placement.concurrency_target(self.config),
            )

    def _data_capture(self, bucket: s3.IBucket, key: kms.IKey):
        percent = self.config.data_capture_percent
        if percent is None:
            return None
        return sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=percent,
            destination_s3_uri=bucket.s3_url_for_object(bucket_layout.DATA_CAPTURE.rstrip("/")),
            kms_key_id=key.key_arn,
            capture_options=[
                sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode="Input"),
                sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode="Output"),
            ],
            capture_content_type_header=sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                json_content_types=["application/json"]
            ),
        )

    def _blue_green(self):
        deployment = self.config.deployment
        traffic = sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type=TRAFFIC[deployment.traffic],
            wait_interval_in_seconds=deployment.wait_seconds,
            canary_size=(
                sagemaker.CfnEndpoint.CapacitySizeProperty(type="CAPACITY_PERCENT", value=deployment.step_percent)
                if deployment.traffic == "canary"
                else None
            ),
            linear_step_size=(
                sagemaker.CfnEndpoint.CapacitySizeProperty(type="CAPACITY_PERCENT", value=deployment.step_percent)
                if deployment.traffic == "linear"
                else None
            ),
        )
        return sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(
            traffic_routing_configuration=traffic,
            termination_wait_in_seconds=deployment.termination_wait_seconds,
        )

    def metric(self, name: str, *, namespace: str = "AWS/SageMaker", statistic: str = "Average") -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=name,
            dimensions_map={"EndpointName": self.endpoint_name, "VariantName": VARIANT},
            statistic=statistic,
            period=_one_minute(),
        )

    def _alarms(self, only: tuple[str, ...]) -> list[cloudwatch.Alarm]:
        """The alarms of `only` (construct ids), in that order."""
        alarms_config = self.config.alarms
        instance = self.config.catalog_instance
        instance_metrics = "/aws/sagemaker/Endpoints"
        specs = [
            (
                "Errors5xx",
                self.metric("Invocation5XXErrors", statistic="Sum"),
                alarms_config.error_5xx_per_minute,
                "invocations answered with a 5XX error per minute",
            ),
            (
                "LatencyP90",
                # ModelLatency is reported in microseconds.
                self.metric("ModelLatency", statistic="p90"),
                alarms_config.latency_p90_seconds * 1_000_000,
                "model latency, 90th percentile, in microseconds",
            ),
            (
                "GpuMemory",
                # One instance reports 0-100% per GPU, summed: the threshold scales with the GPU count.
                self.metric("GPUMemoryUtilization", namespace=instance_metrics, statistic="Maximum"),
                alarms_config.gpu_memory_percent * instance.gpu_count,
                f"GPU memory utilization, summed over the {instance.gpu_count} GPU(s) of an instance",
            ),
            (
                "Disk",
                self.metric("DiskUtilization", namespace=instance_metrics, statistic="Maximum"),
                alarms_config.disk_percent,
                "disk utilization of an instance, percent",
            ),
        ]
        chosen = [spec for alarm_id in only for spec in specs if spec[0] == alarm_id]
        return alarms_above(self, self.endpoint_name, chosen, self.topic)

    def _dashboard(self) -> cloudwatch.Dashboard:
        instance = "/aws/sagemaker/Endpoints"
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{self.endpoint_name}-endpoint")
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Latency (microseconds)",
                left=[
                    self.metric("ModelLatency", statistic="p50"),
                    self.metric("ModelLatency", statistic="p90"),
                    self.metric("OverheadLatency", statistic="p90"),
                ],
            ),
            cloudwatch.GraphWidget(
                title="Invocations",
                left=[self.metric("Invocations", statistic="Sum")],
                right=[self.metric("InvocationsPerInstance", statistic="Sum")],
            ),
            cloudwatch.GraphWidget(
                title="Errors",
                left=[
                    self.metric("Invocation4XXErrors", statistic="Sum"),
                    self.metric("Invocation5XXErrors", statistic="Sum"),
                ],
            ),
        )
        dashboard.add_widgets(
            *(
                cloudwatch.GraphWidget(
                    title=f"{title} per instance (%)",
                    left=[
                        self.metric(name, namespace=instance, statistic="Average"),
                        self.metric(name, namespace=instance, statistic="Maximum"),
                    ],
                )
                for title, name in [
                    ("GPU", "GPUUtilization"),
                    ("GPU memory", "GPUMemoryUtilization"),
                    ("CPU", "CPUUtilization"),
                    ("Memory", "MemoryUtilization"),
                    ("Disk", "DiskUtilization"),
                ]
            )
        )
        if self.components is not None:
            dashboard.add_widgets(*self.components.widgets())
        return dashboard


@functools.cache
def _one_minute() -> Duration:
    """One Duration for every metric's period: each Duration.minutes() is a round trip to the jsii node process."""
    return Duration.minutes(1)
