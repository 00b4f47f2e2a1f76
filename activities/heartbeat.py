"""Heartbeating while an activity waits on a slow call, so that a cancel reaches it, and while
it works through a long loop, so that the server does not time it out.

Temporal delivers a cancellation to an activity only with the answer to a heartbeat, so an
activity that waits on a provider (a chat completion, an embeddings call) heartbeats while it
waits (`heartbeat_while`). An activity that loops over many items (a batch's calls) heartbeats
by the clock, not by a count of items (`HeartbeatPacer`): what one item costs depends on the
load, and an attempt that heartbeats only every N items is timed out while it still works. The
interval is a parameter: the worker uses `HEARTBEAT_EVERY`, tests a few milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from temporalio import activity

HEARTBEAT_EVERY = timedelta(seconds=2)
T = TypeVar("T")


async def heartbeat_while(work: Awaitable[T], detail: str, every: timedelta = HEARTBEAT_EVERY) -> T:
    """``await work``, heartbeating ``detail`` every ``every`` until it is done.

    The work is cancelled when the wait ends otherwise (the activity was cancelled).

    Raises:
        Whatever ``work`` raises.
    """
    task = asyncio.ensure_future(work)
    try:
        while not (await asyncio.wait({task}, timeout=every.total_seconds()))[0]:
            activity.heartbeat(detail)
        return task.result()
    finally:
        task.cancel()


class HeartbeatPacer:
    """Heartbeats from a loop, at most one every ``every`` however long each step takes.

    A heartbeat is a billable action once it reaches the server; the SDK sends at most one
    every 80% of the heartbeat timeout, and this keeps the loop from building one per step.
    """

    def __init__(self, every: timedelta = HEARTBEAT_EVERY) -> None:
        self._every = every.total_seconds()
        self._last = time.monotonic()

    def beat(self, detail: str) -> None:
        """Heartbeat ``detail`` if ``every`` has passed since the last heartbeat (or since the
        pacer was made)."""
        now = time.monotonic()
        if now - self._last >= self._every:
            activity.heartbeat(detail)
            self._last = now
