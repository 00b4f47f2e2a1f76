"""The simulator's provider-style rate limits, on a clock the test moves."""

from __future__ import annotations

from aiorch.devstack.llm_simulator.ratelimit import RateLimits, RateLimitSpec, format_reset


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_tokens_per_minute_admit_refuse_and_refill() -> None:
    """600 tokens/minute: 500 then 100 fit, the next 50 waits 5 s (10 tokens/s), and fits after
    5 s; headers carry limit, remaining and the time until the bucket is full."""
    clock = Clock()
    limits = RateLimits(clock=clock)
    limits.configure(RateLimitSpec(tpm=600))
    first = limits.admit("m", 500)
    assert first is not None
    assert first.admitted
    assert first.headers["x-ratelimit-limit-tokens"] == "600"
    assert first.headers["x-ratelimit-remaining-tokens"] == "100"
    assert first.headers["x-ratelimit-reset-tokens"] == "50s"
    assert limits.admit("m", 100).admitted  # type: ignore[union-attr]
    refused = limits.admit("m", 50)
    assert refused is not None
    assert not refused.admitted
    assert refused.retry_after_s == 5.0
    clock.now += 5
    assert limits.admit("m", 50).admitted  # type: ignore[union-attr]
    assert limits.state()["models"]["m"]["refused"] == 1  # type: ignore[index]


def test_limits_are_per_model_and_removable() -> None:
    """A model's own limit wins over the default; every model has its own buckets; a model
    without any limit is not limited; clearing removes every limit."""
    limits = RateLimits(clock=Clock())
    limits.configure(RateLimitSpec(rpm=1))
    limits.configure(RateLimitSpec(rpm=2, model="big"))
    assert limits.admit("a", 1).admitted  # type: ignore[union-attr]
    assert not limits.admit("a", 1).admitted  # type: ignore[union-attr]
    assert limits.admit("b", 1).admitted  # type: ignore[union-attr]
    assert limits.admit("big", 1).admitted  # type: ignore[union-attr]
    assert limits.admit("big", 1).admitted  # type: ignore[union-attr]
    limits.clear()
    assert limits.admit("a", 1) is None


def test_reset_durations_read_like_openais() -> None:
    """Durations are written as OpenAI writes them: milliseconds, seconds, minutes."""
    assert format_reset(0.02) == "20ms"
    assert format_reset(1.5) == "1.5s"
    assert format_reset(360) == "6m0s"
