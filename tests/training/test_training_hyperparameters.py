"""train.py's command line as SageMaker drives it, and every bad hyperparameter rejected at start with its message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from finetune.errors import ConfigurationError
from finetune.hyperparameters import (
    HYPERPARAMETER_NAMES,
    hyperparameter_defaults,
    hyperparameter_environment,
    hyperparameter_table_markdown,
    parse_hyperparameters,
)
from training_helpers import train_arguments

REQUIRED = ["--model_config", "config.json"]


def test_parses_values_as_the_sagemaker_toolkit_writes_them() -> None:
    # The toolkit JSON-decodes then str()s each value: True/False, None, plain numbers.
    hp, _ = parse_hyperparameters(
        [
            *REQUIRED,
            *("--fp16", "True", "--activation_checkpointing", "FALSE", "--lr", "0.0002", "--lr_decay_iters", "None"),
            *("--max_steps", "7", "--resume", "0", "--lr_decay_style", "Cosine"),
        ],
        {},
    )
    assert (hp.fp16, hp.activation_checkpointing, hp.lr, hp.lr_decay_iters, hp.max_steps, hp.resume) == (
        True, False, 0.0002, None, 7, False,
    )  # fmt: skip
    assert hp.lr_decay_style == "cosine"


def test_channel_and_directory_defaults_come_from_the_sagemaker_environment() -> None:
    environ = {
        "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train",
        "SM_CHANNEL_TEST": "/opt/ml/input/data/test",
        "SM_CHANNEL_MODEL": "/opt/ml/input/data/model",
        "SM_MODEL_DIR": "/opt/ml/model",
        "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data",
    }
    hp, _ = parse_hyperparameters([], environ)
    assert (hp.train_dir, hp.validation_dir, hp.pretrained_dir, hp.model_dir, hp.output_dir) == tuple(environ.values())
    assert hp.checkpoint_dir == "/opt/ml/checkpoints"
    # A flag still wins over the environment.
    assert parse_hyperparameters(["--train_dir", "/data"], environ)[0].train_dir == "/data"


def test_tolerates_the_flags_the_platform_adds() -> None:
    mp_parameters = json.dumps({"ddp": True, "partitions": 1})
    hp, platform = parse_hyperparameters(
        [*REQUIRED, "--mp_parameters", mp_parameters, "--sagemaker_program", "train.py", "--seed", "3"], {}
    )
    assert platform.mp_parameters == mp_parameters
    assert hp.seed == 3


@pytest.mark.parametrize(
    ("flag", "suggestion"),
    [
        ("--lr-decay-style", "--lr_decay_style"),  # the reference script's silently ignored flag
        ("--max_step", "--max_steps"),
        ("--checkpoint-dir", "--checkpoint_dir"),
        ("--lr_decay", "--lr_decay_style"),  # abbreviations are not accepted either
    ],
)
def test_rejects_a_misspelled_flag_naming_the_closest_one(flag: str, suggestion: str) -> None:
    with pytest.raises(ConfigurationError, match=f"unknown hyperparameter {flag}: did you mean {suggestion}"):
        parse_hyperparameters([*REQUIRED, flag, "linear"], {})


def test_defaults_and_environment_names_are_exposed_for_the_cdk_side() -> None:
    defaults = hyperparameter_defaults()
    assert list(defaults) == list(HYPERPARAMETER_NAMES)
    assert defaults["lr_decay_style"] == "linear" and defaults["checkpoint_dir"] == "/opt/ml/checkpoints"
    assert hyperparameter_environment()["train_dir"] == "SM_CHANNEL_TRAIN"
    assert hyperparameter_environment()["validation_dir"] == "SM_CHANNEL_TEST"
    assert hyperparameter_environment()["pretrained_dir"] == "SM_CHANNEL_MODEL"


def test_readme_table_documents_every_hyperparameter_with_its_default() -> None:
    rows = hyperparameter_table_markdown().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(HYPERPARAMETER_NAMES)
    assert "| `max_steps` | `100` |" in hyperparameter_table_markdown()
    assert "| `train_dir` | `$SM_CHANNEL_TRAIN` |" in hyperparameter_table_markdown()


V1 = {"ddp": True, "partitions": 1}


@pytest.mark.parametrize(
    ("overrides", "remove", "environ", "message"),
    [
        pytest.param({"train_batch_size": 8}, [], {"SM_HP_MP_PARAMETERS": {**V1, "microbatches": 3}, "_backend": "smp_v1"}, r"--train_batch_size \(8\) is not divisible by mp_parameters microbatches \(3\)", id="batch-not-divisible-by-microbatches"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {"ddp": True, "tensor_parallel_degree": 2, "partitions": 3}, "OMPI_COMM_WORLD_SIZE": "8", "_backend": "smp_v1"}, r"tensor_parallel_degree \(2\) x pipeline_parallel_degree \(3\) = 6 does not divide the world size 8", id="tp-times-pp-not-dividing-world"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {"tensor_parallel_degree": 2, "partitions": 1}, "OMPI_COMM_WORLD_SIZE": "2", "_backend": "smp_v1"}, "tensor_parallel_degree=2 requires ddp=true, but ddp is false: SMP v1's smp.init refuses this", id="tp-without-ddp"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {**V1, "prescaled_batch": True, "optimize": "memory"}, "_backend": "smp_v1"}, 'prescaled_batch=true requires optimize="speed", but optimize is "memory"', id="prescaled-batch-with-optimize-memory"),
        pytest.param({"fp16": "true", "bf16": "true"}, [], {}, "--fp16 and --bf16 are both true", id="fp16-and-bf16-flags"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {**V1, "fp16": True, "bf16": True}, "_backend": "smp_v1"}, "bf16=true requires fp16=false, but fp16 is true", id="fp16-and-bf16-in-mp-parameters"),
        pytest.param({"fp16": "true"}, [], {"SM_HP_MP_PARAMETERS": {**V1, "fp16": False}, "_backend": "smp_v1"}, "--fp16 is true but mp_parameters sets fp16=false", id="fp16-flag-contradicts-mp-parameters"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {**V1, "sharded_data_parallel_degree": 4}, "OMPI_COMM_WORLD_SIZE": "4", "_backend": "smp_v1"}, "cannot save a full model under sharded data parallelism", id="sharded-data-parallel-v1"),
        pytest.param({"pretrained_dir": "/opt/ml/input/data/model"}, ["model_config"], {"SM_HP_MP_PARAMETERS": {**V1, "delayed_parameter_initialization": True}, "_backend": "smp_v1"}, "delayed_parameter_initialization is true while fine-tuning --pretrained_dir", id="delayed-init-with-pretrained"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {"tensor_parallel_degree": 2, "hybrid_shard_degree": 2}, "WORLD_SIZE": "4", "_backend": "smp_v2"}, "SMP v2 has no tensor parallelism for model type 'gptj'", id="smp-v2-tensor-parallel-gptj"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {"tensor_parallel_degree": 8, "hybrid_shard_degree": 8}, "WORLD_SIZE": "8", "_backend": "smp_v2"}, r"hybrid_shard_degree \(8\) does not divide the 1 data-parallel ranks \(world size 8 / tensor_parallel_degree 8\)", id="smp-v2-shards-beyond-what-tensor-parallelism-leaves"),
        pytest.param({"fp16": "true"}, [], {"_backend": "smp_v2"}, "--fp16 is not supported with SMP v2", id="fp16-with-smp-v2"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": {"partitions": 1, "hybrid_shard_degree": 2}}, "mixes SMP v1 keys", id="mixed-smp-versions"),
        pytest.param({}, [], {"SM_HP_MP_PARAMETERS": "{ddp: true"}, "mp_parameters is not valid JSON", id="mp-parameters-not-json"),
        pytest.param({}, [], {"_backend": "smp_v1"}, "--backend smp_v1 needs smdistributed.modelparallel.torch", id="smp-v1-library-missing"),
        pytest.param({}, ["train_dir"], {}, r"missing train dir: pass --train_dir or provide the `train` channel \(SM_CHANNEL_TRAIN\)", id="missing-train-channel"),
        pytest.param({}, ["validation_dir"], {}, r"provide the `test` channel \(SM_CHANNEL_TEST\)", id="missing-test-channel"),
        pytest.param({}, ["model_config"], {}, "no model: pass --pretrained_dir", id="no-model"),
        pytest.param({}, [], {"SM_CHANNEL_MODEL": "/opt/ml/input/data/model"}, r"both a pretrained model \(/opt/ml/input/data/model, --pretrained_dir or the `model` channel\) and --model_config", id="two-model-sources"),
        pytest.param({"train_dir": "EMPTY_DIR"}, [], {}, "has no .jsonl or .json files", id="no-data-files"),
        pytest.param({"train_dir": "EMPTY_FILE_DIR"}, [], {}, "is empty: its files hold no blocks", id="empty-data-file"),
        pytest.param({"train_batch_size": 100000}, [], {}, "fewer than one global batch of 100000", id="batch-larger-than-data"),
        pytest.param({"model_config": "SHORT_CONTEXT_CONFIG"}, [], {}, "the model takes at most 16 positions", id="blocks-longer-than-context"),
        pytest.param({"lr_decay_style": "exponential"}, [], {}, "expected one of constant, linear, cosine, got 'exponential'", id="unknown-decay-style"),
        pytest.param({"fp16": "maybe"}, [], {}, r"expected a boolean \(true/false/1/0, any case\), got 'maybe'", id="bad-boolean"),
        pytest.param({"min_lr": 0.1, "lr": 0.01}, [], {}, r"--min_lr must be between 0 and --lr \(0.01\), got 0.1", id="min-lr-above-lr"),
        pytest.param({"gradient_accumulation": 0}, [], {}, "--gradient_accumulation must be at least 1, got 0", id="no-accumulation"),
        pytest.param({"lr-decay-style": "cosine"}, [], {}, "did you mean --lr_decay_style", id="misspelled-flag"),
    ],
)  # fmt: skip
def test_rejects_bad_hyperparameters_at_start(
    train_script, tiny_assets, prepared_data, tmp_path: Path, clean_environment, overrides, remove, environ, message
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty-file").mkdir()
    (tmp_path / "empty-file" / "train.jsonl").write_text("\n")
    short = {**json.loads(tiny_assets["config"].read_text()), "n_positions": 16}
    (tmp_path / "short.json").write_text(json.dumps(short))
    placeholders = {
        "EMPTY_DIR": tmp_path / "empty",
        "EMPTY_FILE_DIR": tmp_path / "empty-file",
        "SHORT_CONTEXT_CONFIG": tmp_path / "short.json",
    }
    overrides = {name: placeholders.get(str(value), value) for name, value in overrides.items()}
    environ = dict(environ)
    if "_backend" in environ:
        overrides["backend"] = environ.pop("_backend")
    if isinstance(environ.get("SM_HP_MP_PARAMETERS"), dict):
        environ["SM_HP_MP_PARAMETERS"] = json.dumps(environ["SM_HP_MP_PARAMETERS"])
    arguments = train_arguments(tiny_assets, prepared_data, tmp_path / "run", **overrides)
    for name in remove:
        index = arguments.index(f"--{name}")
        del arguments[index : index + 2]
    with pytest.raises(ConfigurationError, match=message):
        train_script.run(arguments, environ)
    assert not (tmp_path / "run" / "model").exists()


def test_main_reports_the_problem_and_exits_with_status_2(train_script, capsys) -> None:
    assert train_script.main(["--model_config", "c.json", "--max_steps", "0"], {}) == 2
    assert "train.py: error: --max_steps must be at least 1, got 0" in capsys.readouterr().err
