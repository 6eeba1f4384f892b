"""docs/config.schema.json: generated from the config models, accepts every config here, refuses typical mistakes."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
import yaml

from core.config import ConfigError, load_config
from core.config.strict_yaml import read_yaml
from generators import config_schema as schema_generator
from tests.cdk_assembly import REPO

CONFIGS = [REPO / "config" / "default.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]
OVERLAYS = sorted((REPO / "config" / "overlays").glob("*.yaml"))


@pytest.fixture(scope="module")
def config_schema() -> dict[str, Any]:
    return schema_generator.config_schema()


@pytest.fixture(scope="module")
def validator(config_schema) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(config_schema)


def as_json(value: Any) -> Any:
    """A config as an editor sees it: YAML read into JSON values (the loader reads sequences as tuples)."""
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(item) for item in value]
    return value


def errors(validator: jsonschema.Draft202012Validator, document: Any) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document))


def test_the_committed_schemas_are_the_generated_ones(config_schema):
    assert (REPO / schema_generator.SCHEMA_PATH).read_text() == schema_generator.render(config_schema), (
        "run `make docs`"
    )
    assert (REPO / schema_generator.OVERLAY_SCHEMA_PATH).read_text() == schema_generator.render(
        schema_generator.overlay_schema()
    ), "run `make docs`"


def test_the_schema_is_a_valid_draft_2020_12_schema(config_schema):
    jsonschema.Draft202012Validator.check_schema(config_schema)
    jsonschema.Draft202012Validator.check_schema(schema_generator.overlay_schema())
    assert config_schema["$schema"] == jsonschema.Draft202012Validator.META_SCHEMA["$id"]


def test_every_value_check_of_the_config_types_is_in_the_schema():
    assert schema_generator.unmapped_value_checks() == [], "map each in generators/schema_generator.py VALUE_CHECKS"


def test_every_model_refuses_unknown_keys(config_schema):
    objects = [config_schema, *config_schema["$defs"].values()]
    assert len(objects) == len(schema_generator.config_models())
    assert all(o["additionalProperties"] is False for o in objects)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_loads_and_satisfies_the_schema(path, validator):
    load_config(path)
    assert errors(validator, as_json(read_yaml(path))) == []


@pytest.mark.parametrize("path", CONFIGS + OVERLAYS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_names_its_schema_on_the_first_line(path):
    first = path.read_text().splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    expected = schema_generator.OVERLAY_SCHEMA_PATH if path in OVERLAYS else schema_generator.SCHEMA_PATH
    assert (path.parent / first.removeprefix(prefix)).resolve() == REPO / expected


@pytest.mark.parametrize("path", OVERLAYS, ids=lambda p: str(p.relative_to(REPO)))
def test_an_overlay_satisfies_the_overlay_schema_and_only_that(path, config_schema):
    overlay = as_json(read_yaml(path))
    assert errors(jsonschema.Draft202012Validator(schema_generator.overlay_schema()), overlay) == []
    # It is partial (stages without a region), which the schema of a whole file refuses.
    assert errors(jsonschema.Draft202012Validator(config_schema), overlay) != []


def test_the_overlay_schema_still_refuses_unknown_keys_and_wrong_types():
    validator = jsonschema.Draft202012Validator(schema_generator.overlay_schema())
    assert errors(validator, {"stages": {"staging": {"serving": {"instance_typ": "ml.g5.2xlarge"}}}}) == [
        "stages.staging.serving: Additional properties are not allowed ('instance_typ' was unexpected)"
    ]
    assert errors(validator, {"stages": {"staging": {"serving": {"max_batch_size": "1"}}}}) == [
        "stages.staging.serving.max_batch_size: '1' is not of type 'integer'"
    ]


# Typical mistakes in config/default.yaml: (path to change, the value written, where the schema reports it). Each is
# refused by synth too, so the schema never rejects a file synth would take.
MISTAKES = {
    "a misspelled key": (("stages", "dev", "regoin"), "us-east-1", "stages.dev"),
    "a misspelled nested key": (("stages", "dev", "serving", "weights"), {"sorce": "s3"}, "stages.dev.serving.weights"),
    "a number in quotes": (("stages", "dev", "serving", "max_new_tokens"), "8", "stages.dev.serving.max_new_tokens"),
    "true for a number": (("stages", "dev", "serving", "max_batch_size"), True, "stages.dev.serving.max_batch_size"),
    "a number for text": (("project",), 123, "project"),
    "an unquoted account id": (("stages", "prod", "account"), 111111111111, "stages.prod.account"),
    "a short account id": (("stages", "prod", "account"), "1234", "stages.prod.account"),
    "a choice not offered": (("stages", "dev", "serving", "engine"), "tensorrt", "stages.dev.serving.engine"),
    "a number below its minimum": (
        ("stages", "dev", "serving", "tensor_parallel_degree"),
        0,
        "stages.dev.serving.tensor_parallel_degree",
    ),
    "a misspelled region": (("stages", "dev", "region"), "us-east1", "stages.dev.region"),
    "an unknown model": (("stages", "dev", "serving", "model"), "gpt-j-7b", "stages.dev.serving.model"),
    "an unknown instance type": (
        ("stages", "dev", "serving", "instance_type"),
        "ml.g5.3xlarge",
        "stages.dev.serving.instance_type",
    ),
    "an uppercase stage name": (("stages", "Dev"), {"region": "us-east-1"}, "stages"),
    "a stage name ending in a dash": (("stages", "dev-"), {"region": "us-east-1"}, "stages"),
    "a reserved tag key": (("tags", "aws:owner"), "me", "tags"),
    "a branch for a revision": (
        ("stages", "dev", "serving", "weights"),
        {"revision": "main"},
        "stages.dev.serving.weights.revision",
    ),
    "a mapping for a list": (
        ("stages", "dev", "serving", "alarms"),
        {"emails": {"to": "a@example.com"}},
        "stages.dev.serving.alarms.emails",
    ),
}


@pytest.mark.parametrize("case", MISTAKES)
def test_the_schema_refuses_typical_mistakes_as_synth_does(case, validator, tmp_path):
    keys, value, where = MISTAKES[case]
    config = copy.deepcopy(as_json(read_yaml(CONFIGS[0])))
    parent = config
    for key in keys[:-1]:
        parent = parent[key]
    parent[keys[-1]] = value
    reported = errors(validator, config)
    assert reported, f"{case}: the schema accepted it"
    assert all(line.startswith(f"{where}:") or line.startswith(f"{where}.") for line in reported), reported
    file = tmp_path / "platform.yaml"
    file.write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(ConfigError):
        load_config(file)
