"""train.py's memory rule: a run whose TrainBatchSize does not fit the GPUs synth sized stops before anything loads,
with the numbers and the largest batch that fits."""

from __future__ import annotations

import pytest
from finetune.errors import ConfigurationError
from finetune.hyperparameters import parse_hyperparameters
from finetune.layout import check_layout, parse_layout
from finetune.memory import largest_fitting_batch

# The 70B LoRA example's figures as synth passes them (hand-worked in tests/core/test_training_memory.py):
# 25.914 GiB whatever the batch, 3.541 GiB per sequence, 36.0 GiB usable.
SEVENTY_B = {"memory_fixed_gib": "25.9144", "memory_per_sequence_gib": "3.5405", "memory_usable_gib": "36.0"}


def _hyperparameters(**flags: object):
    argv = ["--model_config", "config.json", "--backend", "torch"]
    for name, value in flags.items():
        argv += [f"--{name}", str(value)]
    return parse_hyperparameters(argv, environ={})[0]


def test_the_largest_batch_is_worked_from_the_three_figures():
    # (36.0 - 25.9144) / 3.5405 = 2.85: 2 sequences; with 2 microbatches the batch must be even: 2 as well.
    assert largest_fitting_batch(25.9144, 3.5405, 36.0, microbatches=1) == 2
    assert largest_fitting_batch(25.9144, 3.5405, 36.0, microbatches=2) == 2
    # (36.0 - 18.0) / 2.0 = 9 sequences; in whole groups of 4 microbatches: 8.
    assert largest_fitting_batch(18.0, 2.0, 36.0, microbatches=4) == 8
    assert largest_fitting_batch(35.0, 2.0, 36.0, microbatches=1) == 0


@pytest.mark.bad_input("config")
def test_a_batch_past_what_fits_is_refused_with_the_numbers_and_the_largest_that_fits():
    hp = _hyperparameters(train_batch_size=4, **SEVENTY_B)
    with pytest.raises(ConfigurationError) as error:
        check_layout(hp, parse_layout({}), "torch", 8)
    assert str(error.value) == (
        "--train_batch_size 4 does not fit the GPUs this stage was sized for: estimated 25.9 + 4 x 3.5 = 40.1 GiB per "
        "GPU of 36.0 GiB usable (--memory_fixed_gib, --memory_per_sequence_gib, --memory_usable_gib: synth's "
        "estimate for this stage). The largest batch that fits is 2: run with TrainBatchSize 2 or less, and raise "
        "training.gradient_accumulation in the config for the same global batch"
    )


def test_a_batch_that_fits_and_a_run_without_the_figures_pass():
    check_layout(_hyperparameters(train_batch_size=2, **SEVENTY_B), parse_layout({}), "torch", 8)
    check_layout(_hyperparameters(train_batch_size=64), parse_layout({}), "torch", 1)  # a local run: no estimate


@pytest.mark.bad_input("config")
def test_train_py_exits_2_before_it_reads_data_or_weights(train_script, tmp_path, capsys, clean_environment):
    # Nothing exists at these paths: the memory rule must speak before anything is read.
    missing = tmp_path / "absent"
    argv = [
        *("--train_dir", str(missing / "train"), "--validation_dir", str(missing / "validation")),
        *("--pretrained_dir", str(missing / "model"), "--model_dir", str(missing / "out")),
        *("--output_dir", str(missing / "output"), "--backend", "torch", "--train_batch_size", "4"),
        *[item for name, value in SEVENTY_B.items() for item in (f"--{name}", value)],
    ]
    assert train_script.main(argv, {}) == 2
    assert "train.py: error: --train_batch_size 4 does not fit the GPUs" in capsys.readouterr().err


@pytest.mark.bad_input("config")
def test_the_figures_come_together_or_not_at_all():
    with pytest.raises(ConfigurationError, match=r"--memory_usable_gib is missing: synth passes all three"):
        _hyperparameters(memory_fixed_gib=1.0, memory_per_sequence_gib=1.0)
