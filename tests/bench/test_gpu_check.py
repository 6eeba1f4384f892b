"""`make gpu-check` where no GPU is: its answer without CUDA, the token criterion, the report, the orchestration of
its units, and the handler-side path of its GPU units run on CPU with a tiny model (no kernels)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from bench import gpu_check, gpu_check_handler, gpu_check_int8, gpu_check_units
from bench.gpu_check import FAIL, PASS, UNAVAILABLE, PartResult, compare_greedy, judge_agreement
from bench.gpu_check_handler import Call

TINY = {"layers": 2, "hidden": 64, "heads": 4}


def test_without_a_cuda_gpu_it_says_so_exits_0_and_writes_the_result(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a machine with a GPU
    output = tmp_path / "out" / "gpu-check.json"

    assert gpu_check.main(["--output", str(output)]) == 0

    assert "No CUDA GPU is visible here" in capsys.readouterr().err
    report = json.loads(output.read_text())
    assert report["exit_code"] == 0 and report["parts"] == []
    assert "nothing was checked" in output.with_suffix(".md").read_text()


def test_help_lists_the_units():
    result = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--help"],
        capture_output=True, text=True, check=False, timeout=60, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    for unit in gpu_check.UNITS:
        assert unit in result.stdout


def test_unknown_units_are_refused_with_the_known_ones_named(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--only", "inject-gpt2"])

    assert exit_info.value.code == 2
    assert "unknown unit(s) inject-gpt2; expected some of environment, inject-gptj" in capsys.readouterr().err


# --- the token criterion -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "margins", "expected"),
    [
        ([5, 6, 7, 8], [1.0, 1.0, 1.0, 1.0], (4, 4, None, "equal")),
        ([5, 6, 9, 9], [1.0, 1.0, 0.05, 1.0], (4, 2, 0.05, "near-tie")),
        ([5, 6, 9, 9], [1.0, 1.0, 0.1, 1.0], (4, 2, 0.1, "near-tie")),  # the tolerance itself is still a tie
        ([5, 9, 7, 8], [1.0, 2.5, 1.0, 1.0], (4, 1, 2.5, "diverged")),
        ([5, 6], [1.0, 1.0, 1.0, 1.0], (4, 2, 1.0, "diverged")),  # the candidate stopped early
        ([5, 6, 7, 9], [1.0, 1.0, 1.0, math.nan], (4, 3, None, "diverged")),  # no margin known: not a tie
    ],
)
def test_a_row_may_part_from_the_reference_only_at_a_near_tie(candidate, margins, expected):
    row = compare_greedy([5, 6, 7, 8], candidate, margins, tolerance=0.1, eos_ids={0})

    positions, agreed, margin, verdict = expected
    assert (row.positions, row.agreed, row.verdict) == (positions, agreed, verdict)
    if margin is not None:
        assert row.margin == margin


def test_positions_after_the_reference_eos_are_not_compared():
    row = compare_greedy([5, 0, 7, 8], [5, 0, 3, 3], [1.0, 1.0, 9.0, 9.0], tolerance=0.1, eos_ids={0})

    assert (row.positions, row.agreed, row.verdict) == (2, 2, "equal")


def test_the_judgement_passes_near_ties_and_fails_divergence_and_thin_coverage():
    equal = compare_greedy([1, 2, 3, 4], [1, 2, 3, 4], [1.0] * 4, tolerance=0.1)
    tie = compare_greedy([1, 2, 3, 4], [1, 2, 9, 9], [1.0, 1.0, 0.02, 1.0], tolerance=0.1)
    early_tie = compare_greedy([1, 2, 3, 4], [9, 9, 9, 9], [0.01, 1.0, 1.0, 1.0], tolerance=0.1)
    wrong = compare_greedy([1, 2, 3, 4], [1, 9, 9, 9], [1.0, 3.25, 1.0, 1.0], tolerance=0.1)

    passed, text, numbers = judge_agreement([equal, tie], tolerance=0.1)
    assert passed and text.startswith("greedy tokens equal at 6/8 positions (75%); 1 row(s) parted at a near-tie")
    assert numbers["near_ties"] == [[1, 2, 0.02]]

    passed, text, numbers = judge_agreement([equal, wrong], tolerance=0.1)
    assert not passed
    assert "row 1 diverged at new token 1, where the reference's top-1 logit led its top-2 by 3.250 (> 0.1)" in text
    assert numbers["diverged"] == [[1, 1, 3.25]]

    passed, text, _ = judge_agreement([early_tie, early_tie, tie], tolerance=0.1)
    assert not passed and "inconclusive" in text


def test_requests_are_compared_and_a_failed_request_is_reported_with_its_order():
    reference = [
        Call([[7, 8]], [[1, 2, 3]], [[1.0, 1.0, 1.0]]),
        Call([[0, 7], [7, 8]], [[1, 2, 3], [4, 5, 6]], [[1.0] * 3, [1.0] * 3]),
    ]
    failed = [reference[0], "RuntimeError: The specified pointer resides on host memory"]
    padded_differently = [reference[0], Call([[7, 8], [7, 8]], reference[1].new_tokens, None)]

    passed, text, _ = gpu_check_handler.compare_calls(reference, reference, tolerance=0.1, eos_ids={0})
    assert passed and text == "greedy tokens equal at 9/9 positions (100%)"

    passed, text, _ = gpu_check_handler.compare_calls(reference, failed, tolerance=0.1, eos_ids={0})
    assert not passed
    assert text.startswith("request 2 (2 prompt(s)) failed: RuntimeError: The specified pointer resides on host memory")
    assert "after a 1-prompt request" in text and "deepspeedai/DeepSpeed#3402" in text

    passed, text, _ = gpu_check_handler.compare_calls(reference, padded_differently, tolerance=0.1, eos_ids={0})
    assert not passed and "request 2 (2 prompt(s)): the prompts were tokenized or padded differently" in text


# --- orchestration and the report --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "code"),
    [((PASS, PASS), 0), ((PASS, UNAVAILABLE), 3), ((FAIL, UNAVAILABLE, PASS), 1)],
)
def test_exit_status_says_failed_or_incomplete(statuses, code):
    assert gpu_check.exit_code([PartResult(f"p{i}", status, "") for i, status in enumerate(statuses)]) == code


def fake_units(outcomes):
    """run_unit as if each unit's process had reported `outcomes[unit]` (default PASS); records what ran."""
    ran = []

    def run_unit(unit, scratch, *, timeout):
        ran.append(unit)
        status, numbers = outcomes.get(unit, (PASS, {}))
        return [PartResult(part, status, f"{part} said {status}", numbers) for part in gpu_check.UNITS[unit][0]]

    return ran, run_unit


def test_without_deepspeed_kernels_the_deepspeed_parts_are_unavailable_with_the_fix(tmp_path, monkeypatch):
    ran, run_unit = fake_units({"environment": (UNAVAILABLE, {})})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "run_unit", run_unit)
    output = tmp_path / "result.json"

    assert gpu_check.main(["--output", str(output)]) == 3

    assert ran == ["environment", "train-fp16"]
    report = json.loads(output.read_text())
    parts = {part["name"]: part for part in report["parts"]}
    assert parts["inject-gptj"]["status"] == UNAVAILABLE
    assert parts["inject-gptj"]["summary"].startswith("needs DeepSpeed's inference kernels, which are not usable here")
    assert parts["train-fp16"]["status"] == PASS
    markdown = output.with_suffix(".md").read_text()
    assert "| inject-opt | UNAVAILABLE |" in markdown and "Token criterion: greedy tokens equal" in markdown


def test_bloom_parts_are_unavailable_where_the_handler_refuses_bloom_injection(tmp_path, monkeypatch):
    refusal = "the handler refuses it: option.kernel_injection='true' but DeepSpeed refuses BLOOM kernel injection"
    environment = {"transformers": "5.17.0", "bloom_kernel_injection": refusal}
    ran, run_unit = fake_units({"environment": (PASS, environment), "inject-opt": (FAIL, {})})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "run_unit", run_unit)
    output = tmp_path / "result.json"

    assert gpu_check.main(["--output", str(output)]) == 1

    assert ran == ["environment", "inject-gptj", "inject-opt", "train-fp16"]
    parts = {part["name"]: part for part in json.loads(output.read_text())["parts"]}
    for name in ("inject-bloom", "int8-bloom", "int8-checkpoint-bloom"):
        assert parts[name]["status"] == UNAVAILABLE
        assert "transformers 5.17.0" in parts[name]["summary"] and refusal in parts[name]["summary"]
        assert gpu_check.LMI_IMAGE in parts[name]["fix"]


def test_a_unit_that_dies_or_hangs_is_a_failure_with_its_last_output(tmp_path):
    code, tail = gpu_check.run_process(
        [sys.executable, "-c", "import os; print('loading', flush=True); os._exit(7)"], timeout=60, env={}
    )
    assert (code, tail) == (7, ["loading"])

    code, _ = gpu_check.run_process([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1, env={})
    assert code is None


def test_a_unit_process_that_reports_nothing_fails_every_part_it_owns(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "run_process", lambda command, timeout, env: (None, ["compiling", "still"]))

    results = gpu_check.run_unit("inject-opt", tmp_path, timeout=5)

    assert [(result.name, result.status) for result in results] == [("inject-opt", FAIL)]
    assert results[0].summary == "the process ran past its 5 s before reporting; last output: compiling | still"


def test_a_unit_process_reports_through_its_result_file(tmp_path):
    """A real unit process: on CPU, train-fp16 runs train.py, which refuses --fp16 with its own message."""
    (result,) = gpu_check.run_unit("train-fp16", tmp_path, timeout=300)

    assert (result.name, result.status) == ("train-fp16", FAIL)
    assert result.summary.startswith("ConfigurationError: --fp16 needs a GPU (fp16 loss scaling is CUDA-only)")
    assert "(at torch_backend.py:" in result.summary and result.seconds > 0


# --- the GPU units' handler-side path, on CPU ----------------------------------------------------------------------


def test_the_injection_unit_serves_through_the_handler_and_compares_on_cpu(tmp_path, monkeypatch):
    """The whole unit but the kernels: random model folder, Hugging Face reference with margins, load_model,
    TextGenerator's two requests, the comparison and the timing. Both sides are fp32 on CPU: every token agrees."""
    monkeypatch.setattr(gpu_check_handler, "NEW_TOKENS", 8)
    monkeypatch.setattr(gpu_check_units, "TIMING_TOKENS", 3)
    gpu_check_handler.use_handler_modules()

    result = gpu_check_units.injection(
        "gptj", tmp_path, device="cpu", dtype="fp32", kernel_injection="false", sizes=TINY, timing_rounds=1
    )

    assert result.status == PASS, result.summary
    assert result.summary.startswith("greedy tokens equal at 32/32 positions (100%)")
    assert result.numbers["agreement"]["rows"] == 4 and result.numbers["kernel_injection"] is False
    assert math.isfinite(result.numbers["hf_ms_per_token"]) and math.isfinite(result.numbers["handler_ms_per_token"])


def test_the_bloom_rule_comes_from_the_handler_plan():
    gpu_check_handler.use_handler_modules()
    import transformers

    answer = gpu_check_units.bloom_injection(gpu_check.REPO_ROOT / "bench")

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    if (major, minor) > (4, 43):
        assert answer.startswith("the handler refuses it: option.kernel_injection='true'") and "4.43.4" in answer
    else:
        assert answer == "allowed"


def test_the_environment_unit_names_a_deepspeed_that_is_not_on_cuda(tmp_path, monkeypatch):
    """What a GPU host reports when DS_ACCELERATOR keeps DeepSpeed on the CPU (the suite sets it to cpu)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")

    result = gpu_check_units.environment(tmp_path)

    assert (result.status, result.summary) == (UNAVAILABLE, "DeepSpeed chose the 'cpu' accelerator")
    assert result.fix == "run with DS_ACCELERATOR unset or set to cuda"
    assert result.numbers["gpu"] == "NVIDIA H200" and result.numbers["capability"] == "9.0"
    assert result.numbers["deepspeed"] and result.numbers["transformers"]


def test_the_deepspeed_layer_class_the_check_counts_still_exists():
    assert gpu_check_handler.injected_layers(torch.nn.Sequential(torch.nn.Linear(2, 2))) == 0


def test_int8_weights_count_only_tensors_that_carry_a_quantization_scale():
    """DeepSpeed's int8 GEMMs dequantize with `weight.scale` (one per row group); a weight cast to int8 has none, and
    GroupQuantizer's not-quantized placeholder is a one-element scale."""
    module = torch.nn.Module()
    quantized, cast, placeholder = (torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.int8), requires_grad=False)
                                    for _ in range(3))  # fmt: skip
    quantized.scale, placeholder.scale = torch.ones(4, 3), torch.empty(1)
    module.a, module.b, module.c, module.norm = quantized, cast, placeholder, torch.nn.Parameter(torch.ones(4))

    assert gpu_check_handler.int8_weights(module) == (3, 1)


def int8_module(*, scaled: bool):
    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.int8), requires_grad=False)
    if scaled:
        module.weight.scale = torch.ones(4, 3)
    return module


def test_int8_without_quantization_scales_fails_before_generating(tmp_path, monkeypatch):
    gpu_check_handler.use_handler_modules()
    monkeypatch.setattr(gpu_check_int8, "bloom_reference", lambda scratch: (tmp_path, [], {0}))
    monkeypatch.setattr(gpu_check_int8, "handler_model", lambda *args: (int8_module(scaled=False), None, None))
    monkeypatch.setattr(gpu_check_int8, "serve", lambda *args, **kwargs: pytest.fail("generated from unscaled int8"))

    result = gpu_check_int8.int8_direct(tmp_path)

    assert result.status == FAIL
    assert result.summary.startswith("1 of 1 int8 weight tensors carry no quantization scale: DeepSpeed cast the fp16")
    assert "pre-sharded DeepSpeed checkpoint" in result.fix


def test_int8_refused_at_start_up_is_a_pass(tmp_path, monkeypatch):
    gpu_check_handler.use_handler_modules()
    from lmi_config import ConfigError

    def refuse(*args):
        raise ConfigError("option.dtype='int8' needs a DeepSpeed checkpoint")

    monkeypatch.setattr(gpu_check_int8, "bloom_reference", lambda scratch: (tmp_path, [], {0}))
    monkeypatch.setattr(gpu_check_int8, "handler_model", refuse)

    result = gpu_check_int8.int8_direct(tmp_path)

    assert (result.status, result.summary) == (
        PASS, "the handler refuses dtype int8 without a DeepSpeed checkpoint: option.dtype='int8' needs a DeepSpeed "
        "checkpoint",
    )  # fmt: skip


def test_staging_keeps_deepspeeds_description_and_shards_and_drops_the_writers_folder(tmp_path):
    written, model, served = tmp_path / "written", tmp_path / "model", tmp_path / "served"
    written.mkdir()
    model.mkdir()
    description = {"type": "BLOOM", "base_dir": str(written), "checkpoints": {"non_tp": ["non-tp.pt"]}, "tp_size": 1,
                   "dtype": "int8", "version": 1.0}  # fmt: skip
    (written / "ds_inference_config.json").write_text(json.dumps(description))
    for name in ("non-tp.pt", "tp_00_00.pt"):
        (written / name).write_bytes(b"x" * 1024)
    for name in ("config.json", "tokenizer.json", "model.safetensors", "pytorch_model.bin"):
        (model / name).write_text("{}")

    numbers = gpu_check_int8.stage_checkpoint(written, model, served)

    assert sorted(path.name for path in served.iterdir()) == [
        "config.json", "ds_inference_config.json", "non-tp.pt", "tokenizer.json", "tp_00_00.pt",
    ]  # fmt: skip
    assert json.loads((served / "ds_inference_config.json").read_text()) == description
    assert not written.exists()
    assert numbers == {"shards": 2, "shard_mb": 0.0, "tp_size": 1, "dtype": "int8", "written_base_dir": str(written)}


# --- train-fp16 ----------------------------------------------------------------------------------------------------


def test_the_loss_scaler_watch_records_every_update_and_restores_the_method():
    original = torch.amp.GradScaler.update
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    updates = []

    with gpu_check_units.watch_loss_scaler(updates):
        for value in (1.0, float("inf")):  # a normal step, then an overflow that halves the scale
            optimizer.zero_grad()
            scaler.scale((weight * value).sum()).backward()
            scaler.step(optimizer)
            scaler.update()

    assert updates == [(1024.0, 1024.0), (1024.0, 512.0)]
    assert torch.amp.GradScaler.update is original


@pytest.mark.parametrize(
    ("losses", "updates", "failure"),
    [
        ([6.0, 3.0], [(65536.0, 65536.0)] * 2, None),
        ([6.0, 5.5], [(65536.0, 65536.0)] * 2, "the loss did not fall: 6.000 -> 5.500, expected at most 80%"),
        ([6.0, math.nan], [(65536.0, 65536.0)] * 2, "a loss is missing or not finite"),
        ([6.0, 3.0], [(65536.0, 65536.0)], "the fp16 loss scaler stepped 1 times in 2 steps"),
        ([6.0, 3.0], [(65536.0, 32768.0), (32768.0, 16384.0)], "2 of 2 steps were skipped for fp16 overflow"),
    ],
)
def test_training_passes_only_with_a_finite_falling_loss_and_a_working_loss_scaler(losses, updates, failure):
    passed, text, numbers = gpu_check_units.judge_training(losses, [2.9], updates, steps=2, precision="fp16")

    assert passed is (failure is None)
    assert failure is None or text.startswith(failure), text
    assert numbers["scaler_updates"] == len(updates)


def test_make_runs_the_gpu_targets_with_the_given_python_and_without_the_tests_cpu_accelerator():
    """The Makefile exports DS_ACCELERATOR=cpu for the test suite; a GPU target that kept it would run DeepSpeed on
    the CPU accelerator, where kernel injection does not exist. GPU_PYTHON alone is enough: no venv is built."""
    # Under `make test` the suite itself runs inside make: its MAKEFLAGS/MAKELEVEL would make this make print
    # "Entering directory" lines, so it runs as from a shell.
    environ = {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "bench-gpu", "gpu-check", "GPU_PYTHON=/opt/gpu/bin/python3",
         "GPU_CHECK_ONLY=train-fp16"],
        cwd=gpu_check.REPO_ROOT, capture_output=True, text=True, check=True, timeout=60, env=environ,
    )  # fmt: skip

    commands = result.stdout.replace("\\\n", " ").split()
    assert " ".join(commands) == (
        "env -u DS_ACCELERATOR /opt/gpu/bin/python3 -m bench.gpu "
        "env -u DS_ACCELERATOR /opt/gpu/bin/python3 -m bench.gpu_check --output .gpu-check/result.json --only train-fp16"
    )
