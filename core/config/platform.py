"""The whole file: the stages in promotion order, and the promotion pipeline."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from core.catalog.models import MODELS
from core.config import promotion
from core.config.fields import AccountId, ProjectName, Region, StageName, StrictModel, Tags
from core.config.lora_training import LoraConfig
from core.config.serving import ServingConfig
from core.config.training import TrainingConfig

# User tags per resource: at most 50 ("Maximum number of tags per resource - 50" in each service's tagging docs;
# `maxItems: 50` on Tags in the CloudFormation schemas of the resources here, which the CDK's template validation
# checks as rule F3032 after synth; tags starting with aws: do not count).
MAX_TAGS = 50


class SourceConfig(StrictModel):
    """Where the pipeline gets the repository: a CodeConnections connection (GitHub, GitLab, Bitbucket), or a zip
    in S3."""

    connection_arn: str | None = Field(
        default=None,
        pattern=r"^arn:aws[a-z-]*:(codestar-connections|codeconnections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]+$",
        description="a CodeConnections connection ARN (create and authorize it in the console once)",
    )
    repository: str | None = Field(default=None, pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    branch: str = Field(default="main", description="the branch whose commits are promoted")
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$", description="S3 source")
    key: str | None = Field(default=None, min_length=1, description="S3 source: the object key of a zip")

    @model_validator(mode="after")
    def _one_source(self) -> SourceConfig:
        connection = self.connection_arn is not None or self.repository is not None
        s3 = self.bucket is not None or self.key is not None
        if connection == s3:
            raise ValueError("give either connection_arn and repository, or bucket and key")
        if connection and (self.connection_arn is None or self.repository is None):
            raise ValueError("a connection source needs both connection_arn and repository")
        if s3 and (self.bucket is None or self.key is None):
            raise ValueError("an S3 source needs both bucket and key")
        return self


class PipelineConfig(StrictModel):
    """The promotion pipeline: where it runs, what it watches, and the gates between stages."""

    account: AccountId = Field(description="the tooling account the pipeline runs in")
    region: Region
    source: SourceConfig
    # The defaults follow the file's own stages (PlatformConfig fills them in): with dev, staging and prod, a person
    # approves prod and staging is smoke-tested; with dev and prod, prod and dev.
    approval_before: tuple[StageName, ...] = Field(
        default=(),
        description="stages a person approves before they are deployed; default: the last stage",
    )
    smoke_test_after: tuple[StageName, ...] = Field(
        default=(),
        description="stages whose endpoint is invoked, and pipeline checked, after deploying; default: the stage "
        "before the last, when there are two or more",
    )
    trigger_on_model_approval: bool = Field(
        default=True, description="start the pipeline when a model package of a stage in its account is approved"
    )


# ---------------------------------------------------------------------------------------------------------------
# The configuration.


class StageConfig(StrictModel):
    """One environment (dev, staging, prod): where it lives and how its data is treated."""

    account: AccountId | None = Field(
        default=None,
        description="AWS account id; absent = environment-agnostic (the CLI's credentials decide)",
    )
    region: Region = Field(description="AWS region, for example us-east-1")
    removal_policy: Literal["retain", "destroy"] = Field(
        default="retain",
        description="what happens to the data/model buckets and the KMS key when the stack is deleted: "
        "'retain' keeps them; 'destroy' deletes them and empties the buckets first (dev only)",
    )
    tags: Tags = Field(default_factory=dict, description="tags on every resource of this stage")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="the stage's fine-tuning pipeline")
    serving: ServingConfig = Field(default_factory=ServingConfig, description="the stage's inference endpoint")
    huggingface_token_secret: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9/_+=.@-]+$",
        description="name of a Secrets Manager secret the stage's storage stack creates, empty, for a Hugging Face "
        "read token: put the token with `aws secretsmanager put-secret-value --secret-id <name> --secret-string "
        "<token>`. Encrypted with the stage key; only the weights-staging jobs can read it. Required when the stage "
        "stages a gated model (Llama, Mistral)",
    )

    @model_validator(mode="before")
    @classmethod
    def _own_adapters_follow_training(cls, data: Any) -> Any:
        """Adapters from the stage's own registry take their rank from its LoRA training (lora_serving.py)."""
        return _fill_adapters_from_training(data)

    @model_validator(mode="after")
    def _gated_models_have_a_token(self) -> StageConfig:
        name = self.huggingface_token_secret
        if name is not None and re.search(r"-[A-Za-z0-9]{6}$", name):
            # Secrets Manager appends "-" and six random characters to a secret's name in its ARN; the stage key's
            # policy matches the ARN that way (StorageStack._huggingface_token), and Secrets Manager warns that such
            # names are ambiguous in partial-ARN lookups.
            raise ValueError(
                f"huggingface_token_secret {name!r} ends with a hyphen and six characters, which Secrets Manager "
                "appends to every secret's name in its ARN; end it otherwise, e.g. with /token"
            )
        if name is not None:
            return self
        staged = [("training.model", self.training.model)]
        if self.serving.staged_weights is not None:
            staged.append(("serving.model", self.serving.model))
        for field, name in staged:
            model = MODELS[name]
            if model.gated:
                raise ValueError(
                    f"{field}: {name} is gated on Hugging Face ({model.hf_id}: its owner grants access account by "
                    "account), so the job that stages it needs a token of an account with access; set "
                    "huggingface_token_secret to a secret name for this stage (e.g. <project>/<stage>/huggingface-"
                    "token): the stack creates it empty, and you put the token in it with aws secretsmanager "
                    "put-secret-value before running the staging pipeline"
                )
        return self


class PlatformConfig(StrictModel):
    """The whole file: the project's name, tags for everything, and the stages in promotion order."""

    project: ProjectName = Field(default="llm-platform", description="prefix of stack names")
    tags: Tags = Field(default_factory=dict, description="tags on every resource of every stage")
    stages: dict[StageName, StageConfig] = Field(description="environments, in promotion order")
    pipeline: PipelineConfig | None = Field(default=None, description="the promotion pipeline; absent: none")
    _every_stage: dict[str, StageConfig] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _pipeline_gates_follow_the_stages(cls, data: Any) -> Any:
        """approval_before and smoke_test_after, when the file leaves them out: the last stage, and the one before."""
        if not isinstance(data, dict) or not isinstance(data.get("stages"), dict) or not data["stages"]:
            return data
        names = tuple(data["stages"])
        defaults = {"approval_before": names[-1:], "smoke_test_after": names[-2:-1]}
        pipeline = data.get("pipeline")
        if isinstance(pipeline, dict):
            pipeline = {**defaults, **pipeline}
        elif isinstance(pipeline, PipelineConfig):
            unset = {name: value for name, value in defaults.items() if name not in pipeline.model_fields_set}
            pipeline = pipeline.model_copy(update=unset)
        return {**data, "pipeline": pipeline} if "pipeline" in data else data

    @model_validator(mode="before")
    @classmethod
    def _promoted_adapters_follow_their_training(cls, data: Any) -> Any:
        """Promoted adapters take their rank from the LoRA training that made them (core/config/promotion.py)."""
        if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
            return data
        return {**data, "stages": promotion.fill_promoted_adapters(data["stages"])}

    @model_validator(mode="after")
    def _check_promotions(self) -> PlatformConfig:
        promotion.check(self)
        return self

    @model_validator(mode="after")
    def _check_stages(self) -> PlatformConfig:
        if not self.stages:
            raise ValueError("stages: at least one stage is required")
        for name, stage in self.stages.items():
            tags = self.stage_tags(name)
            if len(tags) > MAX_TAGS:
                field = f"stages.{name}.tags" if stage.tags else "tags"
                raise ValueError(
                    f"{field}: stage {name} would put {len(tags)} tags on every resource (project and stage, "
                    f"{len(self.tags)} from tags, {len(stage.tags)} from stages.{name}.tags, a later key replacing an "
                    f"earlier one); CloudFormation and AWS resources take at most {MAX_TAGS}: remove "
                    f"{len(tags) - MAX_TAGS}"
                )
        if self.stages.get("prod") and self.stages["prod"].removal_policy != "retain":
            raise ValueError(
                "stages.prod.removal_policy: 'destroy' would delete production data and keys with the stack; "
                "prod must use 'retain'"
            )
        if self.pipeline:
            for field in ("approval_before", "smoke_test_after"):
                unknown = [name for name in getattr(self.pipeline, field) if name not in self.stages]
                if unknown:
                    raise ValueError(
                        f"pipeline.{field}: no stage named {', '.join(unknown)}; stages: {', '.join(self.stages)}"
                    )
            for name in self.pipeline.smoke_test_after:
                self._check_smoke_testable(name)
        return self

    def _check_smoke_testable(self, name: str) -> None:
        """A component that may scale to zero copies cannot be smoke-tested: if it is at zero when the test runs (an
        idle component the deploy did not change), its request fails with a no-capacity error until a scale-out that
        the failure itself starts, after an alarm minute, a new instance and the weights' load (many minutes; the plan
        prints the estimate). Refused here rather than waited for with a guessed bound."""
        sleeping = [c for c in self.stages[name].serving.components if c.min_copies == 0]
        if sleeping:
            listed = ", ".join(f"{c.name} (min_copies 0)" for c in sleeping)
            raise ValueError(
                f"pipeline.smoke_test_after: stage {name} serves components that may scale to zero copies: {listed}; "
                "a request to a component with no copy fails with a no-capacity error until it scales out again, "
                f"minutes later, so the smoke test after deploying {name} would fail. Set their min_copies to 1 or "
                f"more in stages.{name}.serving.components, or remove {name} from pipeline.smoke_test_after"
            )

    @property
    def every_stage(self) -> dict[str, StageConfig]:
        """Every stage of the file, also when only one is kept (load_config's only_stage): what a stage promotes from,
        and who promotes from it, are facts of the others."""
        return self._every_stage or self.stages

    def keep_only(self, stage: str) -> PlatformConfig:
        """This config with just `stage` deployed, the others still known (every_stage)."""
        kept = self.model_copy(update={"stages": {stage: self.stages[stage]}})
        kept._every_stage = self.every_stage
        return kept

    def stage_account(self, stage: str) -> str | None:
        """The stage's account; a stage without one deploys into the pipeline's account when there is one."""
        return self.every_stage[stage].account or (self.pipeline.account if self.pipeline else None)

    def stage_tags(self, stage: str) -> dict[str, str]:
        """Tags for one stage: the project's, then the file's, then the stage's own (later wins)."""
        return {"project": self.project, "stage": stage, **self.tags, **self.stages[stage].tags}


def _fill_adapters_from_training(stage: Any) -> Any:
    """Before a stage validates: the stage's own adapters (approved packages of its group) take their rank and
    target modules from the stage's LoRA training, and are refused when that training makes no adapter of the
    component's model. Works on the file's mapping; anything unexpected is left to validation."""
    if not isinstance(stage, dict) or not isinstance(stage.get("serving"), dict):
        return stage
    serving = stage["serving"]
    components = serving.get("components")
    if not isinstance(components, (list, tuple)):
        return stage

    training = stage.get("training") if isinstance(stage.get("training"), dict) else {}
    method = training.get("method", TrainingConfig.model_fields["method"].default)
    trained = training.get("model", TrainingConfig.model_fields["model"].default)
    lora = training.get("lora") if isinstance(training.get("lora"), dict) else {}
    filled = []
    for component in components:
        if not isinstance(component, dict) or not isinstance(component.get("adapters"), (list, tuple)):
            filled.append(component)
            continue
        served = component.get("model", serving.get("model", ServingConfig.model_fields["model"].default))
        adapters = []
        for adapter in component["adapters"]:
            weights = adapter.get("weights", {}) if isinstance(adapter, dict) else None
            own = isinstance(weights, dict) and weights.get("source", "latest_approved") == "latest_approved"
            if not own or "model_package_group" in weights:
                adapters.append(adapter)
                continue
            name = f"component {component.get('name')}: adapter {adapter.get('name')}"
            if method not in ("lora", "qlora"):
                raise ValueError(
                    f"{name}: weights source latest_approved reads the stage's own model package group, where "
                    f"training.method {method} registers whole fine-tuned models, not adapters: set training.method "
                    "lora or qlora, or name another source (model_package_group, model_package_arn or s3_uri)"
                )
            if trained != served:
                raise ValueError(
                    f"{name}: the stage's training adapts {trained}, and its adapters can only be served over that "
                    f"model; the component serves {served}. Set the component's model to {trained}"
                )
            adapter = dict(adapter)
            adapter.setdefault("rank", lora.get("r", LoraConfig.model_fields["r"].default))
            if lora.get("target_modules") is not None:
                adapter.setdefault("target_modules", lora["target_modules"])
            adapters.append(adapter)
        filled.append({**component, "adapters": type(component["adapters"])(adapters)})
    # Sequences keep their type: the file's are tuples, which strict validation expects.
    return {**stage, "serving": {**serving, "components": type(components)(filled)}}
