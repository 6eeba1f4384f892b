"""bench/stats.py: medians, spreads and side-by-side ratios of known numbers."""

from __future__ import annotations

import pytest

from bench.stats import Sample, paired_ratios, verdict


def test_median_low_high_and_spread_of_an_odd_sample():
    sample = Sample.of([24.8, 23.9, 24.31])

    assert sample.runs == 3
    assert sample.median == pytest.approx(24.31)
    assert (sample.low, sample.high) == (23.9, 24.8)
    assert sample.spread_percent == pytest.approx(100 * 0.9 / 24.31)
    assert sample.describe() == "24.31 s (3 runs, 23.90-24.80, spread 3.7%)"


def test_median_of_an_even_sample_is_the_mean_of_the_middle_two():
    sample = Sample.of([4, 1, 3, 2])

    assert sample.median == pytest.approx(2.5)
    assert sample.spread_percent == pytest.approx(120.0)


def test_a_single_run_has_no_spread():
    sample = Sample.of([5.0])

    assert sample.spread_percent == 0.0
    assert sample.describe() == "5.00 s (1 run)"


def test_an_empty_sample_is_refused_with_its_unit():
    with pytest.raises(ValueError, match=r"at least one measurement.*'ms'"):
        Sample.of([], unit="ms")


def test_paired_ratios_divide_each_pair_not_the_medians():
    ratios = paired_ratios([20.0, 18.0, 21.0], [5.0, 6.0, 7.0])

    assert ratios.values == (4.0, 3.0, 3.0)
    assert ratios.median == 3.0
    assert ratios.unit == "x"


def test_paired_ratios_refuse_unmatched_or_non_positive_denominators():
    with pytest.raises(ValueError, match="got 2 and 1"):
        paired_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratios([1.0], [0.0])


def test_verdict_against_an_upper_and_a_lower_bound():
    assert verdict(1.5, 1.5) == "meets"
    assert verdict(1.51, 1.5) == "misses"
    assert verdict(90.0, 100.0, higher_is_worse=False) == "misses"
