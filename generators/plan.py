"""Print what `cdk synth` produced, per stage: the plan a person reads before deploying.

    python -m generators.plan [--assembly cdk.out] [--config config/default.yaml] [--stage dev]

It reads the synthesized cloud assembly (what will be deployed) and the config (why), and makes no AWS calls.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
from pathlib import Path

from core import bucket_layout, failures, naming, placement, sizing
from core.catalog import lifecycle
from core.config import (
    DEFAULT_CONFIG,
    PlatformConfig,
    ServingConfig,
    StageConfig,
    TrainingConfig,
    components,
    load_config,
    lora_serving,
    lora_training,
)
from core.config import promotion as stage_promotion
from core.config.components import ComponentConfig

# A new GPU instance, from the scaling decision to the container's start: AWS gives no figure ("the provisioning
# process takes several minutes", endpoint-auto-scaling-zero-instances.html); 3 minutes is this plan's assumption.
INSTANCE_PROVISIONING_SECONDS = 180


class AssemblyError(LookupError):
    """The cloud assembly does not hold what was asked for."""


def stage_stacks(assembly: Path, stage: str) -> list[tuple[str, dict]]:
    """(stack name, template) for each stack of one stage's nested assembly."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    nested = [
        a["properties"]["directoryName"]
        for a in manifest["artifacts"].values()
        if a["type"] == "cdk:cloud-assembly" and a["properties"].get("displayName") == stage
    ]
    if not nested:
        raise AssemblyError(f"{assembly}: stage {stage!r} was not synthesized; run `make synth` first")
    stage_dir = assembly / nested[0]
    stage_manifest = json.loads((stage_dir / "manifest.json").read_text())
    stacks = []
    for artifact in stage_manifest["artifacts"].values():
        if artifact["type"] == "aws:cloudformation:stack":
            props = artifact["properties"]
            template = json.loads((stage_dir / props["templateFile"]).read_text())
            stacks.append((props.get("stackName", artifact["displayName"]), template))
    return sorted(stacks)


def app_stacks(assembly: Path) -> list[tuple[str, dict]]:
    """(stack name, template) for the stacks at the top of the app (the promotion pipeline)."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    return sorted(
        (
            a["properties"].get("stackName", a["displayName"]),
            json.loads((assembly / a["properties"]["templateFile"]).read_text()),
        )
        for a in manifest["artifacts"].values()
        if a["type"] == "aws:cloudformation:stack"
    )


def resource_summary(template: dict) -> str:
    """`19 resources: 4 S3::Bucket, 3 IAM::Role, ...`, most common first."""
    counts = collections.Counter(r["Type"].removeprefix("AWS::") for r in template.get("Resources", {}).values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{sum(counts.values())} resources: {kinds}"


def describe_stage(name: str, stage: StageConfig, account: str | None = None) -> str:
    account = account or "the deploying credentials' account"
    data = "kept when the stack is deleted" if stage.removal_policy == "retain" else "deleted with the stack"
    return f"{name}: {account}, {stage.region}; data and key {data}"


def describe_serving(serving: ServingConfig) -> list[str]:
    """The endpoint: what runs where, whether it fits, how long it may take to start, what it costs."""
    instance, scaling = serving.catalog_instance, serving.autoscaling
    count = (
        f"{scaling.min_instances}"
        if scaling.min_instances == scaling.max_instances
        else f"{scaling.min_instances}-{scaling.max_instances}"
    )
    endpoint = f"  endpoint: {count} x {serving.instance_type} ({instance.gpus}), engine {serving.engine}"
    if serving.components:
        servings = serving.component_servings()
        lines = [f"{endpoint}, {len(serving.components)} inference component(s), each invoked by its name"]
        for component in serving.components:
            lines += describe_component(component, servings[component.name])
        return [
            *lines,
            f"    data capture: {describe_capture(serving)}",
            *describe_scaling(serving),
        ]
    return [
        endpoint,
        *describe_model(serving),
        f"    data capture: {describe_capture(serving)}",
        *describe_scaling(serving),
    ]


def describe_model(serving: ServingConfig, indent: str = "    ") -> list[str]:
    """One model: its sharding and fit, its timeouts and where its weights come from."""
    model, fit = serving.catalog_model, serving.fit()
    copies = fit.copies_per_instance
    lines = [
        f"    model {serving.model} ({model.billions:.1f} B parameters) in {serving.dtype}, tensor parallel "
        f"{serving.tensor_parallel_degree}, {copies} {'copy' if copies == 1 else 'copies'} per instance",
        f"    memory per GPU: {fit.describe()}",
        f"    host memory while loading: {serving.host_fit().describe()}",
        f"    timeouts: start-up health check {serving.startup_timeout} s, model data download "
        f"{serving.download_timeout} s",
        f"    weights: {describe_weights(serving)}, delivered by SageMaker to /opt/ml/model before start-up"
        + (", with the handler in its inference/<sha256>/" if serving.engine == "deepspeed" else ""),
        f"    network: {describe_network(serving)}",
    ]
    return [indent + line.removeprefix("    ") for line in lines]


def describe_network(serving: ServingConfig) -> str:
    isolation = "isolated (no network in the container)" if serving.network_isolation else "NOT isolated"
    if serving.vpc is None:
        return isolation
    vpc = serving.vpc
    return f"{isolation}, in subnets {', '.join(vpc.subnet_ids)} behind {', '.join(vpc.security_group_ids)}"


def describe_component(component: ComponentConfig, serving: ServingConfig) -> list[str]:
    """One inference component: its name, its copies and what each reserves, then its model."""
    copy = placement.copy_of(component.name, serving)
    copies = (
        f"{component.min_copies}" if component.scales is False else f"{component.min_copies}-{component.max_copies}"
    )
    model = describe_model(serving, indent="      ")
    # A component's copy is one model on its own GPUs: the fit's copies-per-instance would describe the classic path.
    model[0] = model[0].split(", tensor parallel")[0] + f", tensor parallel {serving.tensor_parallel_degree}"
    return [
        f"    component {component.name}: {copies} copies, each reserving {copy.gpus} GPU(s) and {copy.memory_mb} MB "
        "of host memory",
        *model,
        *describe_adapters(serving),
    ]


def describe_adapters(serving: ServingConfig) -> list[str]:
    """A base component's adapters: the engine's LoRA slots (their GPU share is in the memory line above), then each
    adapter, invoked by its own name and costing no instance of its own."""
    lora = serving.lora
    if lora is None:
        return []
    model = serving.catalog_model
    lines = [
        f"      adapters: {len(lora.adapters)} over {serving.model}, in its copies (no instance of their own); "
        f"vLLM LoRA slots: max_loras {lora.max_loras} x max_lora_rank {lora.max_lora_rank} = "
        f"{lora_serving.slots_gib(model, lora):.2f} GiB per GPU, {lora.max_cpu_loras} kept in host memory"
    ]
    sources = {
        "latest_approved": "the newest approved adapter package of {group}",
        "model_package": "the adapter package {arn}",
        "s3": "{uri}",
    }
    for adapter in lora.adapters:
        weights = adapter.weights
        source = sources[weights.source].format(
            group=weights.model_package_group or "the stage's registry",
            arn=weights.model_package_arn,
            uri=weights.s3_uri,
        )
        lines.append(
            f"        adapter {adapter.name}: rank {adapter.rank}, {lora_serving.adapter_gib(model, adapter):.2f} "
            f"GiB, from {source}; a new version updates only this adapter's component"
        )
    return lines


def cold_start_seconds(serving: ServingConfig) -> int:
    """From zero to the first answer: the wake-up alarm's minute, a new instance, SageMaker's copy of the weights and
    the container's load (sizing's start-up estimates, the same that size the timeouts, before their clamping)."""
    model, checkpoint = serving.catalog_model, serving.checkpoint
    copy = sizing.DOWNLOAD_FIXED_SECONDS + sizing.DOWNLOAD_SECONDS_PER_GIB * sizing.delivered_gib(model, checkpoint)
    load = sizing.STARTUP_FIXED_SECONDS + sizing.STARTUP_SECONDS_PER_GIB * sizing.download_gib(
        model, serving.dtype, checkpoint
    )
    return round(components.WAKE_PERIOD_SECONDS + INSTANCE_PROVISIONING_SECONDS + copy + load)


def describe_scaling(serving: ServingConfig) -> list[str]:
    """What scaling tracks, what the endpoint costs at zero, at its minimum and at its maximum, and for a stage that
    scales to zero, how long the first request after it waits."""
    scaling, price = serving.autoscaling, serving.catalog_instance.hourly_usd
    per = "copy" if serving.components else "instance"
    if scaling.scaling_metric == "concurrency":
        servings = serving.component_servings()
        targets = sorted({placement.concurrency_target(serving, c) for c in servings.values()}) or [
            placement.concurrency_target(serving)
        ]
        target = "/".join(f"{t:g}" for t in targets)
        signal = f"concurrent requests per {'copy' if serving.components else 'model container'}, target {target} "
        signal += "(high-resolution, every 10 s)"
    else:
        signal = f"invocations per {per} per minute, target {scaling.invocations_target}"
    fixed = scaling.min_instances == scaling.max_instances and not serving.components
    lines = [f"    scaling: {'none (fixed size)' if fixed else signal}"]
    # At zero nothing bills; the minimum while serving is min_instances, or the one instance a first copy needs.
    running = max(scaling.min_instances, 1)
    costs = ["$0.00/h at zero"] if scaling.min_instances == 0 else []
    costs += [f"${price * running:,.2f}/h at {running} instance(s)"]
    if scaling.max_instances > running:
        costs += [f"${price * scaling.max_instances:,.2f}/h at {scaling.max_instances} (maximum)"]
    lines.append(f"    cost: {', '.join(costs)} (reference on-demand price)")
    if scaling.min_instances == 0:
        servings = serving.component_servings()
        slowest = max(servings, key=lambda name: cold_start_seconds(servings[name]))
        seconds = cold_start_seconds(servings[slowest])
        lines.append(
            f"    cold start from zero: up to about {math.ceil(seconds / 60)} min for {slowest} (alarm "
            f"{components.WAKE_PERIOD_SECONDS} s + a new instance ~{INSTANCE_PROVISIONING_SECONDS // 60} min, "
            "assumed + weights copy and load, sizing's estimates); the requests meanwhile fail with a no-capacity error"
        )
    return lines


def describe_capture(serving: ServingConfig) -> str:
    """How much of the traffic is captured, and how long it is kept (captured prompts are people's data)."""
    kept = (
        f"deleted after {serving.data_capture_expiry_days} days, their old versions "
        f"{bucket_layout.NONCURRENT_VERSION_DAYS} days later"
    )
    if serving.data_capture_percent is None:
        return f"off; anything under {bucket_layout.DATA_CAPTURE} is {kept}"
    captured = f"{serving.data_capture_percent}% of requests and responses"
    return f"{captured} to {bucket_layout.DATA_CAPTURE} in the data bucket, {kept}"


def describe_training(training: TrainingConfig) -> list[str]:
    """The fine-tuning jobs: instances, GPUs, SMP layout, memory estimate, cost per running hour."""
    instance, smp, fit = training.catalog_instance, training.smp, training.fit()
    if smp.version == 1:
        layout = (
            f"SMP v1: tensor {smp.tensor_parallel_degree} x pipeline {smp.pipeline_parallel_degree} x data "
            f"{training.data_parallel_degree}"
            + (f", {smp.microbatches} microbatches" if smp.microbatches > 1 else "")
            + (", optimizer state sharded" if smp.shard_optimizer_state else "")
        )
    else:
        layout = (
            f"SMP v2: hybrid shard degree {smp.hybrid_shard_degree or 'all'} x data {training.data_parallel_degree}"
        )
    if training.method != "full":
        lora = training.lora
        shards = lora_training.shard_degree(training)
        parallel = (
            f"over a base sharded {shards} ways (SMP v2, FSDP) x {training.world_size // shards} "
            f"{'copy' if training.world_size == shards else 'copies'}"
            if training.shards_base
            else f"PyTorch DDP x {training.data_parallel_degree}, no SMP"
        )
        layout = (
            f"{training.method.upper()} adapters (r {lora.r}, alpha {lora.alpha}, "
            f"{', '.join(lora.target_modules) if lora.target_modules else 'attention and MLP projections'}), {parallel}"
        )
    return [
        f"  training: {training.instance_count} x {training.instance_type} ({instance.gpus}), "
        f"{training.processes} processes per host, {training.precision}",
        f"    {training.model}: {layout}",
        f"    memory per GPU (estimate): {fit.describe()}",
        f"    host memory while loading (estimate): {training.host_fit().describe()}",
        f"    cost while a job runs: ${instance.hourly_usd * training.instance_count:,.2f}/h"
        + (" (spot: less)" if training.spot.enabled else ""),
    ]


def describe_weights(serving: ServingConfig) -> str:
    weights, checkpoint = serving.weights, serving.checkpoint
    held = (
        f"the pre-sharded DeepSpeed {checkpoint.dtype} checkpoint {checkpoint.hf_id}, split for tensor parallel "
        f"{checkpoint.tensor_parallel_degree}"
        if checkpoint
        else "the Hugging Face weights"
    )
    if weights.source == "pretrained":
        staged = serving.staged_weights
        if staged.pinned:
            return f"the staged copy of {held} at commit {staged.revision} (models bucket, {staged.read_prefix})"
        return (
            f"the staged copy of {held} at the commit main had when last staged (models bucket, "
            f"{staged.prefix}<commit>/, named by {staged.record_key} when the stack deploys)"
        )
    if weights.source == "s3":
        return weights.s3_uri + (f", holding {held}" if checkpoint else "")
    if weights.source == "latest_approved":
        group = weights.model_package_group or "the stage's own group"
        return f"the newest approved model package of {group} (looked up at deploy time, again on each release)"
    if weights.source == "promoted":
        which = f"version {weights.version}" if weights.version else "the newest Approved version"
        return (
            f"{which} of {weights.from_stage}'s group, copied into this stage's models bucket ({bucket_layout.PROMOTED}"
            f"<group>/<version>/), checked file by file and registered in this stage's group when the stack deploys"
            + ("" if weights.version else ", looked up again on each release")
        )
    return f"model package {weights.model_package_arn} (read at deploy time)"


def describe_pipeline(config: PlatformConfig) -> list[str]:
    """The promotion pipeline: where it runs, what it watches, and the gates between stages."""
    promotion = config.pipeline
    source = promotion.source
    watched = (
        f"{source.repository}@{source.branch} (CodeConnections)"
        if source.repository
        else f"s3://{source.bucket}/{source.key}"
    )
    steps = []
    for name in config.stages:
        step = ("approval -> " if name in promotion.approval_before else "") + name
        step += f" ({config.stage_account(name)})" + (" + smoke test" if name in promotion.smoke_test_after else "")
        steps.append(step)
    lines = [
        f"Promotion pipeline {naming.promotion_pipeline(config.project)} in {promotion.account}, {promotion.region}",
        f"  source: {watched}; synth: make synth",
        f"  {' -> '.join(steps)}",
    ]
    if promotion.trigger_on_model_approval:
        groups = ", ".join(stage_promotion.approval_groups(config))
        lines.append(f"  also starts when a model version is approved in {groups}")
    for site in stage_promotion.promoted_sites(config):
        lines.append(f"  {site.stage} serves what {site.from_stage} approved, copied at deploy ({site.field})")
    return [*lines, ""]


def describe_patches(stage: StageConfig, today: datetime.date) -> list[str]:
    """A warning per image the stage runs that no longer gets patches (core/catalog/lifecycle.py)."""
    return [f"  warning: {line}" for line in lifecycle.warnings(stage, today)]


def render(config: PlatformConfig, assembly: Path, today: datetime.date | None = None) -> str:
    """`today`: the date the end-of-patch warnings are computed for (default: the system's)."""
    today = today or datetime.date.today()
    lines = [f"Plan for {config.project}: {len(config.stages)} stage(s), in promotion order", ""]
    if config.pipeline:
        pipeline_lines = describe_pipeline(config)
        for stack_name, template in app_stacks(assembly):
            pipeline_lines.insert(-1, f"  stack: {stack_name:<29} {resource_summary(template)}")
        lines += pipeline_lines
    for name, stage in config.stages.items():
        lines.append(describe_stage(name, stage, config.stage_account(name)))
        lines += describe_training(stage.training)
        lines += describe_serving(stage.serving)
        lines += describe_patches(stage, today)
        lines.append("  stacks:")
        for stack_name, template in stage_stacks(assembly, name):
            lines.append(f"    {stack_name:<32} {resource_summary(template)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assembly", type=Path, default=Path("cdk.out"), help="cloud assembly directory")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the config file that was synthesized")
    parser.add_argument("--stage", default=None, help="only this stage (as with `-c stage=...`)")
    parser.add_argument("--overlay", default="", help="comma-separated overlay files (as with `-c overlay=...`)")
    args = parser.parse_args()
    # Whatever fails is one message on stderr and exit status 2, as for app.py (DEBUG=1 adds the traceback).
    failures.exit_on_failure(lambda: _print_plan(args), program="generators.plan")


def _print_plan(args: argparse.Namespace) -> None:
    if not (args.assembly / "manifest.json").is_file():
        raise failures.Refused(f"{args.assembly}: no cloud assembly here; run `make synth` first")
    overlays = tuple(p for p in args.overlay.split(",") if p)
    config = load_config(args.config, only_stage=args.stage or None, overlays=overlays)
    try:
        print(render(config, args.assembly), end="")
    except AssemblyError as err:
        raise failures.Refused(str(err)) from None


if __name__ == "__main__":
    main()
