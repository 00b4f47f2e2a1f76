"""A real PostgreSQL server for the tests, from Debian's packages (``apt-get install
postgresql``; ``.ci/run`` installs it).

The server runs in a temporary directory on a free port, with its unix socket in that directory
too, and is stopped by its PID; the helper then checks that neither it nor any of its child
processes is left. ``initdb`` and ``pg_ctl`` refuse to run as root, so as root the server runs as
the ``postgres`` user (``runuser -u postgres --``). TCP connections need the password (SCRAM),
so tests can prove a wrong one is refused. Without PostgreSQL installed, a test fails under
``CI=true`` and is skipped otherwise, with the reason.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from aiorch.devstack.processes import HOST, free_port

PACKAGES = Path("/usr/lib/postgresql")
SUPERUSER = "aiorch"
STOP_TIMEOUT_S = 30.0


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's ``bin`` folder; fails under CI=true, else skips, when
    there is none."""
    found = sorted(
        (path.parent for path in PACKAGES.glob("*/bin/initdb")),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    reason = f"PostgreSQL is not installed (no {PACKAGES}/*/bin/initdb): apt-get install postgresql"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass(frozen=True)
class Postgres:
    """A running server: where it listens, its superuser's password and its postmaster's PID."""

    port: int
    password: str
    pid: int

    def url(self, database: str, *, password: str | None = None) -> str:
        """A ``postgresql://`` URL for ``database`` (with another password, when given)."""
        secret = quote(self.password if password is None else password, safe="")
        return f"postgresql://{SUPERUSER}:{secret}@{HOST}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create the database ``name``; return its URL."""
        with psycopg.connect(
            host=HOST,
            port=self.port,
            user=SUPERUSER,
            password=self.password,
            dbname="postgres",
            autocommit=True,
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _run(what: str, command: list[str], log: Path | None = None) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
        raise RuntimeError(
            f"{what} failed ({result.returncode}): {result.stderr.strip()[-2000:]}\n{tail}"
        )


def _children(pid: int) -> set[int]:
    """The PIDs whose parent is ``pid``."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The parent is the 2nd field after the command name, which is in parentheses.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def _postmaster(data: Path) -> int | None:
    """The PID of the server running on ``data``, from its lock file, if there is one."""
    try:
        return int((data / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _stop(pid: int) -> None:
    """Fast shutdown by PID (SIGINT), SIGKILL after the timeout; then no process is left."""
    processes = {pid, *_children(pid)}
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(_alive(each) for each in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    for each in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    left = sorted(each for each in processes if _alive(each))
    assert not left, f"PostgreSQL processes left running: {left}"


@contextlib.contextmanager
def running_postgres() -> Iterator[Postgres]:
    """Start a PostgreSQL server for the ``with`` block; stop it and remove its files after."""
    bindir = postgres_bin()
    base = Path(tempfile.mkdtemp(prefix="aiorch-postgres-"))
    data, sockets, log = base / "data", base / "run", base / "server.log"
    password = secrets.token_hex(16)
    (base / "password").write_text(password)
    sockets.mkdir()
    if os.geteuid() == 0:
        for path in (base, base / "password", sockets):
            shutil.chown(path, "postgres", "postgres")
    pid: int | None = None
    try:
        _run(
            "initdb",
            _as_server_user(
                [
                    str(bindir / "initdb"),
                    f"--pgdata={data}",
                    f"--username={SUPERUSER}",
                    f"--pwfile={base / 'password'}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-sync",
                ]
            ),
        )
        port = free_port()
        options = f"-p {port} -k {sockets} -c listen_addresses={HOST} -c fsync=off"
        _run(
            "pg_ctl start",
            _as_server_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    options,
                    "start",
                ]
            ),
            log,
        )
        pid = _postmaster(data)
        assert pid is not None, "pg_ctl started no server"
        yield Postgres(port=port, password=password, pid=pid)
    finally:
        # A start that failed half-way may still have left a server running.
        pid = pid or _postmaster(data)
        if pid is not None:
            _stop(pid)
        shutil.rmtree(base, ignore_errors=True)
