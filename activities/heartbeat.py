"""Heartbeating while an activity waits on a slow call, so that a cancel reaches it.

Temporal delivers a cancellation to an activity only with the answer to a heartbeat, so an
activity that waits on a provider (a chat completion, an embeddings call) heartbeats while it
waits. The interval is a parameter: the worker uses `HEARTBEAT_EVERY`, tests a few milliseconds.
"""

from __future__ import annotations

import asyncio
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
