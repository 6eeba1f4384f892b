"""Training with LoRA / QLoRA adapters: the config's method and lora settings, what the job is told, and what synth
refuses (with the field named), from the memory estimate to layouts torchrun cannot start."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core import training_job
from core.config import TrainingConfig
from core.config.lora_training import adapter_parameters, base_weights_gib

G5 = {"instance_type": "ml.g5.2xlarge", "precision": "bf16", "train_batch_size": 1, "val_batch_size": 2}
P4D = {**G5, "instance_type": "ml.p4d.24xlarge"}
SHARDED = {"version": 2, "hybrid_shard_degree": 8}  # the base sharded over the 8 GPUs of a p4d


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
    ("Llama 3.1 8B LoRA over a base sharded 8 ways", dict(model="llama-3.1-8b", method="lora", smp=SHARDED, **P4D)),
    ("sharded over all GPUs (hybrid_shard_degree 0)", dict(model="llama-3.1-8b", method="lora", smp={"version": 2}, **P4D)),
    ("two copies of the base, each sharded over 4 A100s", dict(model="qwen2.5-7b", method="lora", smp={"version": 2, "hybrid_shard_degree": 4}, **P4D)),
    ("one base sharded over two p4d", dict(model="mistral-7b-v0.3", method="lora", instance_count=2, smp={"version": 2, "hybrid_shard_degree": 16}, **P4D)),
    # Evaluate holds the base as it was trained over, in fp32 (29.0 GiB with the runtime): one L40S.
    ("sharded in fp32", dict(model="mistral-7b-v0.3", method="lora", smp=SHARDED, **{**P4D, "precision": "fp32", "train_batch_size": 1, "evaluate_instance_type": "ml.g6e.2xlarge"})),
]  # fmt: skip


@pytest.mark.parametrize("fields", [r[1] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED])
def test_accepts_adapter_layouts(fields) -> None:
    config = training(**fields)
    assert config.fit().fits and config.host_fit().fits


REJECTED = [
    ("lora settings without an adapter method", dict(lora={"r": 8}), r"lora: set training\.method lora or qlora"),
    ("SMP v2 tensor parallelism under adapters", dict(model="llama-3.1-8b", method="lora", smp={"version": 2, "tensor_parallel_degree": 8}, **P4D),
     r"smp\.tensor_parallel_degree 8: SMP v2's tensor parallelism replaces the model's Hugging Face attention and MLP "
     r"modules .*PEFT finds none of the layers .*model-parallel-core-features-v2-fine-tuning.*shard the base with "
     r"hybrid_shard_degree"),
    ("QLoRA over a sharded base", dict(model="llama-3.1-8b", method="qlora", smp=SHARDED, **P4D),
     r"smp: training\.method qlora keeps the base in bitsandbytes' 4-bit weights, which FSDP does not shard .*remove "
     r"training\.smp, or use training\.method lora with training\.smp"),
    ("SMP v1 under adapters", dict(model="gpt-j-6b", method="lora", smp={"version": 1, "hybrid_shard_degree": 8}, **P4D),
     r"smp\.version 1: training\.method lora shards the base with SMP v2 \(FSDP\); SMP v1's image has Python 3\.9, "
     r"where peft does not install .*set smp\.version 2"),
    ("a shard degree that does not divide the GPUs", dict(model="llama-3.1-8b", method="lora", smp={"version": 2, "hybrid_shard_degree": 3}, **P4D),
     r"smp\.hybrid_shard_degree 3 does not divide the 8 processes: .*use one of \[2, 4, 8\], or 0 for 8"),
    ("a shard degree above the GPUs", dict(model="llama-3.1-8b", method="lora", smp={"version": 2, "hybrid_shard_degree": 16}, **P4D),
     r"smp\.hybrid_shard_degree 16 does not divide the 8 processes"),
    ("sharding over one GPU", dict(model="llama-3.1-8b", method="lora", smp={"version": 2, "hybrid_shard_degree": 1}, **P4D),
     r"smp\.hybrid_shard_degree 1 keeps the whole base on every GPU, which is what training\.method lora does without "
     r"training\.smp .*remove training\.smp, or shard the base over 2 or more GPUs"),
    ("sharding on a one-GPU instance", dict(model="llama-3.1-8b", method="lora", smp={"version": 2}, **G5),
     r"smp: 1 x ml\.g5\.2xlarge runs one process, so there is no GPU to shard the base over: remove training\.smp"),
    ("a sharded base in fp16", dict(model="llama-3.1-8b", method="lora", smp=SHARDED, **{**P4D, "precision": "fp16"}),
     r"SMP v2 \(FSDP\) trains in bf16 or fp32, not fp16: set precision bf16"),
    ("pipeline parallelism under adapters", dict(model="llama-3.1-8b", method="lora", smp={**SHARDED, "pipeline_parallel_degree": 2}, **P4D),
     r"SMP v2 has no pipeline parallelism"),
    ("a sharded run whose batch does not fit", dict(model="llama-3.1-8b", method="lora", smp={"version": 2, "hybrid_shard_degree": 2}, **{**P4D, "train_batch_size": 16}),
     r"llama-3\.1-8b lora training over a base sharded 2 ways does not fit 1 x ml\.p4d\.24xlarge .*Lower "
     r"train_batch_size .*smp\.hybrid_shard_degree: a larger divisor of the 8 processes"),
    ("Llama 3.1 70B LoRA sharded 8 ways: its base does not fit the one GPU of the evaluate type", dict(model="llama-3.1-70b", method="lora", smp=SHARDED, **{**P4D, "train_batch_size": 1}),
     r"evaluate_instance_type: the Evaluate step holds llama-3\.1-70b's base weights with the adapter: about 133\.4 GiB "
     r"with the runtime, more than the 21\.6 GiB usable of one A10G 24 GB of ml\.g5\.2xlarge; use an instance type "
     r"that holds it, e\.g\. ml\.g6e\.12xlarge \(over its 4 GPUs\)"),
    ("OPT-30B: its base fits no GPU a processing job runs on, but spread over 4 it does", dict(model="opt-30b", method="lora", evaluate_instance_type="ml.g6e.xlarge", **{**P4D, "instance_type": "ml.p4de.24xlarge"}),
     r"about 57\.8 GiB with the runtime, more than the 43\.2 GiB usable of one L40S 48 GB of ml\.g6e\.xlarge; use an "
     r"instance type that holds it, e\.g\. ml\.g6\.12xlarge \(over its 4 GPUs\)"),
    ("BLOOM's tied embeddings over a sharded base", dict(model="bloom-176b", method="lora", smp={"version": 2}, **{**P4D, "instance_type": "ml.p4de.24xlarge", "instance_count": 4, "train_batch_size": 1}),
     r"smp: bloom-176b ties its input and output embeddings \(tie_word_embeddings\), and train\.py's LoRA over a base "
     r"FSDP shards refuses such a model: .*Remove training\.smp to train under DDP"),
    ("OPT's tied embeddings over a sharded base", dict(model="opt-30b", method="lora", smp=SHARDED, **P4D),
     r"smp: opt-30b ties its input and output embeddings"),
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
     r"llama-3\.1-70b lora training does not fit ml\.p4d\.24xlarge .*DDP keeps the whole base model on every GPU.*"
     r"training\.method qlora \(4-bit base weights\), or shard the base: training\.smp \{version: 2, "
     r"hybrid_shard_degree: 8\} fits"),
    ("GPT-NeoX-20B LoRA in fp16 under DDP on p4d: sharding fits, in bf16", dict(model="gpt-neox-20b", method="lora", evaluate_instance_type="ml.g6e.xlarge", **{**P4D, "precision": "fp16"}),
     r"gpt-neox-20b lora training does not fit ml\.p4d\.24xlarge .*shard the base: training\.smp \{version: 2, "
     r"hybrid_shard_degree: 2\} fits \(with precision bf16: SMP v2 does not train in fp16\)"),
    ("an evaluate GPU too small, with a larger one to name", dict(model="gpt-neox-20b", method="lora", evaluate_instance_type="ml.g5.2xlarge", **{**P4D, "instance_type": "ml.p4de.24xlarge", "train_batch_size": 1}),
     r"evaluate_instance_type: .* about 40\.3 GiB with the runtime, more than the 21\.6 GiB usable of one A10G 24 GB of "
     r"ml\.g5\.2xlarge; use an instance type that holds it, e\.g\. ml\.g6e\.2xlarge \(whole on one GPU\)"),
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


def test_the_catalog_records_the_tied_embeddings_train_py_refuses_under_fsdp() -> None:
    # train.py's LoRA-over-FSDP backend refuses a model whose config ties its embeddings (tie_word_embeddings). The
    # catalog's models keep their architecture's default: True in transformers' OPTConfig and BloomConfig, False in
    # the others' (GPTJConfig, GPTNeoXConfig, LlamaConfig, MistralConfig, Qwen2Config; Qwen2.5's 7B and 72B too).
    import transformers

    from core.catalog.models import MODELS

    for model in MODELS.values():
        default = transformers.AutoConfig.for_model(model.architecture).tie_word_embeddings
        assert model.tied_embeddings == default, model.name
    assert {name for name, model in MODELS.items() if model.tied_embeddings} >= {"opt-30b", "bloom-176b"}


def test_the_plan_describes_the_adapters_instead_of_an_smp_layout() -> None:
    from generators.plan import describe_training

    lines = describe_training(training(model="qwen2.5-7b", method="qlora", **G5))
    assert "qwen2.5-7b: QLORA adapters (r 16, alpha 32, attention and MLP projections), PyTorch DDP x 1, no SMP" in (
        "\n".join(lines)
    )
    assert not any("SMP v2:" in line for line in lines)


def test_the_adapter_examples_load_with_the_figures_their_comments_give() -> None:
    from core.config import load_config
    from tests.cdk_assembly import REPO

    llama = load_config(REPO / "config/examples/llama-lora.yaml").stages["dev"].training
    assert (llama.model, llama.method, llama.instance_type) == ("llama-3.1-8b", "lora", "ml.g5.2xlarge")
    assert round(llama.fit().total_gib, 1) == 19.8 and round(llama.fit().capacity_gib, 1) == 21.6
    qwen = load_config(REPO / "config/examples/qwen-lora.yaml").stages["dev"].training
    assert (qwen.model, qwen.method, qwen.instance_type) == ("qwen2.5-7b", "qlora", "ml.g5.2xlarge")
    assert round(qwen.fit().total_gib, 1) == 18.5


def sharded_70b(**fields) -> TrainingConfig:
    """Llama 3.1 70B LoRA over a base sharded 8 ways on a p4d, as its fields validate. Built without the config's
    checks: the whole config is refused, but only for its Evaluate step (the case above), so its sizing is tested
    here on its own."""
    from core.config import SmpConfig
    from core.config.lora_training import LoraConfig

    values = {"model": "llama-3.1-70b", "method": "lora", **P4D, "train_batch_size": 1, **fields}
    return TrainingConfig.model_construct(
        **values, smp=SmpConfig(version=2, tensor_parallel_degree=1, hybrid_shard_degree=8), lora=LoraConfig()
    )


def test_llama_70b_lora_over_a_base_sharded_8_ways_fits_a_p4d_by_hand() -> None:
    from core.config.lora_training import host_fit, training_fit

    config = sharded_70b()
    assert config.shards_base
    # Llama 3.1 70B (its config.json): 70,553,706,496 parameters, 80 layers, hidden 8192, 64 heads (8 KV heads of
    # 128), MLP 28672, vocabulary 128256 with an untied LM head.
    embeddings = 2 * 128256 * 8192
    layer = (70_553_706_496 - embeddings) / 80
    base = 70_553_706_496 * 2 / 8  # bf16, one eighth on each GPU
    gathered = (2 * layer + embeddings) * 2  # two layers and the root unit (embedding and LM head) whole, in bf16
    # Rank-16 adapters on q (8192->8192), k and v (8192->1024), o (8192->8192), gate and up (8192->28672) and down
    # (28672->8192) in each of the 80 layers, their fp32 weights, gradients and Adam moments sharded too.
    adapters = 80 * 16 * ((8192 + 8192) + 2 * (8192 + 1024) + (8192 + 8192) + 3 * (8192 + 28672))
    assert adapters == 207_093_760
    states = base + gathered + adapters * 16 / 8 + 2 * 2**30
    # Activations of 1 sequence of 1,024 tokens with checkpointing: 80 layers x 2 x s x h, one layer's working set
    # s x h x (34 + 5 x 64 x 1024 / 8192), and the logits, 1024 x 128256 x 14 bytes (transformers 4.46.3: bf16 logits,
    # their fp32 upcast, the shifted copy and the log-softmax).
    activations = 80 * 2 * 1024 * 8192 + 1024 * 8192 * (34 + 40) + 1024 * 128256 * 14
    fit = training_fit(config)
    assert fit.model_states_gib == pytest.approx(states / 2**30)
    assert fit.activations_gib == pytest.approx(activations / 2**30)
    assert round(fit.total_gib, 1) == 29.5 and fit.capacity_gib == pytest.approx(40 * 0.9) and fit.fits
    # The same job under DDP holds the whole 131.4 GiB base on every 40 GB GPU.
    assert not training_fit(config, hybrid_shard_degree=1).fits
    # Host memory: rank 0 alone holds the bf16 base; the other 7 processes only their own overhead. Every process
    # holding a copy (DDP) would need 8 x 134.4 GiB, more than the p4d's 1,152 GiB.
    host = host_fit(config)
    assert host.total_gib == pytest.approx(70_553_706_496 * 2 / 2**30 + 8 * 3.0)
    assert round(host.total_gib, 1) == 155.4 and host.fits
    assert "rank 0 alone reads the weights in bf16" in host.describe()


def test_a_base_sharded_over_all_gpus_of_two_instances() -> None:
    from core.config.lora_training import host_fit, shard_degree

    config = training(model="llama-3.1-8b", method="lora", instance_count=2, smp={"version": 2}, **P4D)
    assert config.smp.hybrid_shard_degree == 0 and shard_degree(config) == 16
    assert (
        config.fit().model_states_gib
        < training(model="llama-3.1-8b", method="lora", smp=SHARDED, **P4D).fit().model_states_gib
    )
    # Each instance's host holds at most one copy (rank 0's, on the first): 8 processes per host.
    assert host_fit(config).ranks == 8 and host_fit(config).weights_per_rank_gib == pytest.approx(
        8_030_261_248 * 2 / 2**30
    )


def test_a_sharded_adapter_job_is_launched_like_an_smp_v2_job_with_the_lora_flags() -> None:
    from infrastructure.constructs.training_pipeline.finetune_pipeline import distribution

    config = training(model="llama-3.1-8b", method="lora", smp=SHARDED, **P4D)
    assert (config.smp.version, config.smp.tensor_parallel_degree) == (2, 1)  # the defaults under adapters
    assert distribution(config) == {
        "torch_distributed": {"enabled": True},
        "smdistributed": {
            "modelparallel": {
                "enabled": True,
                "parameters": {
                    "tensor_parallel_degree": 1,
                    "hybrid_shard_degree": 8,
                    "sm_activation_offloading": False,
                    "activation_loading_horizon": 4,
                },
            }
        },
    }
    flags = training_job.hyperparameters(config, max_steps=10, learning_rate=1e-4, train_batch_size=4)
    assert flags["backend"] == "smp_v2" and flags["method"] == "lora" and flags["lora_r"] == 16
    assert flags["base_model_id"] == "meta-llama/Llama-3.1-8B"
    # Without training.smp: DDP, no SMP, whatever the instance.
    ddp = training(model="llama-3.1-8b", method="lora", **P4D)
    assert not ddp.shards_base and distribution(ddp) == {"torch_distributed": {"enabled": True}}
    assert training_job.hyperparameters(ddp, max_steps=10, learning_rate=1e-4, train_batch_size=4)["backend"] == "torch"


def test_the_plan_shows_lora_over_a_sharded_base() -> None:
    from generators.plan import describe_training

    lines = "\n".join(
        describe_training(
            training(model="qwen2.5-7b", method="lora", smp={"version": 2, "hybrid_shard_degree": 4}, **P4D)
        )
    )
    assert (
        "qwen2.5-7b: LORA adapters (r 16, alpha 32, attention and MLP projections), over a base sharded 4 ways "
        "(SMP v2, FSDP) x 2 copies" in lines
    )
    assert "rank 0 alone reads the weights in bf16" in lines
