"""Reading the config file: what YAML itself lets slip (duplicate keys, aliases, YAML 1.1's readings, coercions),
files that are not config files, defaults that follow the file's own stages, and messages that never echo the input."""

from __future__ import annotations

import pathlib
from pathlib import Path

import pytest

from core.config import ConfigError, load_config
from generators.plan import describe_pipeline
from tests.cdk_assembly import REPO

STAGES = """
stages:
  dev:
    region: us-east-1
    removal_policy: destroy
"""
PIPELINE = """
pipeline:
  account: "111111111111"
  region: us-east-1
  source: {bucket: b-src, key: src.zip}
"""


def write(tmp_path: Path, text: str, name: str = "platform.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def dev_with(block: str) -> str:
    """A one-stage config whose dev stage also has `block` (YAML indented for the stage's keys)."""
    return STAGES + "".join(f"    {line}\n" for line in block.strip("\n").splitlines())


def tags(count: int, prefix: str = "t", indent: str = "  ") -> str:
    return "".join(f"{indent}{prefix}{i}: v{i}\n" for i in range(count))


# Five levels of nine: 59,049 values from 50 lines, echoed whole by the error on the region.
ALIAS_BOMB = (
    'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(4))
    + "stages:\n  dev:\n    region: *e\n"
)

# Each row: (what is wrong, YAML text, the field path in the message, fragments of the explanation).
INVALID = [
    # Duplicate keys: PyYAML keeps the last silently.
    ("duplicate stage", STAGES + "  dev:\n    region: us-west-2\n", "stages.dev", ["duplicate key", "lines 3 and 6"]),
    ("duplicate top-level key", "project: a-b\nproject: c-d\n" + STAGES, "project", ["duplicate key", "lines 1 and 2"]),
    ("duplicate nested key", dev_with("serving:\n  model: gpt-j-6b\n  model: opt-30b"), "stages.dev.serving.model",
     ["duplicate key", "lines 7 and 8"]),
    ("duplicate key in a flow mapping", dev_with("tags: {team: a, team: b}"), "stages.dev.tags.team",
     ["duplicate key", "twice on line 6"]),
    # YAML's hostile features.
    ("alias bomb", ALIAS_BOMB, "platform.yaml", ["aliases", "more than 10000 values"]),
    ("recursive alias", STAGES + "tags: &t {a: *t}\n", "tags", ["alias", "inside itself"]),
    ("deep nesting", STAGES + "tags: " + "[" * 100 + "]" * 100 + "\n", "platform.yaml", ["nested more than", "line 6"]),
    ("YAML tag", dev_with("tags: {key: !!binary aGVsbG8=}"), "stages.dev.tags.key", ["!!binary", "not accepted"]),
    ("two documents", STAGES + "---\n" + STAGES, "platform.yaml", ["not valid YAML", "single document"]),
    # YAML 1.1's readings that YAML 1.2 and other tools do not share.
    ("yes as a number", dev_with("training: {instance_count: yes}"), "stages.dev.training.instance_count",
     ["'yes' is true in YAML 1.1 but the text 'yes' in YAML 1.2", "line 6"]),
    ("on as a boolean", dev_with("training: {spot: {enabled: on}}"), "stages.dev.training.spot.enabled",
     ["'on' is true in YAML 1.1", "write true or false"]),
    ("octal number", dev_with("training: {volume_size_gib: 0777}"), "stages.dev.training.volume_size_gib",
     ["'0777'", "leading zero"]),
    ("date", dev_with("tags: {created: 2024-01-31}"), "stages.dev.tags.created", ["a date in YAML 1.1", "quote it"]),
    ("sexagesimal", dev_with("training: {max_steps: 1:30}"), "stages.dev.training.max_steps", ["90 in YAML 1.1"]),
    ("underscored number", dev_with("training: {max_steps: 1_000}"), "stages.dev.training.max_steps",
     ["1000 in YAML 1.1"]),
    ("leading-zero account", dev_with("account: 012345678901"), "stages.dev.account", ["leading zero", "quote it"]),
    # No coercion between YAML's types.
    ("boolean for a number", dev_with("training: {instance_count: true}"), "stages.dev.training.instance_count",
     ["valid integer", "got true"]),
    ("float for a whole number", dev_with("training: {instance_count: 2.0}"), "stages.dev.training.instance_count",
     ["valid integer", "got 2.0"]),
    ("text for a number", dev_with("training: {instance_count: '2'}"), "stages.dev.training.instance_count",
     ["valid integer", "got the text '2'", "without quotes"]),
    ("text for a float", dev_with("training: {learning_rate: '0.1'}"), "stages.dev.training.learning_rate",
     ["valid number", "got the text '0.1'"]),
    ("number for the project", "project: 123\n" + STAGES, "project", ["valid string", "got 123", "quote it"]),
    ("number for a tag value", dev_with("tags: {team: 5}"), "stages.dev.tags.team", ["valid string", "got 5"]),
    ("number for a region", STAGES.replace("us-east-1", "1"), "stages.dev.region", ["valid string", "got 1"]),
    ("boolean for a choice of numbers", dev_with("training: {smp: {version: true}}"), "stages.dev.training.smp.version",
     ["exactly one of 1, 2", "got true"]),
    ("float for a choice of numbers", dev_with("training: {smp: {version: 1.0}}"), "stages.dev.training.smp.version",
     ["exactly one of 1, 2", "got 1.0"]),
    ("text for a boolean", dev_with("training: {spot: {enabled: 'true'}}"), "stages.dev.training.spot.enabled",
     ["valid boolean", "got the text 'true'"]),
    ("infinite number", dev_with("training: {learning_rate: .inf}"), "stages.dev.training.learning_rate",
     ["finite number"]),
    ("not a number", dev_with("training: {perplexity_threshold: .nan}"), "stages.dev.training.perplexity_threshold",
     ["finite number"]),
    ("number for an e-mail in a list", dev_with("serving: {alarms: {emails: [a@example.com, 7]}}"),
     "stages.dev.serving.alarms.emails.1", ["valid string", "got 7"]),
    # Defaults that follow the stages; an explicit stage that does not exist still fails, with its field.
    ("smoke test after a missing stage", STAGES + PIPELINE + "  smoke_test_after: [staging]\n",
     "pipeline.smoke_test_after", ["no stage named staging"]),
    # CloudFormation and most AWS resources take at most 50 user tags.
    ("51 tags in the file", "tags:\n" + tags(49) + STAGES, "tags", ["51 tags", "at most 50"]),
    ("51 tags with the stage's", "tags:\n" + tags(30) + dev_with("tags:\n" + tags(19, "s")), "stages.dev.tags",
     ["51 tags", "30 from tags", "19 from stages.dev.tags", "at most 50"]),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("case", "text", "field", "explanation"), INVALID, ids=[row[0] for row in INVALID])
def test_refuses_what_yaml_or_coercion_would_let_through(tmp_path, case, text, field, explanation):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    message = str(err.value)
    assert str(tmp_path / "platform.yaml") in message
    assert field in message, message
    for fragment in explanation:
        assert fragment in message, message
    assert len(message) < 2000, message


@pytest.mark.bad_input("config")
def test_a_duplicate_key_in_an_overlay_names_the_overlay(tmp_path):
    overlay = write(tmp_path, "stages:\n  dev:\n    region: us-west-2\n    region: eu-west-1\n", "overlay.yaml")
    with pytest.raises(ConfigError, match=r"(?s)overlay\.yaml: .*stages\.dev\.region: duplicate key.*lines 3 and 4"):
        load_config(write(tmp_path, STAGES), overlays=(overlay,))


def test_yaml_lists_numbers_and_names_still_load(tmp_path):
    text = dev_with(
        "tags: {on: call, 2024: x}\n"
        "training: {learning_rate: 1e-4, perplexity_threshold: 12, max_steps: 0x10}\n"
        "serving: {alarms: {emails: [a@example.com, b@example.com]}}"
    )
    config = load_config(write(tmp_path, text))
    dev = config.stages["dev"]
    assert dev.tags == {"on": "call", "2024": "x"}  # keys are names, as written
    assert dev.training.learning_rate == 1e-4 and dev.training.perplexity_threshold == 12.0
    assert dev.training.max_steps == 16
    assert dev.serving.alarms.emails == ("a@example.com", "b@example.com")
    # Anchors and merge keys, within bounds, still work.
    merged = "stages:\n  dev: &base {region: eu-west-1, removal_policy: destroy}\n  prod: {<<: *base, removal_policy: retain}\n"
    config = load_config(write(tmp_path, merged))
    assert config.stages["prod"].region == "eu-west-1" and config.stages["prod"].removal_policy == "retain"


SHIPPED = sorted([*(REPO / "config").rglob("*.yaml"), *(REPO / "tests" / "infrastructure" / "fixtures").glob("*.yaml")])


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_config_still_loads(path):
    if path.parent.name == "overlays":
        load_config(REPO / "config" / "default.yaml", overlays=(path,))
    else:
        load_config(path)


# --- files that are not config files ---------------------------------------------------------------------------


def _directory(tmp_path: Path) -> Path:
    (tmp_path / "bad").mkdir()
    return tmp_path / "bad"


def _file(content: bytes):
    def make(tmp_path: Path) -> Path:
        path = tmp_path / "bad"
        path.write_bytes(content)
        return path

    return make


BAD_FILES = [
    ("directory", _directory, "is a directory"),
    ("binary", _file(b"stages:\x00\x01\x02\xff\xfe"), "binary"),
    ("not UTF-8", _file("stages:\n  d\u00e9v: {}\n".encode("latin-1")), "not UTF-8 text"),
    ("UTF-16", _file("stages: {}\n".encode("utf-16")), "is UTF-16 text"),
    ("empty", _file(b""), "is empty"),
    ("only comments", _file(b"# nothing here\n"), "is empty"),
    ("a list at the top", _file(b"- dev\n- prod\n"), "expected a mapping at the top"),
    ("a text at the top", _file(b"stages\n"), "expected a mapping at the top"),
    ("too large", _file(b"# " + b"x" * (1 << 20) + b"\n"), "larger than"),
]


@pytest.mark.bad_input("config")
@pytest.mark.parametrize("as_overlay", [False, True], ids=["config", "overlay"])
@pytest.mark.parametrize(("case", "make", "explanation"), BAD_FILES, ids=[row[0] for row in BAD_FILES])
def test_a_file_that_is_not_a_config_is_named_with_one_clear_error(tmp_path, case, make, explanation, as_overlay):
    bad = make(tmp_path)
    with pytest.raises(ConfigError) as err:
        if as_overlay:
            load_config(write(tmp_path, STAGES), overlays=(bad,))
        else:
            load_config(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: "), message
    assert explanation in message, message
    assert len(message) < 500, message


@pytest.mark.bad_input("config")
def test_an_unreadable_file_is_named(tmp_path, monkeypatch):
    # Root reads any file whatever its mode, so the permission error is raised the way open() raises it.
    path = write(tmp_path, STAGES)
    real_open = pathlib.Path.open

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", denied)
    with pytest.raises(ConfigError, match=rf"^{path}: cannot be read: permission denied"):
        load_config(path)


# --- messages never echo the input ------------------------------------------------------------------------------


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    "text",
    [
        STAGES.replace("us-east-1", "x" * 100_000),
        STAGES + "? " + "k" * 100_000 + "\n: 1\n",
        dev_with("serving: {alarms: {emails: [" + ", ".join(["1"] * 5000) + "]}}"),
        dev_with("tags: {x: '" + "a|" * 50_000 + "'}"),
    ],
    ids=["long value", "long unknown key", "many bad items", "long tag value"],
)
def test_messages_quote_short_excerpts_only(tmp_path, text):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    message = str(err.value)
    assert len(message) < 3000, message[:3000]
    assert "..." in message or "more" in message, message


def test_selecting_a_long_unknown_stage_quotes_an_excerpt(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, STAGES), only_stage="q" * 10_000)
    assert len(str(err.value)) < 300


# --- defaults follow the file's stages ------------------------------------------------------------------------


def test_pipeline_gates_default_to_the_files_own_stages(tmp_path):
    two = STAGES + "  prod:\n    region: us-east-1\n" + PIPELINE
    config = load_config(write(tmp_path, two))
    assert config.pipeline.approval_before == ("prod",)
    assert config.pipeline.smoke_test_after == ("dev",)
    plan = "\n".join(describe_pipeline(config))
    assert "dev (111111111111) + smoke test -> approval -> prod (111111111111)" in plan

    one = load_config(write(tmp_path, STAGES + PIPELINE))
    assert (one.pipeline.approval_before, one.pipeline.smoke_test_after) == (("dev",), ())

    explicit = load_config(write(tmp_path, two + "  approval_before: []\n  smoke_test_after: [dev, prod]\n"))
    assert (explicit.pipeline.approval_before, explicit.pipeline.smoke_test_after) == ((), ("dev", "prod"))


def test_three_stages_keep_the_gates_they_had(tmp_path):
    config = load_config(REPO / "config" / "examples" / "promotion.yaml")
    assert (config.pipeline.approval_before, config.pipeline.smoke_test_after) == (("prod",), ("dev", "staging"))
    three = load_config(write(tmp_path, (REPO / "config" / "default.yaml").read_text() + PIPELINE))
    assert (three.pipeline.approval_before, three.pipeline.smoke_test_after) == (("prod",), ("staging",))


def test_fifty_tags_per_resource_are_accepted(tmp_path):
    config = load_config(write(tmp_path, "tags:\n" + tags(48) + STAGES))
    assert len(config.stage_tags("dev")) == 50
