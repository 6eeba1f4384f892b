"""`make bench-gpu` without a CUDA GPU, and `make bench` carrying the GPU section over."""

from __future__ import annotations

import math

import pytest
import torch

from bench import __main__ as bench_main
from bench import gpu

EXISTING = (
    "# Benchmarks\n\nsome figures\n\n"
    f"{gpu.GPU_START}\n## GPU\n\nMeasured by `make bench-gpu` on an H200.\n\n| a | 1.00 ms |\n{gpu.GPU_END}\n"
)


def test_without_a_cuda_gpu_it_says_so_and_leaves_the_file_unchanged(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a machine with a GPU
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(EXISTING)

    assert gpu.main(["--output", str(output)]) == 0

    assert "no CUDA GPU is visible here" in capsys.readouterr().err
    assert output.read_text() == EXISTING


def test_an_existing_gpu_section_is_carried_over_verbatim(tmp_path):
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(EXISTING)

    section = bench_main.gpu_section(output)

    assert section == EXISTING[EXISTING.index(gpu.GPU_START) :]
    assert "on an H200" in section


@pytest.mark.parametrize("content", [None, "# Benchmarks\n\nno GPU markers here\n"])
def test_without_a_gpu_section_the_placeholder_is_written(tmp_path, content):
    output = tmp_path / "BENCHMARKS.md"
    if content is not None:
        output.write_text(content)

    section = bench_main.gpu_section(output)

    assert section == f"{gpu.GPU_START}\n{bench_main.GPU_PLACEHOLDER}{gpu.GPU_END}\n"
    assert "Not measured" in section


def test_per_token_latency_times_generation_on_the_device_of_the_prompt():
    """make gpu-check times the handler's model against Hugging Face generate with this helper; on CPU (its tests)
    there is no CUDA stream to synchronize."""
    from local.tiny import build_model

    model = build_model("gptj")
    prompt = torch.tensor([[5, 6, 7, 8]])

    seconds, output = gpu.per_token_latency(model, prompt, 3)

    assert math.isfinite(seconds) and output.shape == (1, 4 + 3)


def test_run_train_py_runs_train_py_from_flags_and_returns_its_metrics(tmp_path):
    """The path both `make bench-gpu` and `make gpu-check` train through, here with the check's own flags on CPU."""
    from bench import gpu_check_units

    result = gpu_check_units.training(tmp_path, precision="fp32", sizes={"layers": 1, "hidden": 32, "heads": 2}, steps=2,
                                      window=1, lr=3e-3)  # fmt: skip

    assert result.name == "train-fp32" and result.numbers["steps"] == 2
    assert len(result.numbers["losses"]) == 2 and len(result.numbers["val_loss"]) == 1
    assert all(0 < loss < 10 for loss in result.numbers["losses"] + result.numbers["val_loss"])
