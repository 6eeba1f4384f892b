"""evaluate.py's placement of an adapter's base (training/finetune/placement.py): whole on one device where it fits,
else spread by accelerate over the instance's GPUs, layer by layer; refused before loading when even that does not
hold it. The decisions are tested with the devices' budgets passed in (a meta-device model costs no memory); the
spread path runs for real on CPU, spread over the CPU and the disk (what accelerate can dispatch to without GPUs),
and gives the perplexity of the one-device path. Synth's rules for the spread are checked against these in
test_evaluate_placement_synth.py (the dev suite only: it imports core/)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch
import transformers
from accelerate import init_empty_weights
from accelerate.utils import compute_module_sizes
from finetune import placement
from finetune.adapters import BASE_RECORD_FILE
from finetune.errors import ConfigurationError
from training_helpers import TRAINING_DIR, load_module

LAYERS = 6


def llama_config(
    vocab_size: int = 512, hidden_size: int = 64, layers: int = LAYERS, **extra
) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        **extra,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )


def skeleton(config: transformers.PretrainedConfig) -> torch.nn.Module:
    with init_empty_weights():
        return transformers.AutoModelForCausalLM.from_config(config)


def size_of(model: torch.nn.Module) -> int:
    return compute_module_sizes(model)[""]


def test_a_base_that_fits_the_first_gpu_or_has_no_other_goes_whole() -> None:
    model = skeleton(llama_config())
    size = size_of(model)
    assert placement.device_map(model, {0: size, 1: size}) is None
    # One GPU: the model goes whole on it, as before, whatever synth's sizing said (it refused what does not fit).
    assert placement.device_map(model, {0: size // 4}) is None


def test_a_base_larger_than_one_gpu_is_spread_over_all_whole_layer_by_whole_layer() -> None:
    model = skeleton(llama_config())
    size = size_of(model)
    spread = placement.device_map(model, {gpu: size // 2 for gpu in range(4)})
    assert spread is not None
    order = ["model.embed_tokens", *(f"model.layers.{i}" for i in range(LAYERS)), "model.norm", "lm_head"]
    assert all(name in spread for name in order)  # every decoder layer whole: no entry inside one
    assert not any(name.startswith("model.layers.") and name.count(".") > 2 for name in spread)
    devices = [spread[name] for name in order]
    assert set(devices) <= {0, 1, 2, 3} and len(set(devices)) >= 3 and devices == sorted(devices)
    # The no-split classes come from the model: its decoder layer class.
    assert placement.no_split_classes(model) == ["LlamaDecoderLayer"]


def test_the_no_split_classes_of_a_transformers_4_model() -> None:
    class Model4(torch.nn.Module):  # transformers 4.46 collects them over the submodules in a method
        def _get_no_split_modules(self, device_map: str) -> list[str]:
            assert device_map == "auto"
            return ["Qwen2DecoderLayer"]

    assert placement.no_split_classes(Model4()) == ["Qwen2DecoderLayer"]


def test_a_base_too_large_for_all_gpus_is_refused_before_anything_loads() -> None:
    model = skeleton(llama_config())
    size = size_of(model)
    with pytest.raises(ConfigurationError) as refused:
        placement.device_map(model, {0: size // 4, 1: size // 4})
    message = str(refused.value)
    assert "does not fit the memory of this instance's devices" in message and "even spread over all of them" in message
    assert f"GPU 0 {size // 4 / 2**20:.1f} MiB, GPU 1" in message and "lm_head" in message
    assert "evaluate_instance_type" in message


@pytest.fixture(scope="module")
def adapter_run(tmp_path_factory) -> dict[str, Path]:
    """A tiny fp32 Llama base folder, a LoRA adapter over it (random, non-zero B: it changes the output) with its
    base record, and validation blocks."""
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("evaluate-placement")
    torch.manual_seed(5)
    base = transformers.AutoModelForCausalLM.from_config(llama_config())
    base.save_pretrained(root / "base")
    adapted = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    )
    adapted.save_pretrained(root / "adapter")
    record = {"method": "lora", "model_type": "llama", "hf_id": "example/tiny-llama"}
    (root / "adapter" / BASE_RECORD_FILE).write_text(json.dumps(record))
    validation = root / "validation"
    validation.mkdir()
    blocks = torch.randint(0, 512, (10, 24), generator=torch.Generator().manual_seed(6))
    (validation / "validation.jsonl").write_text("".join(json.dumps({"input_ids": b.tolist()}) + "\n" for b in blocks))
    return {"root": root, "base": root / "base", "adapter": root / "adapter", "validation": validation}


def run_evaluate(run: dict[str, Path], model_dir: Path, memory=None) -> tuple[float, str]:
    evaluate = load_module("training_evaluate_placement", TRAINING_DIR / "evaluate.py")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        report = evaluate.evaluate(model_dir, str(run["validation"]), 3, str(run["base"]), memory)
    return report["metrics"]["perplexity"]["value"], stdout.getvalue()


# PEFT loads the adapter into the disk-offloaded layers' placeholders, then writes it beside their weights.
@pytest.mark.filterwarnings("ignore:for base_model.*copying from a non-meta parameter:UserWarning")
def test_an_adapter_over_a_spread_base_gives_the_perplexity_of_the_whole_base(
    adapter_run, tmp_path, monkeypatch
) -> None:
    # PEFT rewrites the offloaded layers' safetensors files at their path made relative (peft_model.py,
    # _update_offload: os.path.join drops the leading "/"), so under the working directory.
    monkeypatch.chdir(tmp_path)
    whole, log = run_evaluate(adapter_run, adapter_run["adapter"])
    assert "placement: whole on cpu" in log
    size = size_of(skeleton(llama_config()))
    # The CPU may hold a third of the model: accelerate dispatches the rest to the disk, with its hooks on the layers.
    spread, log = run_evaluate(adapter_run, adapter_run["adapter"], {"cpu": size // 3, "disk": 10 * size})
    assert "placement: spread over cpu" in log and "disk" in log, log
    assert spread == pytest.approx(whole, rel=1e-6)
    base_only, _ = run_evaluate(adapter_run, adapter_run["base"])
    assert abs(base_only - whole) > 1e-3 * whole  # the adapter is applied on both paths, and matters


def test_evaluate_refuses_a_base_its_gpus_cannot_hold_before_loading_it(adapter_run) -> None:
    size = size_of(skeleton(llama_config()))
    # GPU budgets on a machine without GPUs: the refusal comes from the sizes alone, before any weight moves.
    with pytest.raises(ConfigurationError, match=r"does not fit the memory of this instance's devices"):
        run_evaluate(adapter_run, adapter_run["adapter"], {0: size // 5, 1: size // 5})
