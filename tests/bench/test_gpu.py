"""`make bench-gpu` without a CUDA GPU, and `make bench` carrying the GPU section over."""

from __future__ import annotations

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
