"""One record per architecture (core/catalog/architectures.py): the containers' JSON copies and the README's model
table are what the records render, the containers' tables are read from them, and every catalog model names a known
architecture whose traits it takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.catalog.architectures import ARCHITECTURE_FILES, ARCHITECTURES, Architecture
from core.catalog.models import MODELS, version_tuple
from generators import architectures as generator
from training.finetune.adapters import LORA_TARGETS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ARCHITECTURE_FILES, ids=lambda path: str(path.parent.name))
def test_each_container_copy_is_what_the_records_render(path):
    assert path.read_text() == generator.architectures_json(), "run `python -m generators.architectures --write`"


def test_the_readme_model_table_is_the_generated_one():
    current = generator.generated_part(generator.README.read_text())
    assert current, f"README.md has lost its {generator.BEGIN} ... {generator.END} markers"
    assert current == generator.model_table(), "run `python -m generators.architectures --write` (make docs)"


def test_the_check_fails_on_a_stale_copy_and_write_restores_it(tmp_path, monkeypatch, capsys):
    copy, readme = tmp_path / "architectures.json", tmp_path / "README.md"
    copy.write_text("{}\n")
    readme.write_text(f"intro\n{generator.BEGIN}\nold\n{generator.END}\noutro\n")
    monkeypatch.setattr(generator, "ARCHITECTURE_FILES", (copy,))
    monkeypatch.setattr(generator, "README", readme)
    monkeypatch.setattr(generator, "REPO", tmp_path)

    assert generator.main(["--check"]) == 1
    assert "architectures.json is stale" in capsys.readouterr().err
    assert generator.main(["--write"]) == 0
    assert generator.main(["--check"]) == 0
    assert readme.read_text() == f"intro\n{generator.model_table()}\noutro\n"


def test_the_json_keeps_every_field_of_every_record():
    records = json.loads(generator.architectures_json())["architectures"]
    assert list(records) == list(ARCHITECTURES)
    for name, record in records.items():
        assert Architecture(**{**record, "lora_targets": tuple(record["lora_targets"])}) == ARCHITECTURES[name]


def test_the_containers_tables_come_from_the_records(monkeypatch):
    # The handler's modules import each other by their bare names, as in the LMI container's model folder.
    monkeypatch.syspath_prepend(str(REPO / "model_artifacts" / "deepspeed"))
    import lmi_loading

    from core.config.lora_serving import VLLM_LORA_ARCHITECTURES
    from training.finetune import layout

    assert {name: a.lora_targets for name, a in ARCHITECTURES.items() if a.lora_targets} == LORA_TARGETS
    assert {
        n for n, a in ARCHITECTURES.items() if a.smp_v1_tensor_parallel
    } == layout.SMP_V1_TENSOR_PARALLEL_MODEL_TYPES
    assert {
        n for n, a in ARCHITECTURES.items() if a.smp_v2_tensor_parallel
    } == layout.SMP_V2_TENSOR_PARALLEL_MODEL_TYPES
    assert tuple(n for n, a in ARCHITECTURES.items() if a.deepspeed_kernels) == lmi_loading.INJECTION_ARCHITECTURES
    assert (
        tuple(n for n, a in ARCHITECTURES.items() if a.deepspeed_meta_checkpoint)
        == lmi_loading.META_CHECKPOINT_ARCHITECTURES
    )
    assert lmi_loading._LAST_TRANSFORMERS_FOR_INJECTION == {"bloom": (4, 43, 4)}
    assert tuple(n for n, a in ARCHITECTURES.items() if a.vllm_lora) == VLLM_LORA_ARCHITECTURES


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_catalog_model_takes_its_architecture_s_traits(name):
    model = MODELS[name]
    traits = ARCHITECTURES[model.architecture]
    assert model.traits is traits
    assert model.deepspeed_kernels == traits.deepspeed_kernels
    # A model never loads with less than its architecture needs; only its own config can ask for more.
    assert version_tuple(model.min_transformers) >= version_tuple(traits.min_transformers)
    if model.config_min_transformers is None:
        assert model.min_transformers == traits.min_transformers
    assert model.architecture in LORA_TARGETS


def test_a_model_of_an_unknown_architecture_is_refused():
    from core.catalog.models import Model

    with pytest.raises(KeyError, match="'falcon' is not a known architecture"):
        Model(adapters_summary="(a test model)",
            name="f", hf_id="x/f", architecture="falcon", parameters=1, layers=2, hidden_size=64,
            attention_heads=4, context_tokens=128, vocab_size=100,
        )  # fmt: skip


def test_a_meta_checkpoint_without_kernel_injection_is_refused():
    with pytest.raises(ValueError, match="meta-device checkpoints load only with kernel injection"):
        Architecture(
            model_type="x", lora_targets=(), vllm_lora=False, smp_v1_tensor_parallel=False,
            smp_v2_tensor_parallel=False, deepspeed_kernels=False, deepspeed_meta_checkpoint=True,
        )  # fmt: skip
