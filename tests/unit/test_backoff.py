"""Backoff arithmetic for the retry_llm state."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.engine.backoff import full_jitter_delay

INITIAL = timedelta(seconds=1)
CAP = timedelta(seconds=30)


@given(st.integers(min_value=1, max_value=60), st.floats(min_value=0, max_value=0.999999))
def test_delay_is_within_the_capped_exponential_ceiling(failures: int, draw: float) -> None:
    """Full jitter: 0 <= delay <= min(cap, initial * 2^(failures-1))."""
    delay = full_jitter_delay(failures, initial=INITIAL, cap=CAP, unit_random=draw)
    ceiling = min(30.0, 2.0 ** (failures - 1))
    assert timedelta(0) <= delay <= timedelta(seconds=ceiling)


def test_retry_after_is_a_floor() -> None:
    """A provider's Retry-After is never undercut, even when the jitter draws zero."""
    delay = full_jitter_delay(
        1, initial=INITIAL, cap=CAP, unit_random=0.0, at_least=timedelta(seconds=2)
    )
    assert delay == timedelta(seconds=2)
    longer = full_jitter_delay(
        6, initial=INITIAL, cap=CAP, unit_random=0.9, at_least=timedelta(seconds=2)
    )
    assert longer == timedelta(seconds=0.9 * 30)


def test_invalid_arguments_are_refused() -> None:
    """Zero failures or a draw outside [0, 1) is a programming error."""
    with pytest.raises(ValueError, match="failures"):
        full_jitter_delay(0, initial=INITIAL, cap=CAP, unit_random=0.5)
    with pytest.raises(ValueError, match="unit_random"):
        full_jitter_delay(1, initial=INITIAL, cap=CAP, unit_random=1.0)
