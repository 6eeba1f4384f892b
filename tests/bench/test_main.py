"""`python -m bench`'s command line refuses what it cannot measure before measuring anything."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main


def _refusal(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        bench_main.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_one_run_is_refused_for_want_of_a_spread(tmp_path, capsys):
    message = _refusal(["--runs", "1", "--output", str(tmp_path / "out.md")], capsys)

    assert "--runs 1: at least 2 pairs are needed for a median and a spread" in message
    assert not (tmp_path / "out.md").exists()


def test_an_unknown_section_is_refused_with_the_choices(tmp_path, capsys):
    message = _refusal(["--only", "synth,gpu", "--output", str(tmp_path / "out.md")], capsys)

    assert (
        "--only gpu: unknown section(s); choose from synth, handler, training, artifacts, cold-start, suite" in message
    )
    assert not (tmp_path / "out.md").exists()
