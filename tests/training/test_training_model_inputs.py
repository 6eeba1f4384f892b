"""A model or tokenizer folder that cannot be read stops train.py with exit status 2 and a message naming the file
(never a traceback), and the weights of a pretrained folder are read the same way on every transformers line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from finetune.errors import ConfigurationError
from finetune.modeling import read_hf_weights
from safetensors.torch import load_file
from training_helpers import train_arguments

from local.tiny import save_tiny_model


def _without(arguments: list[str], *flags: str) -> list[str]:
    for flag in flags:
        index = arguments.index(flag)
        del arguments[index : index + 2]
    return arguments


def _break(folder: Path, file: str, content: str | None) -> None:
    if content is None:
        (folder / file).unlink()
    else:
        (folder / file).write_text(content)


def _tokenizer_json_with_unknown_pre_tokenizer(folder: Path) -> str:
    """Valid JSON that the tokenizers library (Rust) refuses with a plain Exception."""
    value = json.loads((folder / "tokenizer.json").read_text())
    value["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}
    return json.dumps(value)


TOKENIZER_CASES = [
    pytest.param("tokenizer.json", "{not json", r"tokenizer\.json is not readable JSON", id="tokenizer-json-not-json"),
    pytest.param("tokenizer.json", "UNKNOWN_PRE_TOKENIZER", r"tokenizer\.json: Exception: data did not match any variant", id="tokenizer-json-rejected-by-tokenizers"),
    pytest.param("tokenizer.json", '{"model": 3}', r"KeyError: 'added_tokens'|tokenizer\.json", id="tokenizer-json-wrong-shape"),
    pytest.param("tokenizer_config.json", "not json at all", r"tokenizer_config\.json is not readable JSON", id="tokenizer-config-not-json"),
    pytest.param("tokenizer_config.json", "[1, 2]", r"tokenizer_config\.json holds a JSON list, not an object", id="tokenizer-config-a-list"),
    pytest.param("NO_TOKENIZER", None, r"has no tokenizer files \(tokenizer\.json, tokenizer_config\.json", id="no-tokenizer-files"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("file", "content", "message"), TOKENIZER_CASES)
def test_an_unreadable_tokenizer_exits_2_with_a_message(
    train_script, tiny_assets, prepared_data, tmp_path, capsys, clean_environment, file, content, message
) -> None:
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(tiny_assets["tokenizer"], tokenizer)
    if file == "NO_TOKENIZER":
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (tokenizer / name).unlink(missing_ok=True)
        # transformers 5.x builds an empty tokenizer from a bare config.json instead of failing
        shutil.copy(tiny_assets["config"], tokenizer / "config.json")
    elif content == "UNKNOWN_PRE_TOKENIZER":
        _break(tokenizer, file, _tokenizer_json_with_unknown_pre_tokenizer(tokenizer))
    else:
        _break(tokenizer, file, content)
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path / "run", tokenizer_dir=tokenizer, max_steps=1)
    assert train_script.main(arguments, {}) == 2
    error = capsys.readouterr().err
    assert error.startswith("train.py: error: cannot load a tokenizer (") and "Traceback" not in error
    assert str(tokenizer) in error
    with pytest.raises(ConfigurationError, match=message):
        train_script.run(arguments, {})


CONFIG_CASES = [
    pytest.param("{oops", r"config\.json is not readable JSON", id="not-json"),
    pytest.param("\udcff", r"config\.json is not readable JSON", id="not-utf8"),
    pytest.param("[1, 2]", r"config\.json holds a JSON list, not an object", id="a-list"),
    pytest.param("{}", r"its config\.json cannot be loaded \(ValueError: Unrecognized model", id="no-model-type"),
    pytest.param('{"model_type": "no-such-model"}', r"its config\.json cannot be loaded \(", id="unknown-model-type"),
]  # fmt: skip


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(("content", "message"), CONFIG_CASES)
def test_an_unreadable_pretrained_config_exits_2_with_a_message(
    train_script, tiny_assets, prepared_data, tmp_path, capsys, clean_environment, content, message
) -> None:
    pretrained = save_tiny_model(tmp_path / "channel-model", arch="gptj")
    (pretrained / "config.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    arguments = _without(
        train_arguments(tiny_assets, prepared_data, tmp_path / "run", max_steps=1), "--model_config", "--tokenizer_dir"
    )
    environ = {"SM_CHANNEL_MODEL": str(pretrained)}
    capsys.readouterr()  # save_pretrained's progress bar
    assert train_script.main(arguments, environ) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"train.py: error: pretrained model folder {pretrained}") and "Traceback" not in error
    with pytest.raises(ConfigurationError, match=message):
        train_script.run(arguments, environ)


@pytest.mark.bad_input("config")
def test_a_model_config_of_an_unknown_type_exits_2(
    train_script, tiny_assets, prepared_data, tmp_path, capsys, clean_environment
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model", "vocab_size": 512}))
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path / "run", model_config=tmp_path / "config.json")
    assert train_script.main(arguments, {}) == 2
    assert f"train.py: error: --model_config {tmp_path / 'config.json'}: ValueError: " in capsys.readouterr().err


def test_reads_sharded_safetensors_and_pytorch_bin_weights(tmp_path) -> None:
    """transformers 4.21 (the SMP v1 pin) cannot read safetensors, so the weights are read here, in every layout
    stage_model.py copies from the hub."""
    folder = save_tiny_model(tmp_path / "model", arch="gptj")
    weights = load_file(folder / "model.safetensors")
    assert read_hf_weights(str(folder)).keys() == weights.keys()

    names = sorted(weights)
    half = len(names) // 2
    sharded = tmp_path / "sharded"
    shutil.copytree(folder, sharded)
    (sharded / "model.safetensors").unlink()
    shards = {"a.bin": names[:half], "b.bin": names[half:]}
    for shard, keys in shards.items():
        torch.save({name: weights[name] for name in keys}, sharded / shard)
    index = {"metadata": {}, "weight_map": {name: shard for shard, keys in shards.items() for name in keys}}
    (sharded / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    loaded = read_hf_weights(str(sharded))
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[name], weights[name]) for name in names)

    (sharded / "b.bin").unlink()
    with pytest.raises(ConfigurationError, match=r"lists shards that are not in .*: b\.bin"):
        read_hf_weights(str(sharded))
    (sharded / "pytorch_model.bin.index.json").unlink()
    with pytest.raises(ConfigurationError, match=r"has no weights \(model\.safetensors or"):
        read_hf_weights(str(sharded))


@pytest.mark.bad_input("config")
def test_pretrained_weights_missing_a_tensor_are_refused(
    train_script, tiny_assets, prepared_data, tmp_path, clean_environment
) -> None:
    from safetensors.torch import save_file

    pretrained = save_tiny_model(tmp_path / "channel-model", arch="gptj")
    weights = load_file(pretrained / "model.safetensors")
    del weights["transformer.h.1.mlp.fc_in.weight"]
    save_file(weights, str(pretrained / "model.safetensors"), metadata={"format": "pt"})
    arguments = _without(
        train_arguments(tiny_assets, prepared_data, tmp_path / "run", max_steps=1), "--model_config", "--tokenizer_dir"
    )
    with pytest.raises(
        ConfigurationError, match=r"lack 1 of the model's tensors \(e\.g\. transformer\.h\.1\.mlp\.fc_in"
    ):
        train_script.run(arguments, {"SM_CHANNEL_MODEL": str(pretrained)})


def _staged_pickle_folder(tmp_path: Path) -> Path:
    """The tiny GPT-J as a pickle-only repository is staged: pytorch_model.bin, and stage_model.py's manifest."""
    from finetune.staged import MANIFEST, manifest, sha256_file

    folder = save_tiny_model(tmp_path / "staged", arch="gptj")
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    names = {p.relative_to(folder).as_posix(): p for p in files}
    sizes = {name: p.stat().st_size for name, p in names.items()}
    hashes = {name: sha256_file(p) for name, p in names.items()}
    (folder / MANIFEST).write_text(json.dumps(manifest("EleutherAI/gpt-j-6b", "0" * 40, sizes, hashes)))
    return folder


def _tamper(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, other bytes
    path.write_bytes(bytes(data))


@pytest.mark.bad_input("config")
def test_staged_pickles_that_changed_since_staging_are_refused_before_they_are_unpickled(tmp_path) -> None:
    """Every loading path checks the staged folder against its manifest first: read_hf_weights (the full-weights
    jobs, and Evaluate's model), from_pretrained in the dtype (the LoRA jobs, and Evaluate's base for an adapter)."""
    import evaluate
    from finetune.modeling import ModelSource, _config_from_folder, build_model

    folder = _staged_pickle_folder(tmp_path)
    assert read_hf_weights(str(folder))  # as staged: read
    _tamper(folder / "pytorch_model.bin")
    source = ModelSource(_config_from_folder(folder, "pretrained model folder"), None, str(folder))
    refused = r"staged model folder .* is not what was staged .*pytorch_model\.bin: its sha256 is not the [0-9a-f]{64}"
    with pytest.raises(ConfigurationError, match=refused):
        read_hf_weights(str(folder))
    with pytest.raises(ConfigurationError, match=refused):
        build_model(source, torch.float32, direct=True)
    with pytest.raises(ConfigurationError, match=refused):
        evaluate._load_model(folder, None, torch.device("cpu"), None)


@pytest.mark.bad_input("config")
def test_a_pickle_the_staging_never_copied_is_refused(tmp_path) -> None:
    folder = _staged_pickle_folder(tmp_path)
    torch.save({}, folder / "optimizer.pt")
    with pytest.raises(ConfigurationError, match=r"optimizer\.pt is a pickle that .*\.staged-sha256\.json does not"):
        read_hf_weights(str(folder))
