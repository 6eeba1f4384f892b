"""bench/containers.py: the figures of make test-containers come from the runner's own closing lines."""

from __future__ import annotations

from bench import containers

OUTPUT = """== smp-v1: pytorch-training:1.13.1
============ 41 passed in 120.50s (0:02:00) ============
== lmi-0.27: djl-inference
============ 1 failed, 30 passed in 60.00s ============
== test-containers
smp-v1: set-up 95 s, tests 121 s
lmi-0.27: set-up 40 s, tests 61 s, FAILED
"""


def test_each_environments_set_up_and_test_seconds_and_outcome_are_read():
    smp, lmi = containers.parse(OUTPUT)
    assert (smp.name, smp.setup_seconds, smp.test_seconds, smp.passed) == ("smp-v1", 95, 121, True)
    assert smp.pytest_summary == "41 passed in 120.50s (0:02:00)"
    assert (lmi.name, lmi.passed, lmi.pytest_summary) == ("lmi-0.27", False, "1 failed, 30 passed in 60.00s")


def test_the_section_says_whether_the_whole_target_meets_30_minutes():
    result = containers.ContainersResult(1900.0, containers.parse(OUTPUT), 1)
    text = containers.markdown(result)
    assert "| smp-v1 | 95 | 121 | 41 passed in 120.50s (0:02:00) |" in text
    assert "**FAILED**" in text and "**misses**" in text
