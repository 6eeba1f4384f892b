"""The config file: valid files load into typed models; every invalid value fails with file, field path and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from core.config import DEFAULT_CONFIG, ConfigError, InstanceTypeName, load_config

VALID = """
project: llm-platform
stages:
  dev:
    region: us-east-1
    removal_policy: destroy
  prod:
    account: "123456789012"
    region: eu-west-1
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text(text)
    return path


def test_default_config_loads_three_stages_in_promotion_order():
    config = load_config(DEFAULT_CONFIG)
    assert list(config.stages) == ["dev", "staging", "prod"]
    assert config.stages["prod"].removal_policy == "retain"


def test_valid_file_loads_typed_values(tmp_path):
    config = load_config(write(tmp_path, VALID))
    assert config.stages["dev"].account is None
    assert config.stages["prod"].account == "123456789012"
    assert config.stages["prod"].removal_policy == "retain"  # the secure default


def test_one_stage_can_be_selected(tmp_path):
    config = load_config(write(tmp_path, VALID), only_stage="prod")
    assert list(config.stages) == ["prod"]


def test_selecting_an_unknown_stage_lists_the_stages(tmp_path):
    with pytest.raises(ConfigError, match=r"no stage named 'qa'; stages: dev, prod"):
        load_config(write(tmp_path, VALID), only_stage="qa")


def test_stage_tags_layer_project_file_and_stage(tmp_path):
    text = VALID.replace("project: llm-platform", "project: llm-platform\ntags: {team: ml, stage: x}")
    text = text.replace("removal_policy: destroy", "removal_policy: destroy\n    tags: {team: ml-dev}")
    config = load_config(write(tmp_path, text))
    assert config.stage_tags("dev") == {"project": "llm-platform", "stage": "x", "team": "ml-dev"}


# Each row: (what is wrong, YAML text, the field path in the message, a fragment of the explanation).
INVALID = [
    ("unknown top-level key", VALID.replace("stages:", "stagez:"), "stagez", "did you mean 'stages'"),
    ("unknown stage key", VALID.replace("region: us-east-1", "regoin: us-east-1"), "stages.dev.regoin", "did you mean 'region'"),
    ("bad region", VALID.replace("us-east-1", "us-east-9"), "stages.dev.region", "not an AWS region; did you mean us-east-2 or us-east-1"),
    ("region missing", VALID.replace("    region: us-east-1\n", ""), "stages.dev.region", "required key is missing"),
    ("short account id", VALID.replace('"123456789012"', '"12345"'), "stages.prod.account", "exactly 12 digits"),
    ("unquoted account id", VALID.replace('"123456789012"', "123456789012"), "stages.prod.account", "quoted string"),
    ("bad stage name", VALID.replace("  dev:", "  Dev_1:"), "stages.Dev_1", "stage names are lowercase"),
    ("stage name too long", VALID.replace("  dev:", "  " + "d" * 21 + ":"), "stages.ddd", "at most 20 characters"),
    ("bad project name", VALID.replace("project: llm-platform", "project: LLM"), "project", "project names are lowercase"),
    ("bad removal policy", VALID.replace("removal_policy: destroy", "removal_policy: delete"), "stages.dev.removal_policy", "'retain' or 'destroy'"),
    ("prod destroys data", VALID.replace('region: eu-west-1', "region: eu-west-1\n    removal_policy: destroy"), "stages.prod.removal_policy", "prod must use 'retain'"),
    ("no stages", "stages: {}\n", "stages", "at least one stage"),
    ("reserved tag key", VALID.replace("stages:", "tags: {'aws:team': x}\nstages:"), "tags.aws:team", "reserved by AWS"),
    ("bad tag value", VALID.replace("stages:", "tags: {team: 'a|b'}\nstages:"), "tags.team", "tag values"),
    ("tags not a mapping", VALID.replace("stages:", "tags: [a, b]\nstages:"), "tags", "valid dictionary"),
    ("pipeline without an account", VALID + "pipeline: {region: us-east-1, source: {bucket: b-src, key: src.zip}}\n", "pipeline.account", "required key is missing"),
    ("pipeline with two sources", VALID + "pipeline: {account: '111111111111', region: us-east-1, source: {bucket: b-src, key: src.zip, repository: a/b}}\n",
     "pipeline.source", "give either connection_arn and repository, or bucket and key"),
    ("pipeline connection without repository", VALID + "pipeline: {account: '111111111111', region: us-east-1, source: {connection_arn: 'arn:aws:codeconnections:us-east-1:111111111111:connection/abc-1'}}\n",
     "pipeline.source", "needs both connection_arn and repository"),
    ("approval before an unknown stage", VALID + "pipeline: {account: '111111111111', region: us-east-1, source: {bucket: b-src, key: src.zip}, approval_before: [production]}\n",
     "pipeline.approval_before", "no stage named production"),
    ("bad connection ARN", VALID + "pipeline: {account: '111111111111', region: us-east-1, source: {connection_arn: 'arn:aws:s3:::x', repository: a/b}}\n",
     "pipeline.source.connection_arn", "should match pattern"),
    ("not YAML", "stages: [unclosed\n", "platform.yaml", "not valid YAML"),
    ("not a mapping", "- dev\n- prod\n", "platform.yaml", "expected a mapping at the top"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("case", "text", "field", "explanation"), INVALID, ids=[row[0] for row in INVALID])
def test_rejects_invalid_config_naming_file_and_field(tmp_path, case, text, field, explanation):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    message = str(err.value)
    assert str(tmp_path / "platform.yaml") in message
    assert field in message, message
    assert explanation in message, message


def test_reports_every_problem_at_once(tmp_path):
    text = VALID.replace("us-east-1", "us-east-9").replace('"123456789012"', '"1"')
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert "stages.dev.region" in str(err.value) and "stages.prod.account" in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_instance_type_names_are_checked_against_the_catalog():
    adapter = TypeAdapter(InstanceTypeName)
    assert adapter.validate_python("ml.p4d.24xlarge") == "ml.p4d.24xlarge"
    with pytest.raises(ValidationError, match=r"not a supported GPU instance type; did you mean ml\.g5\.2xlarge"):
        adapter.validate_python("ml.g5.2xlarg")
    with pytest.raises(ValidationError, match=r"supported: ml\.p3\.16xlarge"):
        adapter.validate_python("ml.m5.large")


def test_overlays_merge_over_the_config_and_are_named_in_errors(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("stages:\n  dev:\n    serving: {instance_type: ml.g4dn.xlarge, max_batch_size: 1}\n")
    config = load_config(write(tmp_path, VALID), overlays=(overlay,))
    assert config.stages["dev"].serving.instance_type == "ml.g4dn.xlarge"
    assert config.stages["dev"].removal_policy == "destroy"  # untouched keys stay
    assert config.stages["prod"].region == "eu-west-1"
    overlay.write_text("stages:\n  dev:\n    serving: {instance_type: ml.g4dn.xlarge}\n")  # GPT-J with 4 sequences
    with pytest.raises(
        ConfigError, match=r"(?s)\+ overlay .*overlay\.yaml: invalid configuration:.*does not fit ml\.g4dn\.xlarge"
    ):
        load_config(write(tmp_path, VALID), overlays=(overlay,))
