"""bench/synth.py's report, rendered from made-up measurements (no CLI, no synthesis): the figures it derives."""

from __future__ import annotations

import pytest

from bench import synth
from bench.stats import Sample, paired_ratios
from bench.synth_phases import CHECK_PHASE

WHOLE, MINIMAL = [15.0, 14.6, 15.4], [5.5, 5.4, 5.6]
WHOLE_OFF, MINIMAL_OFF = [12.0, 11.8, 12.2], [2.25, 2.2, 2.3]
UNCACHED = [18.0, 17.6, 18.4]  # the whole app with the synth cache off


def _phase(label: str, seconds: float, callbacks: int = 0) -> dict:
    return {
        "label": label,
        "seconds": seconds,
        "exclusive_seconds": seconds,
        "calls": 1,
        "jsii_requests": 0,
        "jsii_seconds": 0.0,
        "jsii_callbacks": callbacks,
    }


def _variant(name: str, wall: float, cpu: float, synth_seconds: float) -> dict:
    phases = [
        _phase("import aws_cdk (starts node, loads the aws-cdk-lib assembly)", 0.8),
        _phase("import the SageMaker SDK (done by the first pipeline definition)", 2.3),
        _phase("load and validate the config", 0.3),
        _phase("build the app (every stage, stack and construct)", 4.1),
        _phase("SageMaker SDK: fine-tuning pipeline definition (JSON)", 0.7),
        _phase("SageMaker SDK: weights-staging pipeline definition", 0.5),
        _phase(CHECK_PHASE, 0.4),
    ]
    return {
        "variant": name,
        "description": f"variant {name}",
        "seconds_to_first_synth": wall,
        "cpu_seconds_to_first_synth": cpu,
        "phases": phases,
        "first_build": {"construct_seconds": 4.4, "synth_seconds": synth_seconds, "jsii_callbacks": 0},
        "warm_build": None,
    }


@pytest.fixture(scope="module")
def report() -> str:
    rounds = {
        "as-app": [_variant("as-app", 13.0, 15.0, 4.7), _variant("as-app", 13.2, 15.2, 4.7)],
        "no-synth-cache": [_variant("no-synth-cache", 16.0, 18.5, 4.7), _variant("no-synth-cache", 16.4, 18.9, 4.7)],
        "no-checks": [_variant("no-checks", 11.0, 12.6, 3.2), _variant("no-checks", 11.4, 13.0, 3.2)],
        "no-validation": [_variant("no-validation", 10.0, 10.5, 1.6), _variant("no-validation", 10.2, 10.7, 1.6)],
    }
    result = synth.SynthResult(
        Sample.of(WHOLE),
        Sample.of(MINIMAL),
        paired_ratios(WHOLE, MINIMAL),
        Sample.of([w * 1.2 for w in WHOLE]),
        Sample.of([m * 1.4 for m in MINIMAL]),
        paired_ratios([w * 1.2 for w in WHOLE], [m * 1.4 for m in MINIMAL]),
        full_wall_unvalidated=Sample.of(WHOLE_OFF),
        minimal_wall_unvalidated=Sample.of(MINIMAL_OFF),
        ratio_wall_unvalidated=paired_ratios(WHOLE_OFF, MINIMAL_OFF),
        full_wall_uncached=Sample.of(UNCACHED),
        ratio_wall_uncached=paired_ratios(UNCACHED, MINIMAL),
        cache_differences=[],
        variants={name: runs[0] for name, runs in rounds.items()},
        rounds=rounds,
    )
    return synth.markdown(result)


def test_the_headline_keeps_validation_on_both_sides_and_the_ratio_without_it_is_shown(report):
    assert "| **ratio whole / minimal, wall** (per pair) | 3 | 2.73 x |" in report
    assert "| ratio whole / minimal, wall, both `--no-validation` (per pair) | 3 | 5.33 x |" in report
    assert "the validation costs the whole app 3.0 s and the minimal app 3.2 s" in report


def test_the_target_is_one_point_eight_times_the_minimal_median(report):
    assert "1.8 x 5.50 s (the minimal app's median) = 9.90 s, against its 15.00 s" in report
    assert "misses the target with every check on (" in report
    assert "x per pair; 5.1 s over at the medians)" in report


def test_the_synth_cache_is_measured_side_by_side_and_its_assemblies_compared(report):
    assert "| whole app, wall, synth cache off | 3 | 18.00 s |" in report
    # 18.0/5.5, 17.6/5.4, 18.4/5.6 per pair
    assert "| ratio whole (synth cache off) / minimal, wall (per pair) | 3 | 3.27 x |" in report
    assert "the cache saves 3.0 s of wall time (medians)" in report
    assert "byte-identical (all files, first round)" in report
    # as-app against no-synth-cache: 3.0 and 3.2 s of wall, 3.5 and 3.7 s of CPU
    assert "+3.10 (+3.00 to +3.20) s wall and +3.60 (+3.50 to +3.70) s CPU saved all in" in report
    assert "the SDK's import and the definitions take 3.50 s of the build" in report


def test_remaining_parts_add_up_within_the_in_process_build(report):
    # building 4.1 s less 1.2 s of definitions and 0.4 s of acknowledgements
    assert "| jsii construct building | 2.50 |" in report
    # imports 3.1 + config 0.3 + building 4.1 + app.synth() 4.7
    assert "| sum | 12.20 | against 13.00 s" in report
    # the CLI's 15.0 s less the in-process median of 13.1 s
    assert "the CLI (its own start, starting app.py, reading the assembly back) adds about 1.9 s" in report
    assert "the minimal app without validation, is 2.25 s" in report


def test_switching_parts_off_gives_their_cost_all_in(report):
    # no-checks saves 2.0 and 1.8 s of wall: median 1.9
    assert "HIPAA Security packs): +1.90 (+1.80 to +2.00) s wall" in report
    assert "through the CLI (`--no-validation`) 3.0 s for the whole app and 3.2 s for the minimal one" in report
    assert "lookups made): +3.10 (+3.00 to +3.20) s wall, +3.60 (+3.50 to +3.70) s CPU saved by it" in report


def test_what_the_target_would_take_starts_from_the_measured_cli_figures(report):
    assert "| as `make synth` runs it, every check on (measured) | 15.0 | 2.73x | misses |" in report
    assert "| synth cache off, every check on (measured) | 18.0 | 3.27x | misses |" in report
    assert "(measured: `cdk synth --no-validation`) | 12.0 | 2.18x | misses |" in report
    # 12.0 - 1.9 (no-checks) = 10.1
    assert "less the `no-checks` saving) | 10.1 | 1.84x | misses |" in report


def test_the_cuts_are_reported_as_done_with_the_numbers_from_before(report):
    assert "3.58x the minimal app's 5.6 s" in report
    assert "20.0 s" in report
    assert "byte-identical" in report
    assert "prototype" not in report.lower()
