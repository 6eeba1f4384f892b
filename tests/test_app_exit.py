"""app.exit_without_teardown: a synth's process ends at once, but cleans up as jsii's own exit does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.cdk_assembly import REPO

PROGRAM = textwrap.dedent(
    """
    import atexit
    import aws_cdk
    from jsii._kernel import Kernel

    import app

    aws_cdk.App()  # the jsii node process is running
    node = Kernel().provider._process._process
    print("runtime", node.args[-1], "pid", node.pid, flush=False)  # flushed by the exit, not here
    atexit.register(print, "atexit handler ran")
    app.exit_without_teardown()
    print("not reached")
    """
)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_exits_0_with_output_flushed_atexit_run_and_jsii_cleaned_up() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "not reached" not in result.stdout
    assert "atexit handler ran" in result.stdout
    words = result.stdout.split()
    runtime, pid = Path(words[words.index("runtime") + 1]), int(words[words.index("pid") + 1])
    assert runtime.name == "jsii-runtime.js"
    # jsii's temporary copy of its runtime is gone, as after jsii's own exit...
    assert not runtime.parent.parent.exists()
    # ...and node, told to exit, ends by itself.
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid), f"jsii's node process {pid} still running"
