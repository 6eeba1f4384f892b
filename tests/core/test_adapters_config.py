"""Served LoRA adapters, the config half: the engine's LoRA slots and their GPU share against hand-computed figures,
the stage's own adapters taking their rank from its training, and every refusal."""

from __future__ import annotations

import tarfile

import pytest
from pydantic import ValidationError

from core import serving_properties, sizing
from core.catalog.models import MODELS
from core.config import PlatformConfig, ServingConfig
from core.config import lora_serving as sa
from training.finetune.adapters import write_adapter_archive

ARCHIVE = "s3://adapter-bucket/adapters/{}.tar.gz"


def s3_adapter(name: str, rank: int | None = 16, **fields) -> dict:
    return {"name": name, "weights": {"source": "s3", "s3_uri": ARCHIVE.format(name)}, "rank": rank, **fields}


def llama(*adapters: dict, **component) -> ServingConfig:
    return ServingConfig.model_validate(
        {
            "engine": "vllm",
            "model": "llama-3.1-8b",
            "dtype": "bf16",
            "instance_type": "ml.g5.2xlarge",
            "context_tokens": 8192,
            "components": [{"name": "base", "adapters": list(adapters), **component}],
        }
    )


def base(config: ServingConfig) -> ServingConfig:
    return config.component_servings()["base"]


# --- sizing -------------------------------------------------------------------------------------------------------

# Llama 3.1 8B per layer, inputs + outputs of each LoRA-capable projection (hidden 4096, 8 KV heads of 128, MLP 14336):
# q and o 4096 + 4096, k and v 4096 + 1024, gate and up 4096 + 14336, down 14336 + 4096.
LLAMA_8B_WIDTHS = 2 * 8192 + 2 * 5120 + 3 * 18432
# Qwen2.5 7B (hidden 3584, 4 KV heads of 128, MLP 18944).
QWEN_7B_WIDTHS = 2 * (3584 + 3584) + 2 * (3584 + 512) + 3 * (3584 + 18944)


def test_the_lora_slots_are_max_loras_of_the_highest_rank_over_every_projection_of_every_layer():
    config = base(llama(s3_adapter("support", 16), s3_adapter("legal", 32)))
    lora = config.lora
    # Two adapters, so two slots; rank 32 is one of vLLM's ranks.
    assert (lora.max_loras, lora.max_lora_rank, lora.max_cpu_loras) == (2, 32, 2)
    expected = 2 * 32 * LLAMA_8B_WIDTHS * 32 * 2  # slots x rank x widths x layers x bf16
    assert expected == 335_544_320
    assert sa.slots_gib(MODELS["llama-3.1-8b"], lora) == pytest.approx(expected / sizing.GIB)
    # The slots are part of what must fit one GPU, beside the weights and the KV cache.
    fit = config.fit()
    assert fit.lora_gib == pytest.approx(0.3125)
    assert fit.total_gib == pytest.approx(fit.weights_gib + fit.kv_cache_gib + fit.runtime_gib + 0.3125)
    assert "LoRA slots 0.3" in fit.describe()


def test_a_rank_between_vllms_ranks_rounds_up_and_qwen_sizes_from_its_own_widths():
    config = ServingConfig.model_validate(
        {
            "engine": "vllm",
            "model": "qwen2.5-7b",
            "dtype": "bf16",
            "instance_type": "ml.g5.2xlarge",
            "context_tokens": 8192,
            "components": [{"name": "base", "adapters": [s3_adapter("a", 12)]}],
        }
    )
    lora = base(config).lora
    assert lora.max_lora_rank == 16
    assert QWEN_7B_WIDTHS == 90_112
    assert sa.slots_gib(MODELS["qwen2.5-7b"], lora) * sizing.GIB == 1 * 16 * 90_112 * 28 * 2


def test_an_adapters_own_size_counts_only_the_layers_it_adapts():
    adapter = sa.AdapterConfig.model_validate(s3_adapter("a", 8, target_modules=["q_proj", "v_proj"]))
    # rank 8 x (q 4096 + 4096, v 4096 + 1024) x 32 layers x 2 bytes.
    assert sa.adapter_gib(MODELS["llama-3.1-8b"], adapter) * sizing.GIB == 8 * (8192 + 5120) * 32 * 2


def test_the_base_model_runs_vllm_with_lora_enabled_for_its_adapters():
    keys = serving_properties.stage_properties(base(llama(s3_adapter("a", 64), max_loras=1)))
    assert {k: v for k, v in keys.items() if "lora" in k} == {
        "option.enable_lora": "true",
        "option.max_loras": "1",
        "option.max_lora_rank": "64",
        "option.max_cpu_loras": "1",
    }
    # A component without adapters runs no LoRA slots.
    plain = ServingConfig.model_validate({"engine": "vllm", "components": [{"name": "base"}]})
    assert not any("lora" in k for k in serving_properties.stage_properties(base(plain)))


# --- the stage's own adapters ---------------------------------------------------------------------------------------


def stage(training: dict, component: dict) -> dict:
    return {
        "project": "p",
        "stages": {
            "dev": {
                "region": "us-east-1",
                "huggingface_token_secret": "p/dev/token",
                "training": {"instance_type": "ml.g5.2xlarge", "precision": "bf16", **training},
                "serving": {
                    "engine": "vllm",
                    "model": "llama-3.1-8b",
                    "dtype": "bf16",
                    "instance_type": "ml.g5.2xlarge",
                    "context_tokens": 8192,
                    "components": [{"name": "base", **component}],
                },
            }
        },
    }


LORA_TRAINING = {"model": "llama-3.1-8b", "method": "lora", "train_batch_size": 1, "sequence_length": 1024}


def test_the_stages_own_adapters_take_rank_and_layers_from_its_lora_training():
    config = PlatformConfig.model_validate(
        stage(
            {**LORA_TRAINING, "lora": {"r": 32, "target_modules": ["q_proj", "v_proj"]}},
            {"adapters": [{"name": "tuned"}]},
        )
    )
    (adapter,) = config.stages["dev"].serving.components[0].adapters
    assert (adapter.weights.source, adapter.rank, adapter.target_modules) == (
        "latest_approved",
        32,
        ("q_proj", "v_proj"),
    )
    assert base(config.stages["dev"].serving).lora.max_lora_rank == 32


# --- refusals ---------------------------------------------------------------------------------------------------------

REFUSED = [
    ("adapters on the deepspeed engine",
     lambda: ServingConfig.model_validate({"engine": "deepspeed", "components": [
         {"name": "base", "adapters": [s3_adapter("a")]}]}),
     r"component base: adapters need engine vllm\. LMI serves LoRA adapters only with vLLM"),
    ("adapters over a model vLLM has no LoRA for",
     lambda: ServingConfig.model_validate({"engine": "vllm", "model": "gpt-j-6b", "components": [
         {"name": "base", "adapters": [s3_adapter("a")]}]}),
     r"gpt-j-6b \(gptj\) does not\. Catalog models it serves adapters for: llama-3\.1-70b, llama-3\.1-8b"),
    ("an adapter rank above max_lora_rank",
     lambda: llama(s3_adapter("a", 64), max_lora_rank=32),
     r"max_lora_rank 32 is below the rank of a \(rank 64\): vLLM refuses"),
    ("a rank above vLLM's largest",
     lambda: llama(s3_adapter("a", 1024)),
     r"rank\n.*less than or equal to 512"),
    ("more GPU slots than adapters",
     lambda: llama(s3_adapter("a"), max_loras=2),
     r"max_loras 2 reserves GPU slots for more adapters than its 1; use at most 1"),
    ("LoRA slots without adapters",
     lambda: llama(max_loras=1),
     r"component base: max_loras and max_lora_rank size the engine's LoRA slots for adapters; it has none"),
    ("two adapters of one name",
     lambda: llama(s3_adapter("a"), s3_adapter("a")),
     r"adapters: a named more than once among the components and their adapters"),
    ("an adapter named as a component",
     lambda: llama(s3_adapter("base")),
     r"adapters: base named more than once"),
    ("adapters on the stage, not on a component",
     lambda: ServingConfig.model_validate({"engine": "vllm", "adapters": [s3_adapter("a")]}),
     r"adapters: LoRA adapters attach to a base model served as an inference component"),
    ("an adapter of no stated rank from outside the stage",
     lambda: llama(s3_adapter("a", None)),
     r"adapter a: rank is required for an adapter this stage's training does not make"),
    ("an archive that is no .tar.gz",
     lambda: llama({"name": "a", "rank": 8, "weights": {"source": "s3", "s3_uri": "s3://adapter-bucket/a/"}}),
     r"s3_uri\n.*String should match pattern"),
    ("an s3 source without its archive",
     lambda: llama({"name": "a", "rank": 8, "weights": {"source": "s3"}}),
     r"source 's3' needs s3_uri, the adapter's \.tar\.gz"),
    ("a target module the model does not have",
     lambda: llama(s3_adapter("a", 8, target_modules=["fc_in"])),
     r"adapter a: target_modules: fc_in is not a linear layer of llama models"),
    ("LoRA slots that leave the model no room",
     lambda: llama(*(s3_adapter(f"a{i}", 512) for i in range(8))),
     r"component base: llama-3\.1-8b bf16 with its adapters' LoRA slots does not fit ml\.g5\.2xlarge .* Lower max_loras"),
    ("the stage's own adapters when its training makes whole models",
     lambda: PlatformConfig.model_validate(stage({"model": "llama-3.1-8b"}, {"adapters": [{"name": "tuned"}]})),
     r"adapter tuned: weights source latest_approved reads the stage's own model package group, where "
     r"training\.method full registers whole fine-tuned models"),
    ("the stage's own adapters over another model than the one they adapt",
     lambda: PlatformConfig.model_validate(stage({**LORA_TRAINING, "model": "qwen2.5-7b"},
                                                 {"adapters": [{"name": "tuned"}]})),
     r"adapter tuned: the stage's training adapts qwen2\.5-7b.*the component serves llama-3\.1-8b"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("build", "message"), [(r[1], r[2]) for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refuses_adapters_the_engine_or_sagemaker_would_refuse(build, message):
    with pytest.raises(ValidationError, match=message):
        build()


# --- the archive the adapter component loads ------------------------------------------------------------------------


def test_the_training_job_writes_the_archive_the_adapter_component_names(tmp_path):
    for name, text in (("adapter_config.json", "{}"), ("adapter_model.safetensors", "w"), ("base_model.json", "{}")):
        (tmp_path / name).write_text(text)
    (tmp_path / "tokenizer.json").write_text("{}")
    archive = write_adapter_archive(tmp_path)
    assert archive.name == sa.ADAPTER_ARCHIVE == "adapter.tar.gz"
    with tarfile.open(archive) as opened:
        # PEFT's files at the top, as SageMaker hands them to the engine; nothing else.
        assert opened.getnames() == ["adapter_config.json", "adapter_model.safetensors", "base_model.json"]
    first = archive.read_bytes()
    assert write_adapter_archive(tmp_path).read_bytes() == first  # identical files, identical archive
