"""A model or tokenizer folder the jobs' libraries cannot read is refused with the file and the reason at the earliest
point (training/finetune/compatibility.py): at staging what a job or endpoint of the stage cannot read (the readers
synth names), at a job's start what its own image's transformers or tokenizers cannot. The files below are what transformers 5.24 and tokenizers 0.22 write (seen with
the dev venv's save_pretrained), written by hand so that every environment builds the same folders. These run in
the dev venv and in both image environments (tests/training/image_environments.py): there, without the check,
transformers 4.46.3 loads the Llama config with rope_theta 10000 and no rope scaling, and the jobs train on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import stage_model
from finetune import compatibility
from finetune.compatibility import folder_problems, parse_readers
from test_stage_model import (
    BUCKET,
    HF_REPO,
    MAIN,
    LocalHub,
    make_repo,
    s3,  # noqa: F401  (the fixture)
)
from test_stage_model import run as run_staging
from training_helpers import run_script, train_arguments

# A Llama 3.1 config as transformers 5.x writes it: rope_theta and the llama3 scaling under rope_parameters, `dtype`.
LLAMA_CONFIG_5X = {
    "architectures": ["LlamaForCausalLM"],
    "dtype": "float32",
    "hidden_size": 64,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rope_parameters": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 64,
        "rope_theta": 500000.0,
        "rope_type": "llama3",
    },
    "transformers_version": "5.24.0",
    "vocab_size": 512,
}
# What the SMP v2 image's jobs read folders with (training/requirements.txt for Python >= 3.10).
SMP_V2_READERS = {"transformers": (4, 46, 3), "tokenizers": (0, 20, 3)}
TOKENIZER_CONFIG_5X = {"backend": "tokenizers", "eos_token": "<|endoftext|>", "tokenizer_class": "TokenizersBackend"}
TOKENIZER_JSON_PAIRS = {"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}}


def _write(folder: Path, files: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, values in files.items():
        (folder / name).write_text(json.dumps(values))
    return folder


def test_each_format_is_refused_below_the_reader_version_that_reads_it(tmp_path) -> None:
    folder = _write(
        tmp_path / "model",
        {
            "config.json": LLAMA_CONFIG_5X,
            "tokenizer_config.json": TOKENIZER_CONFIG_5X,
            "tokenizer.json": TOKENIZER_JSON_PAIRS,
        },
    )
    smp_v1 = {"transformers": (4, 21, 0), "tokenizers": (0, 12, 1)}
    problems = folder_problems(folder, smp_v1)
    assert problems == [
        f'{folder}/config.json has "transformers_version": "5.24.0", which needs transformers 5.0.0 or newer '
        "(this job has transformers 4.21.0)",
        f'{folder}/tokenizer_config.json has "tokenizer_class": "TokenizersBackend", which needs transformers 5.0.0 '
        "or newer (this job has transformers 4.21.0)",
        f"{folder}/tokenizer.json has BPE merges stored as pairs, which needs tokenizers 0.20.0 or newer "
        "(this job has tokenizers 0.12.1)",
    ]
    # The SMP v2 image's tokenizers reads the pairs; its transformers still misreads the rest.
    assert len(folder_problems(folder, SMP_V2_READERS)) == 2
    assert folder_problems(folder, {"transformers": (5, 24, 0), "tokenizers": (0, 22, 0)}) == []


def test_a_folder_written_by_the_readers_own_line_passes(tmp_path) -> None:
    config = {**LLAMA_CONFIG_5X, "transformers_version": "4.43.0.dev0", "rope_scaling": {"rope_type": "llama3"}}
    folder = _write(
        tmp_path / "model",
        {
            "config.json": config,
            "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"},
            "tokenizer.json": {"model": {"type": "BPE", "merges": ["a b"]}},
            "generation_config.json": {"transformers_version": "4.43.0.dev0"},
        },
    )
    assert folder_problems(folder, SMP_V2_READERS) == []
    assert folder_problems(folder, {"transformers": (4, 21, 0), "tokenizers": (0, 12, 1)}) == []


def test_readers_are_parsed_as_synth_writes_them_and_anything_else_is_refused() -> None:
    assert parse_readers("tokenizers=0.12.1,transformers=4.21.0") == {
        "tokenizers": (0, 12, 1),
        "transformers": (4, 21, 0),
    }
    assert parse_readers("") == {}
    for wrong in ("transformers", "transformers=latest", "torch=2.4.1"):
        with pytest.raises(ValueError, match="is not <library>=<version> of tokenizers, transformers"):
            parse_readers(wrong)


@pytest.mark.bad_input("config")
def test_train_py_exits_2_on_a_config_a_newer_transformers_wrote(
    train_script, tiny_assets, prepared_data, tmp_path, capsys, clean_environment
) -> None:
    reader = compatibility.installed_readers()["transformers"]
    config = {**LLAMA_CONFIG_5X, "transformers_version": f"{reader[0] + 1}.0.0"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path / "run", model_config=path)
    assert train_script.main(arguments, {}) == 2
    error = capsys.readouterr().err
    assert f'--model_config {path} cannot be read here: {path} has "transformers_version": ' in error
    assert "training.pretrained.revision" in error


@pytest.mark.bad_input("config")
def test_train_py_exits_2_on_a_pretrained_folder_a_newer_transformers_wrote(
    train_script, tiny_assets, prepared_data, tmp_path, capsys, clean_environment
) -> None:
    from local.tiny import save_tiny_model

    folder = save_tiny_model(tmp_path / "channel-model", arch="gptj")
    values = json.loads((folder / "config.json").read_text())
    major = compatibility.installed_readers()["transformers"][0]
    (folder / "config.json").write_text(json.dumps({**values, "transformers_version": f"{major + 1}.0.0"}))
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path / "run")
    index = arguments.index("--model_config")
    del arguments[index : index + 2]
    assert train_script.main(arguments, {"SM_CHANNEL_MODEL": str(folder)}) == 2
    assert f"pretrained model folder {folder} cannot be read here: {folder}/config.json has" in capsys.readouterr().err


@pytest.mark.bad_input("config")
def test_prepare_data_exits_2_on_a_tokenizer_transformers_5_wrote(tiny_assets, tmp_path) -> None:
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(tiny_assets["tokenizer"], tokenizer)
    _write(tokenizer, {"tokenizer_config.json": TOKENIZER_CONFIG_5X})
    result = run_script(
        "prepare_data.py",
        ["--input_dir", str(tiny_assets["raw"]), "--tokenizer_dir", str(tokenizer), "--train_output_dir",
         str(tmp_path / "train"), "--validation_output_dir", str(tmp_path / "validation")],
    )  # fmt: skip
    if compatibility.installed_readers()["transformers"] >= (5, 0, 0):
        assert result.returncode == 0, result.stderr  # the dev venv's transformers reads its own files
        return
    assert result.returncode == 2
    assert f'{tokenizer}/tokenizer_config.json has "tokenizer_class": "TokenizersBackend"' in result.stderr


def test_staging_refuses_a_repository_a_reader_of_the_stage_cannot_read_before_writing_anything(
    tmp_path,
    s3,  # noqa: F811
) -> None:
    repo = make_repo(tmp_path / "repo", HF_REPO)
    _write(repo, {"config.json": LLAMA_CONFIG_5X})
    with pytest.raises(stage_model.StagingError) as refused:
        run_staging(LocalHub(repo), s3, tmp_path, readers=SMP_V2_READERS)
    message = str(refused.value)
    assert f"EleutherAI/gpt-j-6b@{MAIN}: this stage cannot read it: " in message
    assert (
        '/config.json has "transformers_version": "5.24.0", which needs transformers 5.0.0 or newer (the oldest job '
        "or endpoint of this stage that reads it has transformers 4.46.3)" in message
    )
    assert s3.writes == []


def test_staging_copies_a_repository_whose_readers_have_no_limit(tmp_path, s3) -> None:  # noqa: F811
    """Weights only the vllm engine reads: synth passes no readers, and a folder transformers 5 wrote is staged."""
    repo = make_repo(tmp_path / "repo", HF_REPO)
    _write(repo, {"config.json": LLAMA_CONFIG_5X})
    record = run_staging(LocalHub(repo), s3, tmp_path)
    assert "config.json" in record["files"]


def test_the_staging_job_reads_readers_from_its_command_line(tmp_path, s3, capsys) -> None:  # noqa: F811
    repo = make_repo(tmp_path / "repo", HF_REPO)
    _write(repo, {"config.json": LLAMA_CONFIG_5X})
    arguments = ["--model_id", "EleutherAI/gpt-j-6b", "--revision", MAIN, "--region", "us-east-1",
                 "--destination", f"s3://{BUCKET}/pretrained/gpt-j-6b/", "--output_dir", str(tmp_path / "work"),
                 "--readers", "tokenizers=0.12.1,transformers=4.21.0"]  # fmt: skip
    session = SimpleNamespace(client=lambda service, region_name=None: s3)
    assert stage_model.main(arguments, hub=LocalHub(repo), session=session) == 2
    assert "(the oldest job or endpoint of this stage that reads it has transformers 4.21.0)" in capsys.readouterr().err
    assert s3.writes == []
