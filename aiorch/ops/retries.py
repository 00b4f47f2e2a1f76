"""The one rule for retrying a call to Temporal from the operator's tools (the CLI, the review
inbox, ``aiorch.ops``): a call that failed in transit is made again, a few times, with
exponential backoff; anything the server or the run answered is not.

Transient: the server unavailable (restarting, a dropped connection), a deadline that passed
(a slow server or worker: an update's comes back as the SDK's ``RPCTimeoutOrCancelledError``),
a full queue. The SDK's client already retries some of these for about ten seconds; this rule
carries a command across a longer outage and covers the deadlines it does not retry.

Never retried: a refused decision (an update's ``DecisionRefused``, which the run would refuse
again), an unknown run, an invalid request, a cancellation. Retrying is safe for what the tools
send: reads, and updates whose id names the decision (a repeat returns the first result).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import RPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

T = TypeVar("T")

TRANSIENT = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}
)
ATTEMPTS = 5
# The first wait and the longest, in seconds: 0.25, 0.5, 1, 2 between five attempts.
BACKOFF = (0.25, 5.0)


def is_transient(error: BaseException, transient: frozenset[RPCStatusCode] = TRANSIENT) -> bool:
    """Whether ``error`` is a call that failed in transit (see the module doc)."""
    if isinstance(error, RPCTimeoutOrCancelledError):  # the SDK's form of an update's deadline
        error = error.__cause__ if error.__cause__ is not None else error
    return isinstance(error, RPCError) and error.status in transient


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = ATTEMPTS,
    backoff: tuple[float, float] = BACKOFF,
    transient: frozenset[RPCStatusCode] = TRANSIENT,
    reconnecting: bool = False,
) -> T:
    """``call()``, made again after a transient failure (`is_transient`, with ``transient``),
    at most ``attempts`` times in all, waiting ``backoff`` (first and longest, seconds)
    doubling in between; with ``reconnecting``, also while the client re-establishes its
    connection (the SDK's RuntimeError). Anything else, or the last failure, is raised."""
    first, longest = backoff
    for attempt in range(attempts):
        try:
            return await call()
        except (RPCError, RPCTimeoutOrCancelledError) as err:
            if not is_transient(err, transient) or attempt == attempts - 1:
                raise
        except RuntimeError:
            if not reconnecting or attempt == attempts - 1:
                raise
        await asyncio.sleep(min(first * 2**attempt, longest))
    raise AssertionError("unreachable")
