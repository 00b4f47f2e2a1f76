"""Views of a capacity store (the Redis-compatible server the dev stack runs): one nothing
answers at, and the operator's view of a local stack's (one of a test's own:
tests/support/valkey.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import redis.asyncio as redis

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.config import Settings


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
