"""Scaling and inference components: how many instances and model copies a stage runs, and on what signal.

Two shapes of endpoint, chosen per stage by `serving.components`:
- classic (no components): one model, one container per instance; Application Auto Scaling moves the variant's
  instance count between `autoscaling.min_instances` and `max_instances`, never below one.
- inference components: the endpoint holds instances (managed instance scaling between min_instances and
  max_instances, which may be 0), and each component is one model with its own copies, GPUs and host memory,
  addressed by its name (InvokeEndpoint's InferenceComponentName). Application Auto Scaling moves each component's
  copy count, and SageMaker adds or removes instances to hold the copies. A component may scale to zero copies, and
  with min_instances 0 the endpoint to zero instances; the first request after that fails and wakes it up
  (docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from core import placement
from core.config import lora_serving
from core.config.fields import ModelName, StrictModel
from core.config.lora_serving import AdapterConfig, MaxLoraRank

if TYPE_CHECKING:
    from core.config.serving import ServingConfig, WeightsConfig

# The wake-up from zero copies: an alarm on one datapoint of one minute, as AWS's own example, compared >= 1 so the
# first request that finds no copy is enough (AWS's example compares > 1, which needs two in the same minute).
WAKE_PERIOD_SECONDS = 60
# A component is named <endpoint>-<name> (at most 63 characters: the endpoint's 45, a dash and 17).
ComponentName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9](-?[a-z0-9])*$", max_length=17)]


class AutoscalingConfig(StrictModel):
    """How many instances the endpoint runs, and what signal adds or removes capacity.

    The signal: 'concurrency' tracks the requests a model container (or a component's copy) holds at once, queued
    ones included and streamed ones until their last token, reported every 10 seconds (SageMaker's high-resolution
    ConcurrentRequestsPerModel / ConcurrentRequestsPerCopy); 'invocations' tracks invocations per instance (per copy
    with components) per minute, the one-minute metric that long generations make a poor signal of load.
    """

    min_instances: int = Field(
        default=1,
        ge=0,
        description="never fewer instances (an idle endpoint still bills); 0 only with inference components, which "
        "then scale to zero when every component has no copy and come back on the first request",
    )
    max_instances: int = Field(default=1, ge=1, description="never more instances")
    metric: Literal["concurrency", "invocations"] | None = Field(
        default=None,
        description="what scaling tracks: 'concurrency' (concurrent requests per model container or copy, every "
        "10 s) or 'invocations' (invocations per instance, or per copy, per minute). Default: 'invocations' when "
        "invocations_per_instance_per_minute is set (what such a file always meant), else 'concurrency'",
    )
    concurrent_requests_per_copy: float | None = Field(
        default=None,
        gt=0,
        description="with metric 'concurrency': add capacity above this many requests at once per model container "
        "(an instance, classic) or per component copy. Default: what the engine runs at once, max_batch_size per "
        "model copy (times the copies on an instance, classic)",
    )
    invocations_per_instance_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="with metric 'invocations': add capacity above this many invocations per instance (per copy, "
        "with components) per minute. Default 60",
    )
    scale_out_cooldown_seconds: int = Field(default=300, ge=0, description="wait after adding capacity")
    scale_in_cooldown_seconds: int = Field(default=900, ge=0, description="wait after removing capacity")

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingConfig:
        if self.min_instances > self.max_instances:
            raise ValueError(f"min_instances {self.min_instances} is above max_instances {self.max_instances}")
        if self.metric == "concurrency" and self.invocations_per_instance_per_minute is not None:
            raise ValueError(
                "invocations_per_instance_per_minute is the target of metric 'invocations'; with metric "
                "'concurrency' set concurrent_requests_per_copy, or drop metric to keep scaling on invocations"
            )
        if self.scaling_metric == "invocations" and self.concurrent_requests_per_copy is not None:
            raise ValueError(
                "concurrent_requests_per_copy is the target of metric 'concurrency'; set metric: concurrency to "
                "scale on it, or drop it to keep scaling on invocations"
            )
        return self

    @property
    def scaling_metric(self) -> Literal["concurrency", "invocations"]:
        if self.metric is not None:
            return self.metric
        return "invocations" if self.invocations_per_instance_per_minute is not None else "concurrency"

    @property
    def invocations_target(self) -> int:
        return self.invocations_per_instance_per_minute or 60


class ComponentConfig(StrictModel):
    """One model of an endpoint that hosts inference components. Every field left out takes the stage's serving
    value (model, dtype, tensor_parallel_degree, weights, max_batch_size), so two components differ only in what
    they set: e.g. the pretrained and the fine-tuned GPT-J side by side, one with weights {source: pretrained}, the
    other with {source: latest_approved}."""

    name: ComponentName = Field(
        description="the component's part of its name <project>-<stage>-<name>, which requests give as "
        "InferenceComponentName: lowercase letters, digits and single dashes, at most 17 characters"
    )
    model: ModelName | None = Field(default=None, description="a model of core/catalog/models.py")
    dtype: Literal["fp16", "bf16", "int8"] | None = None
    tensor_parallel_degree: int | None = Field(
        default=None, ge=1, description="GPUs one copy is sharded over: the copy's NumberOfAcceleratorDevicesRequired"
    )
    weights: WeightsConfig | None = Field(default=None, description="where this component's weights come from")
    max_batch_size: int | None = Field(default=None, ge=1, description="running sequences per copy")
    min_copies: int = Field(
        default=1,
        ge=0,
        description="never fewer copies; 0 lets the component scale to zero when idle (the first request then fails "
        "with a no-capacity error and brings one copy back)",
    )
    max_copies: int = Field(default=1, ge=1, description="never more copies")
    adapters: tuple[AdapterConfig, ...] = Field(
        default=(),
        description="LoRA adapters served over this component's model (engine vllm; Llama, Mistral or Qwen2 "
        "models), each an adapter inference component <project>-<stage>-<name> that requests give as "
        "InferenceComponentName. Promoting a new adapter version updates that adapter alone, never the base",
    )
    max_loras: int | None = Field(
        default=None,
        ge=1,
        description="adapters one batch may mix: vLLM's max_loras, GPU slots each sized for max_lora_rank. Default: "
        "the number of adapters; fewer saves GPU memory, and the rest wait in host memory until asked for",
    )
    max_lora_rank: MaxLoraRank | None = Field(
        default=None,
        description="the highest adapter rank the engine loads (vLLM's max_lora_rank: 1, 8, 16, 32, 64, 128, 256, "
        "320 or 512). Default: the smallest of those at or above the adapters' highest rank",
    )

    @model_validator(mode="after")
    def _ordered(self) -> ComponentConfig:
        if self.min_copies > self.max_copies:
            raise ValueError(
                f"component {self.name}: min_copies {self.min_copies} is above max_copies {self.max_copies}"
            )
        return self

    @property
    def initial_copies(self) -> int:
        """Copies when the component is created or updated: at least one, so every deploy starts the model and the
        update's alarms watch a copy that serves (a component created with no copy would only fail later, on the first
        request)."""
        return max(self.min_copies, 1)

    @property
    def scales(self) -> bool:
        return self.max_copies > self.min_copies

    def overrides(self) -> dict:
        """The stage serving fields this component sets."""
        return {
            field: getattr(self, field)
            for field in ("model", "dtype", "tensor_parallel_degree", "weights", "max_batch_size")
            if getattr(self, field) is not None
        }


# --- the checks SageMaker would make when it places the copies ----------------------------------------------------


def check(serving: ServingConfig) -> None:
    """What SageMaker refuses, or what cannot work, in a stage's scaling and components: ValueError with the fix."""
    scaling, components = serving.autoscaling, serving.components
    if not components:
        if scaling.min_instances == 0:
            raise ValueError(
                "autoscaling.min_instances 0: only an endpoint that hosts inference components scales to zero "
                "instances (SageMaker keeps at least one instance per production variant otherwise); add "
                "serving.components, or set min_instances to 1 or more"
            )
        return
    names = [c.name for c in components]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"components: {', '.join(duplicates)} named more than once; each name addresses one model")
    deployment = serving.deployment
    if deployment.traffic != "all_at_once" or "termination_wait_seconds" in deployment.model_fields_set:
        raise ValueError(
            "deployment.traffic and deployment.termination_wait_seconds shape a classic endpoint's blue/green "
            "update; inference components update by a rolling update of their copies, one copy at a time, baking "
            "deployment.wait_seconds between steps and rolling back on the alarms: remove them"
        )
    if scaling.min_instances == 0 and any(c.min_copies > 0 for c in components):
        holding = ", ".join(f"{c.name} ({c.min_copies})" for c in components if c.min_copies > 0)
        raise ValueError(
            f"autoscaling.min_instances 0, but components keep copies running: {holding}; an instance holds them, "
            "so the endpoint never reaches zero instances. Set their min_copies to 0, or min_instances to 1 or more"
        )
    servings = serving.component_servings()
    lora_serving.check(serving, servings)
    gpus, memory = serving.catalog_instance.gpu_count, placement.usable_memory_mb(serving)
    where = f"{serving.instance_type} ({gpus} GPU(s), {memory} MB of host memory to reserve)"
    at_most = [placement.copy_of(c.name, servings[c.name]) for c in components for _ in range(c.max_copies)]
    needed = placement.instances_needed(at_most, gpus, memory)
    if needed is None or needed > scaling.max_instances:
        held = ", ".join(
            f"{c.name}: {c.max_copies} x {servings[c.name].tensor_parallel_degree} GPU(s)" for c in components
        )
        raise ValueError(
            f"the components' max_copies ({held}) need {needed} instance(s) of {where}, more than "
            f"autoscaling.max_instances {scaling.max_instances}: SageMaker could never place the last copies. Raise "
            "max_instances or lower max_copies"
        )
