"""Rules across stages for weights source 'promoted': a stage serves a version approved in an earlier stage.

The version is copied into the serving stage's own bucket when it deploys (infrastructure/constructs/
promoted_weights.py), so what the rules check at synth is that the copy can exist and can be served: the source stage
deploys first, is another stage, registers the kind of package asked for (whole fine-tuned models or adapters) of the
model served, in the same partition, with the serving image available in the serving stage's region.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.catalog import images
from core.config.fields import aws_regions
from core.config.lora_training import LoraConfig
from core.config.training import TrainingConfig
from core.naming import StageNames

if TYPE_CHECKING:
    from core.config.platform import PlatformConfig, StageConfig

ADAPTER_METHODS = ("lora", "qlora")


@dataclass(frozen=True)
class PromotedSite:
    """One place of a stage's serving config whose weights are promoted."""

    stage: str
    field: str  # where in the file, for messages: stages.prod.serving.weights
    from_stage: str
    model: str  # what the site serves (an adapter: its component's base)
    adapter: str | None  # the adapter's name; None for whole-model weights


def promoted_sites(config: PlatformConfig) -> Iterator[PromotedSite]:
    """Every weights source 'promoted' of the config, in stage order."""
    for name, stage in config.stages.items():
        yield from _stage_sites(name, stage)


def _stage_sites(name: str, stage: StageConfig) -> Iterator[PromotedSite]:
    serving = stage.serving
    field = f"stages.{name}.serving"
    if serving.weights.source == "promoted":
        yield PromotedSite(name, f"{field}.weights", serving.weights.from_stage, serving.model, None)
    for index, component in enumerate(serving.components):
        where = f"{field}.components[{index}]"
        model = component.model or serving.model
        if component.weights is not None and component.weights.source == "promoted":
            yield PromotedSite(name, f"{where}.weights", component.weights.from_stage, model, None)
        for adapter in component.adapters:
            if adapter.weights.source == "promoted":
                yield PromotedSite(
                    name, f"{where}.adapters.{adapter.name}.weights", adapter.weights.from_stage, model, adapter.name
                )


def promotes(config: PlatformConfig, stage: str) -> bool:
    """Whether any weights the stage serves are promoted from another stage."""
    return any(True for _ in _stage_sites(stage, config.stages[stage]))


def check(config: PlatformConfig) -> None:
    """Refuse, with the reason and the fix, a promotion that cannot be deployed as written."""
    order = list(config.stages)
    for site in promoted_sites(config):
        source = site.from_stage
        if source not in config.stages:
            raise ValueError(f"{site.field}.from_stage: no stage named {source}; stages: {', '.join(order)}")
        if source == site.stage:
            raise ValueError(
                f"{site.field}: stage {site.stage} cannot promote from itself; to serve its own approved versions "
                "use {source: latest_approved}"
            )
        if order.index(source) > order.index(site.stage):
            raise ValueError(
                f"{site.field}.from_stage: {source} comes after {site.stage} in stages, and stages deploy in that "
                f"order, so {site.stage} would look for an approved version in a stage not deployed yet; promote "
                f"from an earlier stage, or move {source} before {site.stage}"
            )
        _check_accounts(config, site)
        _check_same_partition(config, site)
        _check_origin(config, site)
        _check_image_in_region(config, site)


def origin(config: PlatformConfig, stage: str, adapter: str | None) -> str:
    """The stage whose fine-tuning made what `stage` registers for a site of this kind: `stage` itself, or, when it
    serves such weights promoted in turn (dev -> staging -> prod), the origin of its own source."""
    seen = {stage}
    while True:
        weights = _site_weights(config.every_stage[stage], adapter)
        if weights is None or weights.source != "promoted" or weights.from_stage not in config.every_stage:
            return stage
        stage = weights.from_stage
        if stage in seen:  # refused by check(): a stage before itself
            return stage
        seen.add(stage)


def _site_weights(stage: StageConfig, adapter: str | None) -> Any:
    """The stage's weights of the same kind: its endpoint's weights, or its adapter of that name."""
    if adapter is None:
        return stage.serving.weights
    for component in stage.serving.components:
        for each in component.adapters:
            if each.name == adapter:
                return each.weights
    return None


def _check_origin(config: PlatformConfig, site: PromotedSite) -> None:
    name = origin(config, site.from_stage, site.adapter)
    training = config.every_stage[name].training
    wanted = "adapters (training.method lora or qlora)" if site.adapter else "whole models (training.method full)"
    makes = training.method in ADAPTER_METHODS if site.adapter else training.method == "full"
    if not makes:
        raise ValueError(
            f"{site.field}: stage {name}'s fine-tuning registers {training.method} versions of {training.model}, "
            f"and this site serves {wanted}; promote from a stage whose training.method makes them, or change the "
            "site's weights source"
        )
    if training.model != site.model:
        raise ValueError(
            f"{site.field}: stage {name} fine-tunes {training.model}, and this site serves {site.model}; a promoted "
            f"version is served over the model it was trained from: serve {training.model} here"
        )


def _check_accounts(config: PlatformConfig, site: PromotedSite) -> None:
    """The source grants the promoting stage's role by its account: both accounts are known, or both stages deploy
    into the one account the credentials name."""
    target, source = config.stage_account(site.stage), config.stage_account(site.from_stage)
    if (target is None) != (source is None):
        raise ValueError(
            f"{site.field}: {site.from_stage} has {'no account' if source is None else 'account ' + source} and "
            f"{site.stage} {'no account' if target is None else 'account ' + target}; the source stage grants the "
            "promoting stage's role by its account, so give both stages an account, or neither (one account)"
        )


def _check_same_partition(config: PlatformConfig, site: PromotedSite) -> None:
    target, source = config.every_stage[site.stage].region, config.every_stage[site.from_stage].region
    partition_of = aws_regions().get
    if partition_of(target) != partition_of(source):
        raise ValueError(
            f"{site.field}: {site.from_stage} is in {source} ({partition_of(source)}) and {site.stage} in {target} "
            f"({partition_of(target)}); no role of one partition can read the other's buckets, so the version cannot "
            "be copied: promote between stages of one partition"
        )


def _check_image_in_region(config: PlatformConfig, site: PromotedSite) -> None:
    """The promoted package names the serving image of the stage it is copied into; the engine the source's packages
    were registered for must have one in that region too, or the copy could not be served there."""
    target = config.every_stage[site.stage]
    engine = config.every_stage[origin(config, site.from_stage, site.adapter)].serving.engine
    try:
        images.serving_image(target.region, engine)
    except ValueError as error:
        raise ValueError(
            f"{site.field}: the versions of {site.from_stage} were registered for the {engine} image, which has none "
            f"in {target.region} ({error}); promote into a stage in a region that has it"
        ) from None


def fill_promoted_adapters(stages: Mapping[str, Any]) -> Mapping[str, Any]:
    """Before the stages validate: a promoted adapter takes its rank and target modules from the LoRA training of
    the stage that made it, as the stage's own adapters take them from its own. Works on the file's mappings;
    anything unexpected is left to validation."""
    filled = {}
    for name, stage in stages.items():
        filled[name] = _fill_stage(stages, stage)
    return filled


def _fill_stage(stages: Mapping[str, Any], stage: Any) -> Any:
    serving = stage.get("serving") if isinstance(stage, dict) else None
    components = serving.get("components") if isinstance(serving, dict) else None
    if not isinstance(components, (list, tuple)):
        return stage
    new_components = []
    for component in components:
        adapters = component.get("adapters") if isinstance(component, dict) else None
        if not isinstance(adapters, (list, tuple)):
            new_components.append(component)
            continue
        new_adapters = type(adapters)(_fill_adapter(stages, adapter) for adapter in adapters)
        new_components.append({**component, "adapters": new_adapters})
    # Sequences keep their type: the file's are tuples, which strict validation expects.
    return {**stage, "serving": {**serving, "components": type(components)(new_components)}}


def _fill_adapter(stages: Mapping[str, Any], adapter: Any) -> Any:
    weights = adapter.get("weights") if isinstance(adapter, dict) else None
    if not isinstance(weights, dict) or weights.get("source") != "promoted":
        return adapter
    lora = _origin_lora(stages, weights.get("from_stage"), adapter.get("name"), set())
    if lora is None:
        return adapter
    filled = dict(adapter)
    filled.setdefault("rank", lora.get("r", LoraConfig.model_fields["r"].default))
    if lora.get("target_modules") is not None:
        filled.setdefault("target_modules", lora["target_modules"])
    return filled


def _origin_lora(stages: Mapping[str, Any], name: Any, adapter: Any, seen: set) -> dict | None:
    """training.lora of the stage that made the adapter (following promoted adapters of the same name); None when
    the file does not say (validation reports what is wrong)."""
    stage = stages.get(name) if isinstance(name, str) and name not in seen else None
    if not isinstance(stage, dict):
        return None
    seen.add(name)
    for component in (stage.get("serving") or {}).get("components") or ():
        for each in (component.get("adapters") or ()) if isinstance(component, dict) else ():
            weights = each.get("weights") if isinstance(each, dict) else None
            if each.get("name") == adapter and isinstance(weights, dict) and weights.get("source") == "promoted":
                return _origin_lora(stages, weights.get("from_stage"), adapter, seen)
    training = stage.get("training") if isinstance(stage.get("training"), dict) else {}
    method = training.get("method", TrainingConfig.model_fields["method"].default)
    if method not in ADAPTER_METHODS:
        return None
    return training.get("lora") if isinstance(training.get("lora"), dict) else {}


@dataclass(frozen=True)
class PromotionSource:
    """Where a stage's promoted versions come from: the source stage's account (None: the same account as the
    stage promoting, both environment-agnostic), region and model package group."""

    stage: str
    account: str | None
    region: str
    group: str


def sources_of(config: PlatformConfig, stage: str) -> dict[str, PromotionSource]:
    """The stages `stage` promotes from, by name."""
    return {
        site.from_stage: PromotionSource(
            stage=site.from_stage,
            account=config.stage_account(site.from_stage),
            region=config.every_stage[site.from_stage].region,
            group=StageNames(config.project, site.from_stage).model_package_group,
        )
        for site in _stage_sites(stage, config.stages[stage])
    }


def promoted_into(config: PlatformConfig, source: str) -> dict[str, str | None]:
    """The stages of the file that promote from `source`, with their accounts (None: environment-agnostic), in stage
    order; also when only `source` is deployed, so that its grants stay."""
    every = (site for name, stage in config.every_stage.items() for site in _stage_sites(name, stage))
    return {site.stage: config.stage_account(site.stage) for site in every if site.from_stage == source}


def approval_groups(config: PlatformConfig) -> list[str]:
    """The model package groups whose approvals start a release: those of the stages that do not promote. A
    promoting stage's versions are copies the release itself registers, Approved, which must not start another."""
    origins = [name for name in config.stages if not promotes(config, name)]
    return [StageNames(config.project, name).model_package_group for name in origins]
