"""A SIGTERM to the tests (a cancelled CI job) stops the servers their fixtures started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_AND_TEST = """
import os
import time
from pathlib import Path

import pytest

from aiorch.devstack.processes import ManagedProcess


@pytest.fixture
def server(tmp_path):
    with ManagedProcess("sleeper", ["sleep", "600"], log_dir=tmp_path) as proc:
        Path(os.environ["SERVER_PID_FILE"]).write_text(str(proc.pid))
        yield proc


def test_runs_long(server):
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(path: Path, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text()):
            return text
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written in {seconds} s")


def test_a_sigterm_runs_the_fixtures_teardown(tmp_path: Path) -> None:
    """pytest, with this suite's conftest, given SIGTERM in the middle of a test whose fixture
    started a server in a session of its own: the teardown runs and the server is gone."""
    (tmp_path / "test_inner.py").write_text(FIXTURE_AND_TEST)
    pid_file = tmp_path / "server.pid"
    env = {**os.environ, "SERVER_PID_FILE": str(pid_file), "PYTHONPATH": str(ROOT)}
    tests = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_inner.py"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        server_pid = int(_wait_for(pid_file, 60))
        assert _alive(server_pid)
        tests.send_signal(signal.SIGTERM)
        output, _ = tests.communicate(timeout=30)
    finally:
        tests.kill()
    deadline = time.monotonic() + 15
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server_pid), output.decode(errors="replace")
