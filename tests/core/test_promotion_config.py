"""Weights source 'promoted': what a config may ask, and the refusals at synth that name the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import ConfigError, load_config
from core.config.promotion import approval_groups, origin, promoted_into, promotes, sources_of

REPO = Path(__file__).resolve().parents[2]
PROMOTION = REPO / "config" / "examples" / "promotion.yaml"

# dev trains (GPT-J, full fine-tune); staging serves dev's approved version, prod staging's copy of it.
CHAIN = """
project: llm-platform
stages:
  dev:
    account: "222222222222"
    region: us-east-1
    removal_policy: destroy
  staging:
    account: "333333333333"
    region: us-east-1
    serving: {weights: {source: promoted, from_stage: dev}}
  prod:
    account: "444444444444"
    region: us-east-1
    serving: {weights: {source: promoted, from_stage: staging, version: 3}}
"""

LORA_SOURCE = """
project: llamalora
stages:
  dev:
    region: us-east-1
    removal_policy: destroy
    huggingface_token_secret: llamalora/dev/huggingface-token
    training: {model: llama-3.1-8b, method: lora, lora: {r: 32, alpha: 64}, instance_type: ml.g5.2xlarge,
               precision: bf16, train_batch_size: 1, val_batch_size: 2, sequence_length: 1024}
  staging:
    region: us-east-1
    huggingface_token_secret: llamalora/staging/huggingface-token
    serving:
      engine: vllm
      model: llama-3.1-8b
      dtype: bf16
      instance_type: ml.g5.2xlarge
      context_tokens: 8192
      max_batch_size: 4
      components:
        - name: base
          adapters:
            - name: tuned
              weights: {source: promoted, from_stage: dev}
"""


# dev fine-tunes GPT-J whole (the default training); staging asks it for an adapter.
ADAPTER_FROM_GPTJ = LORA_SOURCE.replace(
    "    training: {model: llama-3.1-8b, method: lora, lora: {r: 32, alpha: 64}, instance_type: ml.g5.2xlarge,\n"
    "               precision: bf16, train_batch_size: 1, val_batch_size: 2, sequence_length: 1024}\n",
    "",
).replace("- name: tuned\n", "- name: tuned\n              rank: 16\n")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text(text)
    return path


def test_the_example_promotes_dev_to_staging_to_prod():
    config = load_config(PROMOTION)
    assert sources_of(config, "staging")["dev"].account == "222222222222"
    assert sources_of(config, "prod")["staging"].group == "llm-platform-staging"
    assert promoted_into(config, "dev") == {"staging": "333333333333"}
    assert origin(config, "staging", None) == "dev" and origin(config, "prod", None) == "dev"
    assert not promotes(config, "dev") and promotes(config, "prod")
    # Approvals start a release only where versions are made: the copies are registered Approved by the release.
    assert approval_groups(config) == ["llm-platform-dev"]


def test_a_pinned_version_is_kept(tmp_path):
    weights = load_config(write(tmp_path, CHAIN)).stages["prod"].serving.weights
    assert (weights.source, weights.from_stage, weights.version) == ("promoted", "staging", 3)


def test_promoted_adapters_take_their_rank_from_the_training_that_made_them(tmp_path):
    config = load_config(write(tmp_path, LORA_SOURCE))
    adapter = config.stages["staging"].serving.components[0].adapters[0]
    assert adapter.rank == 32
    assert origin(config, "staging", "tuned") == "dev"


def test_configs_without_promotion_promote_nothing():
    config = load_config(REPO / "config" / "default.yaml")
    assert not any(promotes(config, name) for name in config.stages)
    assert approval_groups(config) == [f"llm-platform-{name}" for name in config.stages]


INVALID = [
    ("unknown stage", CHAIN.replace("from_stage: dev", "from_stage: qa"),
     "stages.staging.serving.weights.from_stage", "no stage named qa"),
    ("itself", CHAIN.replace("from_stage: dev", "from_stage: staging"),
     "stages.staging.serving.weights", "cannot promote from itself"),
    ("a later stage", CHAIN.replace("from_stage: dev", "from_stage: prod"),
     "stages.staging.serving.weights.from_stage", "comes after staging"),
    ("another partition", CHAIN.replace("    region: us-east-1\n    serving: {weights: {source: promoted, from_stage: dev}}",
                                        "    region: cn-north-1\n    serving: {weights: {source: promoted, from_stage: dev}}"),
     "stages.staging.serving.weights", "promote between stages of one partition"),
    ("a region without the image", CHAIN.replace("    region: us-east-1\n    serving: {weights: {source: promoted, from_stage: dev}}",
                                                 "    region: ap-east-2\n    serving: {weights: {source: promoted, from_stage: dev}}"),
     "stages.staging.serving.weights", "registered for the deepspeed image, which has none in ap-east-2"),
    ("one account unknown", CHAIN.replace('    account: "222222222222"\n', ""),
     "stages.staging.serving.weights", "give both stages an account, or neither"),
    ("no from_stage", CHAIN.replace("{source: promoted, from_stage: dev}", "{source: promoted}"),
     "stages.staging.serving.weights", "source 'promoted' needs from_stage"),
    ("version without promotion", CHAIN.replace("{source: promoted, from_stage: dev}",
                                                "{source: latest_approved, version: 2}"),
     "stages.staging.serving.weights", "version is only used with source 'promoted'"),
    ("version zero", CHAIN.replace("version: 3", "version: 0"),
     "stages.prod.serving.weights.version", "greater than or equal to 1"),
    ("whole model from adapter training", CHAIN.replace(
        "    removal_policy: destroy\n",
        "    removal_policy: destroy\n    huggingface_token_secret: x/token\n"
        "    training: {model: llama-3.1-8b, method: lora, instance_type: ml.g5.2xlarge, precision: bf16,\n"
        "               train_batch_size: 1, val_batch_size: 2, sequence_length: 1024}\n", 1),
     "stages.staging.serving.weights", "registers lora versions"),
    ("adapter from full training", ADAPTER_FROM_GPTJ,
     "stages.staging.serving.components[0].adapters.tuned.weights", "registers full versions"),
    ("another model", LORA_SOURCE.replace("model: llama-3.1-8b, method: lora", "model: mistral-7b-v0.3, method: lora"),
     "stages.staging.serving.components[0].adapters.tuned.weights", "serve mistral-7b-v0.3 here"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("case", "text", "field", "explanation"), INVALID, ids=[row[0] for row in INVALID])
def test_refuses_a_promotion_that_cannot_deploy(tmp_path, case, text, field, explanation):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    message = str(err.value)
    assert field in message, message
    assert explanation in message, message


def test_deploying_one_stage_keeps_what_the_others_say_about_it():
    # make deploy STAGE=dev must keep dev's grants to staging; STAGE=staging must still find dev.
    dev = load_config(PROMOTION, only_stage="dev")
    assert list(dev.stages) == ["dev"] and promoted_into(dev, "dev") == {"staging": "333333333333"}
    staging = load_config(PROMOTION, only_stage="staging")
    assert list(staging.stages) == ["staging"]
    assert sources_of(staging, "staging")["dev"].account == "222222222222"
    assert origin(staging, "staging", None) == "dev"
