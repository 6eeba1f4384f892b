"""A model folder the installed transformers cannot read, or would read differently from the release that wrote it,
is refused by the handler's start-up with the file, the field, the value, the version and the fix, before anything
loads (lmi_folder_check.py). The handler tests pass in the dev venv (transformers 5) and in the LMI 0.27.0 image's
environment (transformers 4.39.0, requirements/images/lmi-0.27.txt), where these folders are refused: each case says
from which release on transformers reads it."""

from __future__ import annotations

import json
import shutil

import pytest
import transformers
from lmi_config import ConfigError
from lmi_folder_check import ReaderSupport, check_model_folder, folder_problems, installed_support

from local.tiny import ARCHITECTURES, build_tokenizer

INSTALLED = tuple(int(part) for part in transformers.__version__.split(".")[:2])
# transformers 5.0 names every fast tokenizer TokenizersBackend and writes/reads rope_parameters; 4.43.0 added
# Llama 3.1's rope_scaling {"rope_type": "llama3"} (release notes of v4.43.0 and v5.0.0).
READS_TRANSFORMERS_5_FOLDERS = INSTALLED >= (5, 0)
READS_LLAMA3_ROPE_SCALING = INSTALLED >= (4, 43)

# What transformers 4.39.0 reads, as far as these cases ask (its CONFIG_MAPPING_NAMES, TOKENIZER_MAPPING_NAMES and
# the __init__ parameters of LlamaConfig and Qwen2Config): a record, as a check without that release would use.
TRANSFORMERS_4_39 = ReaderSupport(
    version="4.39.0",
    model_types=frozenset({"gptj", "llama", "qwen2", "mistral"}),
    tokenizer_classes=frozenset({"PreTrainedTokenizerFast", "LlamaTokenizer", "LlamaTokenizerFast", "Qwen2Tokenizer"}),
    config_parameters={
        "llama": frozenset({"hidden_size", "rope_theta", "rope_scaling", "attention_bias"}),
        "qwen2": frozenset({"hidden_size", "rope_theta", "sliding_window", "use_sliding_window"}),
    },
)


def _initialize(handler_module, folder):
    service = handler_module.TextGenerationService()
    service.initialize({"weights_dir": str(folder), "dtype": "fp32", "model_dir": str(folder)})
    return service


def _rewrite(path, **changes):
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """A tiny Llama (grouped-query attention, rope_theta 500000 as Llama 3) with the tiny tokenizer, as the
    installed transformers saves it."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=0, eos_token_id=0, rope_theta=500000.0,
    )  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-llama")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_folder_the_installed_transformers_wrote_passes(tiny_model_dir, arch):
    check_model_folder(str(tiny_model_dir(arch)))


def test_the_tiny_llama_the_installed_transformers_wrote_passes(tiny_llama_dir):
    check_model_folder(str(tiny_llama_dir))


def test_a_tokenizer_saved_by_transformers_5_is_refused_where_its_class_is_unknown(
    handler_module, tiny_model_dir, tmp_path
):
    folder = tmp_path / "v5-tokenizer"
    shutil.copytree(tiny_model_dir("gptj"), folder)
    _rewrite(folder / "tokenizer_config.json", tokenizer_class="TokenizersBackend")  # as transformers 5 saves it
    if READS_TRANSFORMERS_5_FOLDERS:
        assert _initialize(handler_module, folder).initialized
        return
    # Without the check transformers 4.39 fails later, inside AutoTokenizer, naming neither the file nor the fix.
    with pytest.raises(ConfigError) as error:
        _initialize(handler_module, folder)
    message = str(error.value)
    assert "tokenizer_config.json: tokenizer_class='TokenizersBackend'" in message
    assert f"transformers {transformers.__version__}" in message
    assert "PreTrainedTokenizerFast" in message


def test_rope_parameters_the_reader_ignores_are_refused_not_served_wrong(handler_module, tiny_llama_dir, tmp_path):
    """transformers 5 writes rope_theta inside rope_parameters; 4.39 ignores that key and loads the model with its
    default rope_theta (10000): without the check the endpoint starts and every answer is wrong."""
    folder = tmp_path / "v5-config"
    shutil.copytree(tiny_llama_dir, folder)
    _rewrite(
        folder / "config.json",
        rope_theta=None,
        rope_scaling=None,
        rope_parameters={"rope_theta": 500000.0, "rope_type": "default"},
        transformers_version="5.0.0",
    )
    if READS_TRANSFORMERS_5_FOLDERS:
        assert _initialize(handler_module, folder).initialized
        return
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(folder).rope_theta != 500000.0  # what serving it would have used
    with pytest.raises(ConfigError) as error:
        _initialize(handler_module, folder)
    message = str(error.value)
    assert "config.json: rope_parameters=" in message
    assert "model_type='llama'" in message
    assert "rope_theta=500000.0" in message
    assert f"transformers {transformers.__version__}" in message


def test_llama_3_1_rope_scaling_is_refused_with_the_field_where_the_reader_rejects_it(
    handler_module, tiny_llama_dir, tmp_path
):
    folder = tmp_path / "llama-3.1-config"
    shutil.copytree(tiny_llama_dir, folder)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 64}  # fmt: skip
    _rewrite(folder / "config.json", rope_parameters=None, rope_theta=500000.0, rope_scaling=llama3)
    if READS_LLAMA3_ROPE_SCALING:
        assert _initialize(handler_module, folder).initialized
        return
    with pytest.raises(ConfigError) as error:
        _initialize(handler_module, folder)
    message = str(error.value)
    assert "config.json rope_scaling=" in message
    assert "engine vllm" in message


def test_a_model_type_the_reader_does_not_know_is_refused():
    (problem,) = folder_problems({"model_type": "qwen3", "transformers_version": "4.51.0"}, None, TRANSFORMERS_4_39)
    assert "config.json: model_type='qwen3' is not an architecture transformers 4.39.0 knows" in problem
    assert "'4.51.0'" in problem and "engine vllm" in problem


def test_a_rope_scaling_the_readers_config_class_does_not_take_is_refused():
    """4.39's Qwen2Config has no rope_scaling: YaRN for a 128k context would be dropped without an error."""
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    (problem,) = folder_problems({"model_type": "qwen2", "rope_scaling": yarn}, None, TRANSFORMERS_4_39)
    assert "rope_scaling=" in problem and "model_type='qwen2'" in problem and "it reads rope_theta" in problem
    assert folder_problems({"model_type": "qwen2", "rope_scaling": None}, None, TRANSFORMERS_4_39) == []


@pytest.mark.parametrize(
    ("tokenizer_class", "readable"),
    [("LlamaTokenizerFast", True), ("LlamaTokenizer", True), ("Qwen2TokenizerFast", True),
     ("PreTrainedTokenizerFast", True), ("TokenizersBackend", False), ("Qwen3Tokenizer", False)],
)  # fmt: skip
def test_tokenizer_classes_resolve_as_autotokenizer_resolves_them(tokenizer_class, readable):
    problems = folder_problems(None, {"tokenizer_class": tokenizer_class}, TRANSFORMERS_4_39)
    assert (problems == []) is readable


def test_a_folder_without_the_two_files_has_nothing_to_refuse(tmp_path):
    check_model_folder(str(tmp_path))


def test_a_config_that_is_not_json_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config.json is not readable JSON"):
        check_model_folder(str(tmp_path))


def test_the_installed_readers_record_round_trips_for_a_check_without_it():
    support = installed_support(model_types=["llama"])
    assert ReaderSupport.from_dict(json.loads(json.dumps(support.to_dict()))) == support
    assert support.version == transformers.__version__
    assert "llama" in support.model_types and "PreTrainedTokenizerFast" in support.tokenizer_classes


# --- the staged folder's manifest (stage_model.py writes it; check_staged_files reads it) ---------------------------


def _stage(folder, files: dict[str, bytes]):
    """A staged folder: `files`, and the manifest stage_model.py writes beside them."""
    import hashlib

    from lmi_folder_check import STAGED_MANIFEST

    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    manifest = {
        "model_id": "bigscience/bloom",
        "commit": "0" * 40,
        "files": {name: len(data) for name, data in files.items()},
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }
    (folder / STAGED_MANIFEST).write_text(json.dumps(manifest))
    return folder


STAGED = {"config.json": b"{}", "tp_00_00.pt": b"shard zero", "tp_01_00.pt": b"shard one", "non-tp.pt": b"embeddings"}


def test_a_staged_folder_as_staged_passes_and_a_folder_without_a_manifest_is_not_checked(tmp_path):
    from lmi_folder_check import check_staged_files

    check_staged_files(str(_stage(tmp_path / "staged", STAGED)))
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "pytorch_model.bin").write_bytes(b"anything")
    check_staged_files(str(tmp_path / "own"))


@pytest.mark.bad_input("config")
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: (f / "tp_01_00.pt").write_bytes(b"shard 1ne"), r"tp_01_00\.pt: its sha256 is not the [0-9a-f]{64}"),
        (lambda f: (f / "extra.bin").write_bytes(b"x"), r"extra\.bin is a pickle that \.staged-sha256\.json does not"),
        (lambda f: (f / "config.json").write_bytes(b"{ }"), r"config\.json has 3 bytes, 2 when staged"),
    ],
    ids=["a shard with other bytes", "a pickle that was never staged", "a file of another size"],
)
def test_a_staged_folder_changed_since_staging_is_refused_naming_the_file(tmp_path, change, message):
    from lmi_folder_check import check_staged_files

    folder = _stage(tmp_path, STAGED)
    change(folder)
    with pytest.raises(ConfigError, match=rf"is not what was staged \(\.staged-sha256\.json\): .*{message}"):
        check_staged_files(str(folder))


def test_each_rank_hashes_its_share_of_the_pickles(tmp_path):
    from lmi_folder_check import check_staged_files

    folder = _stage(tmp_path, STAGED)
    (folder / "tp_01_00.pt").write_bytes(b"shard 1ne")  # the third of non-tp.pt, tp_00_00.pt, tp_01_00.pt
    check_staged_files(str(folder), rank=1, world_size=2)  # rank 1 of 2 hashes only tp_00_00.pt
    with pytest.raises(ConfigError, match=r"tp_01_00\.pt: its sha256"):
        check_staged_files(str(folder), rank=0, world_size=2)  # rank 0: non-tp.pt and tp_01_00.pt
