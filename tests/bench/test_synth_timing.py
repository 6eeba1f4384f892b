"""bench/synth.py's timings: the CPU of a run includes processes that outlive the command (app.py's jsii node)."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import synth

BUSY = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"


def test_cpu_counts_a_descendant_that_outlives_the_command(tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    # The shell exits at once; its background child burns 0.5 s of CPU as an orphan.
    timing = synth.timed_run(["sh", "-c", f"{sys.executable} {script} &"], cwd=tmp_path, env={}, what="orphan")
    assert timing.cpu >= 0.45
