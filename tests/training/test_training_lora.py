"""LoRA through train.py on tiny Llama-, Mistral- and Qwen2-architecture models (grouped-query attention: fewer KV
heads than attention heads): the loss falls with only the adapters training, the output is an adapter folder with the
record of its base, the adapter applied through PEFT equals the merged weights, evaluate.py applies it, and a run
killed mid-way resumes to bit-identical adapter weights. QLoRA's 4-bit load is checked on what reaches
from_pretrained (bitsandbytes does not run on CPU)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from finetune.adapters import BASE_RECORD_FILE
from safetensors.torch import load_file
from training_helpers import (
    ADAPTER_FOLDER_FILES,
    TINY_LORA_ADAPTER_CONFIG,
    TRAINING_DIR,
    adapter_folder_files,
    assert_adapter_config,
    assert_training_loss_falls,
    load_module,
    run_train_py_until_killed,
    train_arguments,
)

BASE_COMMIT = "0123456789abcdef0123456789abcdef01234567"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
CONFIGS = {
    "llama": transformers.LlamaConfig,
    "mistral": transformers.MistralConfig,
    "qwen2": transformers.Qwen2Config,
}
LORA_FLAGS = {
    "method": "lora",
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.1,  # dropout on: the resume must restore the RNG to match bit for bit
    "max_steps": 20,
    "lr": 1e-2,
    "validation_freq": 10,
    "checkpoint_freq": 5,
    "base_model_name": "tiny-base",
    "base_model_id": "example/tiny-base",
    "base_model_revision": BASE_COMMIT,
}


@pytest.fixture(scope="module")
def bases(tiny_assets, tmp_path_factory) -> dict[str, Path]:
    """A 'pretrained' HF folder (config, safetensors, tokenizer) per architecture, 2 KV heads for 4 query heads."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_assets["tokenizer"])
    folders = {}
    for arch, config_class in CONFIGS.items():
        config = config_class(
            vocab_size=len(tokenizer),
            num_key_value_heads=2,
            max_position_embeddings=128,
            bos_token_id=0,
            eos_token_id=0,
            **TINY,
        )
        torch.manual_seed(3)
        model = transformers.AutoModelForCausalLM.from_config(config)
        folder = tmp_path_factory.mktemp(f"base-{arch}")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[arch] = folder
    return folders


def lora_arguments(tiny_assets, prepared_data, base: Path, run_dir: Path, **overrides) -> list[str]:
    arguments = train_arguments(tiny_assets, prepared_data, run_dir, **{**LORA_FLAGS, **overrides})
    index = arguments.index("--model_config")  # a pretrained base instead of a random-init config
    arguments[index : index + 2] = ["--pretrained_dir", str(base)]
    return arguments


@pytest.fixture(scope="module")
def lora_runs(train_script, tiny_assets, prepared_data, bases, tmp_path_factory) -> dict[str, dict]:
    """One LoRA run per architecture, in-process; the tests below read their logs and outputs."""
    runs = {}
    for arch, base in bases.items():
        run_dir = tmp_path_factory.mktemp(f"lora-{arch}")
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            train_script.run(lora_arguments(tiny_assets, prepared_data, base, run_dir), {})
        runs[arch] = {"dir": run_dir, "stdout": stdout.getvalue(), "base": base}
    return runs


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_lora_loss_falls_with_only_the_adapters_trained(lora_runs, arch) -> None:
    run = lora_runs[arch]
    assert_training_loss_falls(run["stdout"], LORA_FLAGS["max_steps"], window=5)

    banner = next(line for line in run["stdout"].splitlines() if line.startswith("training: "))
    fields = dict(item.split("=", 1) for item in banner.removeprefix("training: ").split())
    assert fields["backend"] == "lora" and fields["method"] == "lora" and fields["model_type"] == arch
    # r x (in + out) for each adapted projection in each of the 2 layers: q/o 64x64, k/v 64->32 (2 KV heads of 16),
    # gate/up 64->128, down 128->64.
    per_layer = 8 * ((64 + 64) * 2 + (64 + 32) * 2 + (64 + 128) * 3)
    assert int(fields["trainable_parameters"]) == 2 * per_layer


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_the_output_is_an_adapter_folder_with_its_base_record(lora_runs, arch) -> None:
    model_dir = lora_runs[arch]["dir"] / "model"
    assert adapter_folder_files(model_dir) == ADAPTER_FOLDER_FILES
    assert_adapter_config(model_dir, **TINY_LORA_ADAPTER_CONFIG, revision=BASE_COMMIT)
    weights = load_file(model_dir / "adapter_model.safetensors")
    assert weights and all(re.search(r"\.lora_[AB]\.weight$", name) for name in weights)
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())
    record = json.loads((model_dir / BASE_RECORD_FILE).read_text())
    assert record == {
        "name": "tiny-base",
        "hf_id": "example/tiny-base",
        "revision": BASE_COMMIT,
        "model_type": arch,
        "method": "lora",
        "precision": "fp32",  # the dtype the frozen base was held in, and is evaluated in
        "lora": {"r": 8, "alpha": 16, "dropout": 0.1, "target_modules": "auto"},
    }


def test_checkpoints_hold_only_the_adapters(lora_runs) -> None:
    checkpoint = lora_runs["llama"]["dir"] / "checkpoints" / "step_00000015"
    assert sorted(path.name for path in checkpoint.iterdir() if path.is_file()) == [
        "adapter.pt",
        "manifest-node0.json",
        "optimizer.pt",
        "trainer_state.json",
    ]
    saved = torch.load(checkpoint / "adapter.pt")
    assert saved and all(".lora_" in name for name in saved)


def test_the_adapter_through_peft_equals_the_merged_weights(lora_runs) -> None:
    from peft import PeftModel

    run = lora_runs["mistral"]
    base = transformers.AutoModelForCausalLM.from_pretrained(run["base"]).eval()
    input_ids = torch.randint(0, base.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base_logits = base(input_ids=input_ids).logits
        adapted = PeftModel.from_pretrained(base, str(run["dir"] / "model")).eval()
        adapter_logits = adapted(input_ids=input_ids).logits
        merged = adapted.merge_and_unload()
        merged_logits = merged(input_ids=input_ids).logits
    assert type(merged).__name__ == "MistralForCausalLM"
    assert not (base_logits - adapter_logits).abs().max() < 1e-3  # the adapter changed the model
    torch.testing.assert_close(merged_logits, adapter_logits, rtol=1e-5, atol=1e-5)


def test_evaluate_applies_the_adapter_to_its_base(lora_runs, prepared_data, tmp_path) -> None:
    run = lora_runs["qwen2"]
    evaluate = load_module("training_evaluate_lora", TRAINING_DIR / "evaluate.py")
    arguments = ["--model_dir", str(run["dir"] / "model"), "--validation_dir", str(prepared_data["validation"])]
    assert evaluate.main([*arguments, "--base_model_dir", str(run["base"]), "--output_dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "evaluation.json").read_text())
    final = json.loads((run["dir"] / "output" / "metrics.json").read_text())["final"]
    assert report["metrics"]["perplexity"]["value"] == pytest.approx(final["val_perplexity"], rel=1e-4)
    # Without its base the adapter cannot be evaluated: exit 2, naming the base it needs.
    assert evaluate.main([*arguments, "--base_model_dir", str(tmp_path / "none"), "--output_dir", str(tmp_path)]) == 2


def test_the_base_is_evaluated_in_the_precision_the_adapter_trained_over(lora_runs, tmp_path) -> None:
    from finetune.backends.lora import load_adapter_model

    run = lora_runs["llama"]
    adapter = tmp_path / "adapter"
    shutil.copytree(run["dir"] / "model", adapter)
    record = json.loads((adapter / BASE_RECORD_FILE).read_text())
    assert record["precision"] == "fp32"  # these CPU runs train in fp32, over a base stored in fp32

    def base_dtype() -> torch.dtype:
        return load_adapter_model(adapter, str(run["base"]), torch.device("cpu")).get_base_model().dtype

    assert base_dtype() == torch.float32
    # An adapter trained over a bf16 base (GPT-J's checkpoint is fp32) is evaluated over the bf16 base.
    (adapter / BASE_RECORD_FILE).write_text(json.dumps({**record, "precision": "bf16"}))
    assert base_dtype() == torch.bfloat16
    # A record written before the precision was: the dtype the checkpoint is stored in.
    (adapter / BASE_RECORD_FILE).write_text(json.dumps({k: v for k, v in record.items() if k != "precision"}))
    assert base_dtype() == torch.float32


@pytest.mark.bad_input("kill")
def test_a_killed_lora_run_resumes_to_identical_adapter_weights(
    lora_runs, train_script, tiny_assets, prepared_data, tmp_path, clean_environment, capsys
) -> None:
    run = lora_runs["llama"]
    killed = tmp_path / "killed"
    arguments = lora_arguments(tiny_assets, prepared_data, run["base"], killed)
    run_train_py_until_killed(arguments, when="step=13 ")
    assert not (killed / "model").exists()
    # The same checkpoint with another torch RNG state: a control that the dropout draws from the RNG the resume
    # restores, so that bit-identical weights below mean the RNG was restored, not that nothing was random.
    reseeded = tmp_path / "reseeded"
    shutil.copytree(killed / "checkpoints", reseeded / "checkpoints")
    _reseed_torch_rng(reseeded / "checkpoints" / "step_00000010")

    capsys.readouterr()
    train_script.run(arguments, {})
    assert re.search(r"resumed from checkpoint \S+step_00000010 at step 10\n", capsys.readouterr().out)
    expected = load_file(run["dir"] / "model" / "adapter_model.safetensors")
    actual = load_file(killed / "model" / "adapter_model.safetensors")
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[name], actual[name]) for name in expected)

    train_script.run(lora_arguments(tiny_assets, prepared_data, run["base"], reseeded), {})
    assert re.search(r"resumed from checkpoint \S+step_00000010 at step 10\n", capsys.readouterr().out)
    other = load_file(reseeded / "model" / "adapter_model.safetensors")
    assert not all(torch.equal(expected[name], other[name]) for name in expected), "the dropout drew nothing"


def _reseed_torch_rng(checkpoint: Path) -> None:
    """Replace the torch RNG state every rank saved in `checkpoint` with another seed's (finetune/checkpoints.py)."""
    files = sorted((checkpoint / "rng").glob("rank_*.pt"))
    assert files, f"no RNG state in {checkpoint}"
    for path in files:
        state = torch.load(path, weights_only=False)
        state["torch"] = torch.Generator().manual_seed(12345).get_state()
        torch.save(state, path)


@pytest.mark.bad_input("config")
def test_resuming_with_other_lora_settings_is_refused(lora_runs, train_script, tiny_assets, prepared_data, tmp_path):
    from finetune.errors import ConfigurationError

    run = lora_runs["llama"]
    shutil.copytree(run["dir"] / "checkpoints", tmp_path / "checkpoints")
    arguments = lora_arguments(tiny_assets, prepared_data, run["base"], tmp_path, lora_target_modules="q_proj,v_proj")
    with pytest.raises(ConfigurationError, match="adapters for other LoRA settings"):
        train_script.run(arguments, {})


# --- QLoRA: the 4-bit load, checked on what reaches from_pretrained (bitsandbytes does not run on CPU) -----------


def test_qlora_loads_the_base_in_4bit_nf4_on_the_rank_gpu_then_adds_adapters(bases, monkeypatch) -> None:
    import peft
    from finetune.backends import lora
    from finetune.hyperparameters import Hyperparameters
    from finetune.layout import ParallelLayout
    from finetune.modeling import build_model, load_model_source

    calls = []
    tiny = transformers.AutoModelForCausalLM.from_pretrained(bases["qwen2"])

    def from_pretrained(path, **options):
        calls.append((path, options))
        return tiny, {"missing_keys": []}

    prepared = []
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(peft, "prepare_model_for_kbit_training", lambda model, **kw: prepared.append(kw) or model)
    hp = Hyperparameters(method="qlora", pretrained_dir=str(bases["qwen2"]), bf16=True, lora_r=4)
    backend = lora.LoraBackend(hp, ParallelLayout(), "bf16", {})
    backend.device = torch.device("cuda", 3)  # the rank's GPU; setup() would refuse this CPU-only machine
    source = load_model_source(str(bases["qwen2"]), None, None)
    model = backend.create_model(lambda dtype, load_weights=True, **options: build_model(source, dtype, **options))

    ((path, options),) = calls
    assert path == str(bases["qwen2"]) and options["config"] is source.config
    quantization = options["quantization_config"]
    assert quantization.load_in_4bit and not quantization.load_in_8bit
    assert quantization.bnb_4bit_quant_type == "nf4" and quantization.bnb_4bit_use_double_quant
    assert quantization.bnb_4bit_compute_dtype == torch.bfloat16
    assert options["device_map"] == {"": torch.device("cuda", 3)}  # quantized as it moves to this rank's GPU
    # transformers 5.x calls it dtype; 4.46.3 (the SMP v2 image) torch_dtype.
    assert options.get("dtype", options.get("torch_dtype")) == torch.bfloat16
    assert prepared == [{"use_gradient_checkpointing": False}]
    assert type(model).__name__ == "PeftModelForCausalLM" and model.peft_config["default"].r == 4


@pytest.mark.bad_input("config")
def test_qlora_is_refused_on_cpu(train_script, tiny_assets, prepared_data, bases, tmp_path, capsys) -> None:
    arguments = lora_arguments(tiny_assets, prepared_data, bases["llama"], tmp_path, method="qlora", bf16="true")
    assert train_script.main(arguments, {}) == 2
    assert "--method qlora needs a CUDA GPU: bitsandbytes' 4-bit base weights do not run on CPU" in (
        capsys.readouterr().err
    )


@pytest.mark.bad_input("config")
def test_evaluating_a_qlora_adapter_is_refused_on_cpu(lora_runs, prepared_data, tmp_path, capsys) -> None:
    run = lora_runs["llama"]
    adapter = tmp_path / "adapter"
    shutil.copytree(run["dir"] / "model", adapter)
    record = json.loads((adapter / BASE_RECORD_FILE).read_text())
    (adapter / BASE_RECORD_FILE).write_text(json.dumps({**record, "method": "qlora"}))
    evaluate = load_module("training_evaluate_qlora", TRAINING_DIR / "evaluate.py")
    arguments = ["--model_dir", str(adapter), "--validation_dir", str(prepared_data["validation"])]
    assert evaluate.main([*arguments, "--base_model_dir", str(run["base"]), "--output_dir", str(tmp_path)]) == 2
    assert "evaluating a QLoRA adapter over its 4-bit base: --method qlora needs a CUDA GPU" in capsys.readouterr().err


# --- flags train.py refuses before it loads anything -----------------------------------------------------------

BAD_FLAGS = [
    (["--lora_r", "0"], r"--lora_r must be at least 1, got 0"),
    (["--lora_alpha", "0"], r"--lora_alpha must be at least 1, got 0"),
    (["--lora_dropout", "1"], r"--lora_dropout must be in \[0, 1\), got 1\.0"),
    (["--lora_target_modules", "q_proj,,v_proj"], r"--lora_target_modules: .*'' is not a module name"),
    (["--lora_target_modules", "q_proj,q_proj"], r"--lora_target_modules: module names repeat"),
    (["--method", "dora"], r"argument --method: expected one of full, lora, qlora, got 'dora'"),
    (["--method", "lora", "--backend", "smp_v1"], r"--method lora does not run on SMP v1"),
    (["--method", "qlora", "--pretrained_dir", "m", "--backend", "smp_v2"], r"--method qlora with SMP v2"),
    (["--method", "qlora", "--model_config", "c.json"], r"--method qlora quantizes pretrained weights"),
    (["--method", "qlora", "--pretrained_dir", "m", "--fp16", "true"], r"--method qlora computes in bf16"),
]


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS, ids=[" ".join(flags) for flags, _ in BAD_FLAGS])
def test_adapter_flags_train_py_refuses(flags, message) -> None:
    from finetune.errors import ConfigurationError
    from finetune.hyperparameters import parse_hyperparameters

    model = [] if "--model_config" in flags or "--pretrained_dir" in flags else ["--model_config", "c.json"]
    with pytest.raises(ConfigurationError, match=message):
        parse_hyperparameters([*flags, *model], environ={})


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("arch", "targets", "message"),
    [
        ("llama", "c_attn", r"c_attn is not a linear layer of llama models; choose from q_proj, k_proj"),
        ("gpt2", "auto", r"there is no default LoRA target list for model type 'gpt2'"),
        ("gpt2", "c_proj,q_proj", r"GPT2LMHeadModel has no linear layer named q_proj; its linear layers are"),
    ],
)
def test_target_modules_the_model_lacks_stop_train_py(
    train_script, tiny_assets, prepared_data, bases, tmp_path, capsys, arch, targets, message
) -> None:
    if arch == "gpt2":
        from local.tiny import build_config

        config = tmp_path / "gpt2.json"
        config.write_text(json.dumps(build_config("gpt2", vocab_size=bases_vocab(bases)).to_dict()))
        arguments = train_arguments(
            tiny_assets, prepared_data, tmp_path, model_config=config, method="lora", lora_target_modules=targets
        )
    else:
        arguments = lora_arguments(tiny_assets, prepared_data, bases[arch], tmp_path, lora_target_modules=targets)
    assert train_script.main(arguments, {}) == 2
    assert re.search(message, capsys.readouterr().err)


def bases_vocab(bases: dict[str, Path]) -> int:
    return int(json.loads((bases["llama"] / "config.json").read_text())["vocab_size"])
