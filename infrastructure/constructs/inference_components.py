"""Inference components: several models on one endpoint, each with its own copies, GPUs and host memory.

The endpoint's variant names no model: it holds instances, which SageMaker adds and removes (managed instance
scaling, down to zero where the config allows) to place the components' copies. Each component is one Model (its own
weights, from lmi_model) and reserves, per copy, its tensor parallel degree in GPUs (NumberOfAcceleratorDevicesRequired)
and the host memory sizing gives its ranks while loading (MinMemoryRequiredInMb). Requests name the component
(InvokeEndpoint's InferenceComponentName, `<endpoint>-<name>`).

Updates: what replaces the classic endpoint's blue/green for a component is its rolling update
(DeploymentConfig.RollingUpdatePolicy): a change to a component's Model or specification replaces its copies one at a
time, bakes `deployment.wait_seconds` after each, and rolls back to the old copies, all at once, when one of the
component's own 5XX-error or latency alarms fires (AutoRollbackConfiguration); its GPU-memory alarm (engine deepspeed
only) notifies and rolls nothing back (alarms.gpu_memory_alarm).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from core import placement
from core.config import ServingConfig
from core.config.components import ComponentConfig
from core.naming import component_name
from infrastructure.constructs.alarms import alarms_above, gpu_memory_alarm
from infrastructure.constructs.endpoint_scaling import ComponentScaling

COMPONENT_METRICS = "/aws/sagemaker/InferenceComponents"


def construct_id(name: str) -> str:
    """`gptj-tuned` -> `GptjTuned`: one construct id per component, so each has its own logical ids."""
    return "".join(part.capitalize() for part in name.split("-"))


def components_variant(
    config: ServingConfig, *, variant_name: str, routing: str
) -> sagemaker.CfnEndpointConfig.ProductionVariantProperty:
    """The variant of an endpoint that hosts components: instances only, scaled by SageMaker between min_instances
    (0: scale to zero) and max_instances. The start-up timeouts belong to each component (StartupParameters)."""
    scaling, instance = config.autoscaling, config.catalog_instance
    return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
        variant_name=variant_name,
        instance_type=config.instance_type,
        initial_instance_count=placement.initial_instances(config),
        managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
            status="ENABLED", min_instance_count=scaling.min_instances, max_instance_count=scaling.max_instances
        ),
        volume_size_in_gb=config.volume_size_gib if instance.volume_size_supported else None,
        routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(routing_strategy=routing),
        inference_ami_version=config.inference_ami_version,  # the host driver a CUDA 13 image needs
    )


class InferenceComponents(Construct):
    """The components of one endpoint, their alarms and scaling.

    Args:
        config: the stage's serving config (with components).
        endpoint_name: the endpoint's name.
        endpoint: the endpoint (components are created once it is in service).
        variant_name: the endpoint's variant.
        models: each component's Model, by component name.
        topic: where the components' alarms notify.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id_: str,
        *,
        config: ServingConfig,
        endpoint_name: str,
        endpoint: sagemaker.CfnEndpoint,
        variant_name: str,
        models: dict[str, sagemaker.CfnModel],
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id_)
        self.config = config
        self.names = {c.name: component_name(endpoint_name, c.name) for c in config.components}
        servings = config.component_servings()
        self.components: dict[str, sagemaker.CfnInferenceComponent] = {}
        self.alarms: dict[str, list[cloudwatch.Alarm]] = {}  # each component's rollback triggers
        self.notify_alarms: dict[str, list[cloudwatch.Alarm]] = {}
        self.scaling: dict[str, ComponentScaling] = {}
        for component in config.components:
            serving = servings[component.name]
            scope_ = Construct(self, construct_id(component.name))
            name = self.names[component.name]
            alarms = self._alarms(scope_, name, topic)
            if gpu_memory_alarm(serving.engine):
                self.notify_alarms[component.name] = self._gpu_memory_alarms(scope_, name, topic)
            resource = self._inference_component(
                scope_,
                component,
                serving,
                name=name,
                endpoint=endpoint,
                variant_name=variant_name,
                model=models[component.name],
                alarms=alarms,
            )
            self.components[component.name] = resource
            self.alarms[component.name] = alarms
            if component.scales:
                self.scaling[component.name] = ComponentScaling(
                    scope_,
                    "Scaling",
                    component_name=name,
                    component=resource,
                    config=component,
                    scaling=config.autoscaling,
                    concurrency_target=placement.concurrency_target(config, serving),
                )

    def _inference_component(
        self,
        scope: Construct,
        component: ComponentConfig,
        serving: ServingConfig,
        *,
        name: str,
        endpoint: sagemaker.CfnEndpoint,
        variant_name: str,
        model: sagemaker.CfnModel,
        alarms: list[cloudwatch.Alarm],
    ) -> sagemaker.CfnInferenceComponent:
        """One component: its Model on the variant, with the GPUs and memory of one copy (placement.copy_of), its
        initial copies, and a rolling update rolled back on `alarms`."""
        copy = placement.copy_of(component.name, serving)
        return sagemaker.CfnInferenceComponent(
            scope,
            "Component",
            inference_component_name=name,
            endpoint_name=endpoint.attr_endpoint_name,
            variant_name=variant_name,
            specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=model.attr_model_name,
                compute_resource_requirements=sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    number_of_accelerator_devices_required=copy.gpus,
                    min_memory_required_in_mb=copy.memory_mb,
                ),
                startup_parameters=sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                    model_data_download_timeout_in_seconds=serving.download_timeout,
                    container_startup_health_check_timeout_in_seconds=serving.startup_timeout,
                ),
            ),
            runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=component.initial_copies
            ),
            deployment_config=self._rolling_update(alarms),
        )

    def _rolling_update(self, alarms: list[cloudwatch.Alarm]):
        types = sagemaker.CfnInferenceComponent
        return types.InferenceComponentDeploymentConfigProperty(
            rolling_update_policy=types.InferenceComponentRollingUpdatePolicyProperty(
                maximum_batch_size=types.InferenceComponentCapacitySizeProperty(type="COPY_COUNT", value=1),
                wait_interval_in_seconds=self.config.deployment.wait_seconds,
            ),
            auto_rollback_configuration=types.AutoRollbackConfigurationProperty(
                alarms=[types.AlarmProperty(alarm_name=a.alarm_name) for a in alarms]
            ),
        )

    @staticmethod
    def metric(
        name: str, metric_name: str, *, namespace: str = "AWS/SageMaker", statistic: str = "Average"
    ) -> cloudwatch.Metric:
        """A metric of one component (by its full name): invocations in AWS/SageMaker, utilization of its copies in
        /aws/sagemaker/InferenceComponents, both with the InferenceComponentName dimension."""
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=metric_name,
            dimensions_map={"InferenceComponentName": name},
            statistic=statistic,
            period=Duration.minutes(1),
        )

    def _alarms(self, scope: Construct, name: str, topic: sns.ITopic) -> list[cloudwatch.Alarm]:
        alarms_config = self.config.alarms
        specs = [
            (
                "Errors5xx",
                self.metric(name, "Invocation5XXErrors", statistic="Sum"),
                alarms_config.error_5xx_per_minute,
                "invocations answered with a 5XX error per minute",
            ),
            (
                "LatencyP90",
                # ModelLatency is reported in microseconds.
                self.metric(name, "ModelLatency", statistic="p90"),
                alarms_config.latency_p90_seconds * 1_000_000,
                "model latency, 90th percentile, in microseconds",
            ),
        ]
        return alarms_above(scope, name, specs, topic)

    def _gpu_memory_alarms(self, scope: Construct, name: str, topic: sns.ITopic) -> list[cloudwatch.Alarm]:
        spec = (
            "GpuMemory",
            # Normalized: 0-100% of the GPUs the copy reserved, whatever their number.
            self.metric(name, "GPUMemoryUtilizationNormalized", namespace=COMPONENT_METRICS, statistic="Maximum"),
            self.config.alarms.gpu_memory_percent,
            "GPU memory utilization of a copy's GPUs, percent",
        )
        return alarms_above(scope, name, [spec], topic)

    def widgets(self) -> list[cloudwatch.IWidget]:
        """One dashboard row per component: latency, requests and copies' load, errors and requests that found no
        copy, and how much of what each copy reserved it uses."""
        rows: list[cloudwatch.IWidget] = []
        for short, name in self.names.items():
            rows += [
                cloudwatch.GraphWidget(
                    title=f"{short}: latency (microseconds)",
                    left=[
                        self.metric(name, "ModelLatency", statistic="p50"),
                        self.metric(name, "ModelLatency", statistic="p90"),
                    ],
                ),
                cloudwatch.GraphWidget(
                    title=f"{short}: requests",
                    left=[self.metric(name, "Invocations", statistic="Sum")],
                    right=[self.metric(name, "ConcurrentRequestsPerCopy", statistic="Maximum")],
                ),
                cloudwatch.GraphWidget(
                    title=f"{short}: errors",
                    left=[
                        self.metric(name, "Invocation4XXErrors", statistic="Sum"),
                        self.metric(name, "Invocation5XXErrors", statistic="Sum"),
                        self.metric(name, "NoCapacityInvocationFailures", statistic="Sum"),
                    ],
                ),
                cloudwatch.GraphWidget(
                    title=f"{short}: use of what a copy reserved (%)",
                    left=[
                        self.metric(name, metric, namespace=COMPONENT_METRICS, statistic="Maximum")
                        for metric in (
                            "GPUUtilizationNormalized",
                            "GPUMemoryUtilizationNormalized",
                            "MemoryUtilizationNormalized",
                        )
                    ],
                ),
            ]
        return rows
