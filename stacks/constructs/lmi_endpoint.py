"""LmiEndpoint: a SageMaker real-time endpoint running an LMI container, with scaling, alarms and a dashboard.

What the LMI reference did with create_model / create_endpoint_config / create_endpoint in a notebook, as L1
resources (neither the alpha L2 nor the gen-AI constructs carry the start-up timeouts, volume rules and KMS rules
together, see research/cdk_anchors.md §1):
- Model and EndpointConfig get no physical names: any change replaces them and updates the endpoint in place,
  blue/green, rolling back automatically when an alarm fires while traffic shifts.
- The endpoint keeps a stable name (`<project>-<stage>`) so clients and alarms can name it.
- VolumeSizeInGB and KmsKeyId are set only on instance types with EBS storage: on local-NVMe types (p4d, g5, ...)
  SageMaker rejects both, and the NVMe volume is encrypted by the hardware.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from stacks import layout
from stacks.config import ServingConfig
from stacks.constructs import key_policy

VARIANT = "AllTraffic"
ROUTING = {"least_outstanding_requests": "LEAST_OUTSTANDING_REQUESTS", "random": "RANDOM"}
TRAFFIC = {"all_at_once": "ALL_AT_ONCE", "canary": "CANARY", "linear": "LINEAR"}


class LmiEndpoint(Construct):
    """The endpoint of one stage.

    Args:
        config: the stage's serving config.
        endpoint_name: the endpoint's stable name.
        image_uri: the LMI container image.
        code_uri: S3 URI of model.tar.gz (the handler and its rendered serving.properties).
        weights_uri: S3 prefix of the Hugging Face weights (may be a deploy-time value).
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
        code_uri: str,
        weights_uri: str,
        role: iam.IRole,
        encryption_key: kms.IKey,
        data_bucket: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.endpoint_name = endpoint_name
        instance = config.catalog_instance

        weights_env = {"deepspeed": "WEIGHTS_S3_URI", "vllm": "OPTION_MODEL_ID"}[config.engine]
        self.model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=role.role_arn,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image_uri,
                model_data_url=code_uri,
                environment={
                    weights_env: weights_uri,
                    # DJL's fallback when serving.properties has no option.tensor_parallel_degree.
                    "TENSOR_PARALLEL_DEGREE": str(config.tensor_parallel_degree),
                },
            ),
        )

        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=VARIANT,
                    model_name=self.model.attr_model_name,
                    instance_type=config.instance_type,
                    initial_instance_count=config.autoscaling.min_instances,
                    initial_variant_weight=1.0,
                    model_data_download_timeout_in_seconds=config.download_timeout_seconds,
                    container_startup_health_check_timeout_in_seconds=config.startup_timeout,
                    volume_size_in_gb=config.volume_size_gib if instance.volume_size_supported else None,
                    routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                        routing_strategy=ROUTING[config.routing]
                    ),
                )
            ],
            kms_key_id=encryption_key.key_arn if instance.volume_size_supported else None,
            data_capture_config=self._data_capture(data_bucket, encryption_key),
        )

        # CloudWatch publishes alarms to the topic, so the topic's key must admit it: a key of its own keeps the
        # stage key's policy free of this service grant. CloudWatch may use it only for alarms of this account and
        # region (aws:SourceAccount, aws:SourceArn: the confused-deputy guard); the account only administers it.
        stack = Stack.of(self)
        topic_key = key_policy.administered_key(
            self, "AlarmsKey", description=f"Encrypts the alarm topic of {endpoint_name}"
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
        self.topic = sns.Topic(
            self, "Alarms", display_name=f"{endpoint_name} alarms", master_key=topic_key, enforce_ssl=True
        )
        for email in config.alarms.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self.alarms = self._alarms()

        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            deployment_config=sagemaker.CfnEndpoint.DeploymentConfigProperty(
                blue_green_update_policy=self._blue_green(),
                auto_rollback_configuration=sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
                    alarms=[sagemaker.CfnEndpoint.AlarmProperty(alarm_name=a.alarm_name) for a in self.alarms]
                ),
            ),
        )

        if config.autoscaling.max_instances > config.autoscaling.min_instances:
            self._autoscaling()
        self.dashboard = self._dashboard()

    # --- parts ------------------------------------------------------------------------------------------------

    def _data_capture(self, bucket: s3.IBucket, key: kms.IKey):
        percent = self.config.data_capture_percent
        if percent is None:
            return None
        return sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=percent,
            destination_s3_uri=bucket.s3_url_for_object(layout.DATA_CAPTURE.rstrip("/")),
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
            period=Duration.minutes(1),
        )

    def _alarms(self) -> list[cloudwatch.Alarm]:
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
        alarms = []
        for name, metric, threshold, what in specs:
            alarm = cloudwatch.Alarm(
                self,
                name,
                alarm_description=f"{self.endpoint_name}: {what} above {threshold:g}",
                metric=metric,
                threshold=threshold,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
            alarms.append(alarm)
        return alarms

    def _autoscaling(self) -> None:
        scaling = self.config.autoscaling
        # No RoleARN: Application Auto Scaling uses its service-linked role for SageMaker endpoints.
        target = appscaling.CfnScalableTarget(
            self,
            "ScalableTarget",
            service_namespace="sagemaker",
            resource_id=f"endpoint/{self.endpoint_name}/variant/{VARIANT}",
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=scaling.min_instances,
            max_capacity=scaling.max_instances,
        )
        target.node.add_dependency(self.endpoint)
        appscaling.CfnScalingPolicy(
            self,
            "InvocationsPerInstance",
            policy_name=f"{self.endpoint_name}-invocations-per-instance",
            policy_type="TargetTrackingScaling",
            scaling_target_id=target.ref,
            target_tracking_scaling_policy_configuration=appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=float(scaling.invocations_per_instance_per_minute),
                predefined_metric_specification=appscaling.CfnScalingPolicy.PredefinedMetricSpecificationProperty(
                    predefined_metric_type="SageMakerVariantInvocationsPerInstance"
                ),
                scale_in_cooldown=scaling.scale_in_cooldown_seconds,
                scale_out_cooldown=scaling.scale_out_cooldown_seconds,
            ),
        )

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
        return dashboard
