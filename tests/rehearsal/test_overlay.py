"""The rehearsal's overlay adapts to the config it is applied to: for every example, what it generates loads and
passes every synth check of the config (today: it is empty, the emulator takes every stage as configured), or the
rehearsal says why the example cannot be rehearsed. With moto's own instance-type list, the substitution it makes.
No deploy."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from core import synth_checks
from core.config import load_config
from core.config.strict_yaml import read_yaml
from generators import config_schema
from rehearsal import overlay
from rehearsal.rehearse import CannotRehearse, choose_stage
from tests.rehearsal.example_outcomes import REHEARSED_STAGE, UNREHEARSABLE

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [REPO / "config" / "default.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]


# moto 5.2.5's own list (moto/sagemaker/models.py, FakeEndpointConfig.validate_instance_type), as the catalog has it:
# what the overlay had to fit every stage onto before the emulator's fix endpoint-instance-types.
MOTOS_OWN_LIST = (
    "ml.g4dn.xlarge",
    "ml.g4dn.2xlarge",
    "ml.g4dn.4xlarge",
    "ml.g4dn.8xlarge",
    "ml.g4dn.12xlarge",
    "ml.g4dn.16xlarge",
    "ml.p3.16xlarge",
)


def test_the_emulator_accepts_every_catalog_type_sagemaker_hosts_endpoints_on():
    from core.catalog.instances import INSTANCE_TYPES

    accepted = overlay.emulator_endpoint_instance_types()
    # Every catalog type but ml.p3dn.24xlarge, which SageMaker offers for training only (not in botocore's enum).
    assert set(accepted) == set(INSTANCE_TYPES) - {"ml.p3dn.24xlarge"}
    assert {"ml.g5.2xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge"} <= set(accepted)
    assert accepted[0] == "ml.g4dn.xlarge"  # cheapest first


@pytest.fixture
def motos_own_list(monkeypatch):
    """The overlay as it was with moto's own list: the substitution it still makes for a type the emulator refuses."""
    monkeypatch.setattr(overlay, "emulator_endpoint_instance_types", lambda: MOTOS_OWN_LIST)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_the_generated_overlay_passes_every_synth_check_or_the_example_says_why_not(config, tmp_path):
    documented = UNREHEARSABLE.get(config.name)
    if documented is not None:
        with pytest.raises(CannotRehearse) as refused:
            choose_stage(str(config), None, overlays=None, work_dir=tmp_path)
        assert documented.reason in refused.value.reason
        for detail in documented.details:
            assert any(detail in line for line in refused.value.details), (detail, refused.value.details)
        return
    choice = choose_stage(str(config), None, overlays=None, work_dir=tmp_path)
    [written] = choice.overlays
    assert Path(written).parent == tmp_path
    schema = jsonschema.Draft202012Validator(config_schema.overlay_schema())
    assert list(schema.iter_errors(read_yaml(Path(written)))) == []
    # Exactly what `cdk synth -c stage=<stage> -c overlay=<written>` loads and checks.
    rehearsed = load_config(config, only_stage=choice.name, overlays=(written,))
    synth_checks.check(rehearsed, config_path=str(config))
    assert rehearsed.stages[choice.name].serving.instance_type in overlay.emulator_endpoint_instance_types()
    # Every example is rehearsed as configured: its own instance type, its own removal policy.
    assert choice.overlay_changes == [] and choice.generated.serving == {}
    if config.name in REHEARSED_STAGE:
        assert (choice.name, choice.real.removal_policy) == REHEARSED_STAGE[config.name]


def test_the_committed_overlay_is_the_one_generated_for_the_default_config():
    generated = overlay.render(
        [overlay.for_stage("config/default.yaml", stage) for stage in ("dev", "staging", "prod")],
        config_path="config/default.yaml",
        destination=overlay.COMMITTED,
    )
    assert overlay.COMMITTED.read_text() == generated, (
        "run `.venv/bin/python -m rehearsal.overlay > config/overlays/moto-rehearsal.yaml`"
    )
    assert "Nothing to change: the emulator takes every stage as configured." in generated


def test_promotion_serves_staging_on_its_own_g5(tmp_path):
    choice = choose_stage(str(REPO / "config/examples/promotion.yaml"), None, overlays=None, work_dir=tmp_path)
    assert choice.name == "staging"
    assert choice.overlay_changes == []
    assert choice.rehearsed.serving.instance_type == "ml.g5.2xlarge"


def test_with_motos_own_list_promotion_moves_to_a_t4_at_batch_1_and_says_why(motos_own_list, tmp_path):
    choice = choose_stage(str(REPO / "config/examples/promotion.yaml"), None, overlays=None, work_dir=tmp_path)
    assert choice.overlay_changes == [
        "serving.instance_type ml.g5.2xlarge -> ml.g4dn.xlarge",
        "serving.max_batch_size 4 -> 1",
    ]
    assert "the emulator's CreateEndpointConfig rejects ml.g5.2xlarge" in choice.generated.why["instance_type"]
    assert "needs 16.8 GiB of 14.4 GiB usable per GPU" in choice.generated.why["max_batch_size"]


def test_tensor_parallelism_moves_to_a_substitute_with_gpus_for_it(motos_own_list, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "stages:\n  prod:\n    region: us-east-1\n    serving:\n      model: gpt-j-6b\n"
        "      instance_type: ml.g5.12xlarge\n      tensor_parallel_degree: 4\n"
    )
    generated = overlay.for_stage(config, "prod")
    # The configured degree kept on the cheapest accepted type with 4 GPUs, its batch as configured.
    assert generated.serving == {"instance_type": "ml.g4dn.12xlarge"}


def test_a_model_no_accepted_type_holds_is_refused_with_what_the_checks_say_per_candidate(motos_own_list, tmp_path):
    with pytest.raises(CannotRehearse) as refused:
        choose_stage(str(REPO / "config/examples/opt-30b-g5.yaml"), None, overlays=None, work_dir=tmp_path)
    assert "no instance type the emulator accepts for an endpoint passes the config's checks for stage prod" in (
        refused.value.reason
    )
    assert any(
        "ml.g4dn.12xlarge: stages.prod.serving: opt-30b fp16 with tensor_parallel_degree 4 does not fit <type>" in d
        for d in refused.value.details
    )


def test_an_instance_type_the_emulator_accepts_is_left_as_configured(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "stages:\n  prod:\n    region: us-east-1\n    serving: {instance_type: ml.g4dn.xlarge, max_batch_size: 1}\n"
    )
    generated = overlay.for_stage(config, "prod")
    assert generated.serving == {} and generated.refusal is None
    assert "Nothing to change" in overlay.render([generated], config_path=str(config), destination=tmp_path / "o.yaml")
