"""Training with LoRA / QLoRA adapters: the config's method and lora settings, what the job is told, and what synth
refuses (with the field named), from the memory estimate to layouts torchrun cannot start."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stacks import training_job
from stacks.config import TrainingConfig
from stacks.config.adapters import adapter_parameters, base_weights_gib

G5 = {"instance_type": "ml.g5.2xlarge", "precision": "bf16", "train_batch_size": 2, "val_batch_size": 2}


def training(**fields) -> TrainingConfig:
    return TrainingConfig.model_validate(fields)


def test_an_adapter_method_runs_with_plain_pytorch_in_the_smp_v2_image() -> None:
    config = training(model="llama-3.1-8b", method="lora", **G5)
    assert config.smp.version == 2 and config.smp.tensor_parallel_degree == 1
    flags = training_job.hyperparameters(
        config, max_steps=10, learning_rate=1e-4, train_batch_size=2, base_revision="0" * 40
    )
    assert flags["backend"] == "torch" and flags["method"] == "lora"
    assert {key: flags[key] for key in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")} == {
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_target_modules": "auto",
    }
    assert flags["base_model_name"] == "llama-3.1-8b" and flags["base_model_id"] == "meta-llama/Llama-3.1-8B"
    assert flags["base_model_revision"] == "0" * 40
    # Full fine-tuning's flags are unchanged: no adapter flag reaches an SMP job.
    full = training_job.hyperparameters(training(), max_steps=10, learning_rate=1e-4, train_batch_size=8)
    assert "method" not in full and full["backend"] == "smp_v1"


def test_the_adapter_memory_estimate_adds_up() -> None:
    config = training(model="llama-3.1-8b", method="lora", lora={"r": 8, "target_modules": ["q_proj", "v_proj"]}, **G5)
    # Llama 3.1 8B: hidden 4096, 32 query heads of 128, 8 KV heads: q 4096->4096, v 4096->1024; 32 layers, rank 8.
    assert adapter_parameters(config.catalog_model, config.lora) == 32 * 8 * ((4096 + 4096) + (4096 + 1024))
    assert base_weights_gib(config.catalog_model, "lora", "bf16") == pytest.approx(8_030_261_248 * 2 / 2**30)
    # QLoRA: 4.127 bits per weight outside the untied embedding and LM head (2 x 128256 x 4096), which stay fp32.
    embeddings = 2 * 128256 * 4096
    expected = ((8_030_261_248 - embeddings) * 4.127 / 8 + embeddings * 4) / 2**30
    assert base_weights_gib(config.catalog_model, "qlora", "bf16") == pytest.approx(expected)
    fit = config.fit()
    assert fit.fits and fit.capacity_gib == pytest.approx(24 * 0.9)


ACCEPTED = [
    ("Llama 3.1 8B LoRA on one A10G", dict(model="llama-3.1-8b", method="lora", **G5)),
    ("Qwen2.5 7B QLoRA on one A10G", dict(model="qwen2.5-7b", method="qlora", **G5)),
    ("Mistral 7B LoRA, DDP over the 4 A10Gs of a g5.12xlarge", dict(model="mistral-7b-v0.3", method="lora", **{**G5, "instance_type": "ml.g5.12xlarge"})),
    ("one process on a 4-GPU instance", dict(model="mistral-7b-v0.3", method="lora", processes_per_host=1, **{**G5, "instance_type": "ml.g5.12xlarge"})),
    ("Llama 3.1 8B LoRA on p4d: DDP over 8 A100s", dict(model="llama-3.1-8b", method="lora", **{**G5, "instance_type": "ml.p4d.24xlarge", "train_batch_size": 4})),
    ("explicit target modules", dict(model="qwen2.5-7b", method="lora", lora={"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}, **G5)),
    ("GPT-J (the reference model) with LoRA", dict(model="gpt-j-6b", method="lora", **G5)),
]  # fmt: skip


@pytest.mark.parametrize("fields", [r[1] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED])
def test_accepts_adapter_layouts(fields) -> None:
    config = training(**fields)
    assert config.fit().fits and config.host_fit().fits


REJECTED = [
    ("lora settings without an adapter method", dict(lora={"r": 8}), r"lora: set training\.method lora or qlora"),
    ("an smp section with an adapter method", dict(model="llama-3.1-8b", method="lora", smp={"version": 2, "tensor_parallel_degree": 8}, **G5),
     r"smp: training\.method lora trains PEFT adapters with PyTorch DDP.*remove training\.smp"),
    ("unknown method", dict(method="dora"), r"Input should be 'full', 'lora' or 'qlora'"),
    ("a target module the architecture lacks", dict(model="llama-3.1-8b", method="lora", lora={"target_modules": ["c_attn"]}, **G5),
     r"lora\.target_modules: c_attn is not a linear layer of llama models; choose from q_proj, k_proj"),
    ("GPT-J's names on Qwen", dict(model="qwen2.5-7b", method="lora", lora={"target_modules": ["q_proj", "fc_in"]}, **G5),
     r"fc_in is not a linear layer of qwen2 models"),
    ("an empty target list", dict(model="llama-3.1-8b", method="lora", lora={"target_modules": []}, **G5), r"at least 1 item"),
    ("a target that is not a module name", dict(model="llama-3.1-8b", method="lora", lora={"target_modules": ["q-proj"]}, **G5), r"should match pattern"),
    ("rank 0", dict(model="llama-3.1-8b", method="lora", lora={"r": 0}, **G5), r"lora\.r\n.*greater than or equal to 1"),
    ("alpha 0", dict(model="llama-3.1-8b", method="lora", lora={"alpha": 0}, **G5), r"lora\.alpha\n.*greater than or equal to 1"),
    ("dropout 1", dict(model="llama-3.1-8b", method="lora", lora={"dropout": 1.0}, **G5), r"lora\.dropout\n.*less than 1"),
    ("an unknown lora key", dict(model="llama-3.1-8b", method="lora", lora={"rank": 8}, **G5), r"Extra inputs are not permitted"),
    ("QLoRA on V100s (no bf16)", dict(model="qwen2.5-7b", method="qlora", instance_type="ml.p3.16xlarge", precision="bf16"),
     r"instance_type: training\.method qlora computes in bf16 .* ml\.p3\.16xlarge has V100"),
    ("QLoRA in fp16", dict(model="qwen2.5-7b", method="qlora", **{**G5, "precision": "fp16"}), r"precision: training\.method qlora computes in bf16"),
    ("Llama 3.1 70B LoRA on p4d: the bf16 base does not fit one A100 40 GB", dict(model="llama-3.1-70b", method="lora", **{**G5, "instance_type": "ml.p4d.24xlarge", "train_batch_size": 1}),
     r"llama-3\.1-70b lora training does not fit ml\.p4d\.24xlarge .*DDP keeps the whole base model on every GPU.*or training\.method qlora"),
    ("a batch whose logits do not fit", dict(model="llama-3.1-8b", method="lora", **{**G5, "train_batch_size": 8}),
     r"llama-3\.1-8b lora training does not fit ml\.g5\.2xlarge .*activations"),
    ("2 processes on 4 GPUs (torchrun starts one per GPU)", dict(model="mistral-7b-v0.3", method="lora", processes_per_host=2, **{**G5, "instance_type": "ml.g5.12xlarge"}),
     r"processes_per_host 2: with more than one process the job runs under torchrun"),
    ("an evaluate GPU too small for the base", dict(model="qwen2.5-72b", method="qlora", **{**G5, "instance_type": "ml.p4de.24xlarge", "train_batch_size": 1}),
     r"evaluate_instance_type: the Evaluate step holds qwen2\.5-72b's base weights"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("fields", "message"), [(r[1], r[2]) for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejects_adapter_configs_that_cannot_run(fields, message) -> None:
    with pytest.raises(ValidationError, match=message):
        training(**fields)


def test_the_plan_describes_the_adapters_instead_of_an_smp_layout() -> None:
    from stacks.plan import describe_training

    lines = describe_training(training(model="qwen2.5-7b", method="qlora", **G5))
    assert "qwen2.5-7b: QLORA adapters (r 16, alpha 32, attention and MLP projections), PyTorch DDP x 1, no SMP" in (
        "\n".join(lines)
    )
    assert not any("SMP v2:" in line for line in lines)


def test_the_adapter_examples_load_with_the_figures_their_comments_give() -> None:
    from stacks.config import load_config
    from tests.cdk_assembly import REPO

    llama = load_config(REPO / "config/examples/llama-lora.yaml").stages["dev"].training
    assert (llama.model, llama.method, llama.instance_type) == ("llama-3.1-8b", "lora", "ml.g5.2xlarge")
    assert round(llama.fit().total_gib, 1) == 21.1 and round(llama.fit().capacity_gib, 1) == 21.6
    qwen = load_config(REPO / "config/examples/qwen-lora.yaml").stages["dev"].training
    assert (qwen.model, qwen.method, qwen.instance_type) == ("qwen2.5-7b", "qlora", "ml.g5.2xlarge")
    assert round(qwen.fit().total_gib, 1) == 17.4
