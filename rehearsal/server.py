"""Run the emulator (`emulator.py`) in its own process on a free loopback port, and always stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# moto runs a custom resource's Lambda in a Docker container (pulling an image from Docker Hub). The rehearsal
# must behave the same on every machine and never reach the network, so moto gets a Docker socket that is not there.
NO_DOCKER = "unix:///nonexistent/rehearsal-has-no-docker.sock"


class EmulatorError(RuntimeError):
    """The emulator did not start; the message ends with its log."""


@dataclass(frozen=True)
class Emulator:
    port: int
    log: Path
    pid: int = 0

    @property
    def endpoint_url(self) -> str:
        # `localhost`, not 127.0.0.1: moto reads an S3 URL as path-style (bucket in the path, as the CDK CLI's
        # TemplateURL is written against a custom endpoint) only when the host is `localhost`.
        return f"http://localhost:{self.port}"


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def is_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def running_emulator(
    log: Path, *, account: str | None = None, startup_timeout_s: float = 60.0, stay_up: Callable[[], bool] = bool
) -> Iterator[Emulator]:
    """The emulator listening on 127.0.0.1:<free port>; stopped on leaving the block, also after an error, unless
    `stay_up()` says, on leaving without an error, to leave it running (`make rehearse KEEP=1`: its pid is printed).

    Args:
        account: the account every request acts in (a stage that names its account); None: moto's 123456789012.
    """
    port = free_port()
    env = {**os.environ, "DOCKER_HOST": NO_DOCKER}
    if account:
        env["MOTO_ACCOUNT_ID"] = account
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "rehearsal.emulator", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_until_listening(process, port, log, startup_timeout_s)
        yield Emulator(port=port, log=log, pid=process.pid)
    except BaseException:
        stop(process)
        raise
    if not stay_up():
        stop(process)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s; waits, so no zombie is left."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_until_listening(process: subprocess.Popen, port: int, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmulatorError(
                f"the emulator exited with status {process.returncode} before listening on 127.0.0.1:{port}; "
                f"its log ({log}) ends:\n{_tail(log)}"
            )
        if is_listening(port):
            return
        time.sleep(0.1)
    raise EmulatorError(
        f"the emulator did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s; its log ({log}) ends:\n{_tail(log)}"
    )


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
