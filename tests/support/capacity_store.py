"""A capacity store (the Redis-compatible server the dev stack runs) of a test's own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import redis.asyncio as redis

from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_capacity_store
from aiorch.devstack.stack import LocalStack
from aiorch.runtime.capacity import CapacityStore
from aiorch.runtime.config import Settings


def capacity_store_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start a capacity store on a free port, yield its URL, and stop it by its PID."""
    port = free_port()
    process: ManagedProcess = start_capacity_store(
        port=port, log_dir=Path(tmp_path_factory.mktemp("redis"))
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.stop()


def unreachable_store(lease: timedelta) -> CapacityStore:
    """A capacity store at a port nothing listens on: every operation fails at once, as when
    the store is down."""
    client = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    return CapacityStore(client, lease=lease)


@asynccontextmanager
async def operator_view(stack: LocalStack) -> AsyncIterator[CapacityStore]:
    """The operator's view of the capacity store a local stack's worker uses."""
    settings = Settings(capacity_store_url=stack.addresses.capacity_store_url)
    capacity = CapacityStore.from_settings(settings)
    assert capacity is not None
    try:
        yield capacity
    finally:
        await capacity.close()
