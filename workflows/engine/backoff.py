"""Retry timing for the ``retry_llm`` state: pure arithmetic, no Temporal imports."""

from __future__ import annotations

from datetime import timedelta


def full_jitter_delay(
    failures: int,
    *,
    initial: timedelta,
    cap: timedelta,
    unit_random: float,
    at_least: timedelta | None = None,
) -> timedelta:
    """The wait before the next attempt: exponential backoff with full jitter, capped.

    Full jitter (a uniform draw between zero and the exponential ceiling) spreads a herd of
    throttled runs apart instead of retrying them in lock-step. A provider's own Retry-After is
    a floor: waiting less would only earn another 429.

    Args:
        failures: consecutive failures so far, at least 1.
        initial: the ceiling after the first failure.
        cap: the largest ceiling.
        unit_random: a draw from [0, 1); in workflows pass ``workflow.random().random()``.
        at_least: the provider's Retry-After, if it gave one.
    """
    if failures < 1:
        raise ValueError("failures must be at least 1")
    if not 0.0 <= unit_random < 1.0:
        raise ValueError("unit_random must be in [0, 1)")
    ceiling = min(cap.total_seconds(), initial.total_seconds() * 2 ** (failures - 1))
    delay = timedelta(seconds=ceiling * unit_random)
    if at_least is not None and at_least > delay:
        delay = at_least
    return delay
