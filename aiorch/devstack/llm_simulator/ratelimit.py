"""The simulator's shared rate-limit mode: requests and tokens per minute across all callers,
per model, in the form providers enforce them, with their headers and 429s.

Each limited model has two token buckets (requests, tokens) that hold at most one minute's
limit and refill continuously. A call is admitted when both hold enough for it (one request;
the tokens it uses, which the simulator knows before answering: prompt + completion words) and
is charged then. Every answer carries OpenAI's headers: ``x-ratelimit-limit-requests``/
``-tokens``, ``x-ratelimit-remaining-requests``/``-tokens`` and ``x-ratelimit-reset-requests``/
``-tokens`` (time until the bucket is full again, e.g. ``1.5s``, ``6m0s``). A call that does not
fit gets 429 ``rate_limit_exceeded`` with ``Retry-After`` (whole seconds, rounded up) and
``retry-after-ms`` (the time until it would fit), and is charged nothing.

Configured at start (``--rpm``/``--tpm``: every model) or at run time: ``PUT /_sim/ratelimits``
with ``{"rpm", "tpm", "model"}`` (``model`` null: the default for every model; both limits null:
that entry removed), ``GET`` shows the limits and each model's buckets and counters,
``DELETE`` removes every limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_KEY = "*"


class RateLimitSpec(BaseModel):
    """The body of ``PUT /_sim/ratelimits``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    model: str | None = None


@dataclass
class Bucket:
    """One minute's worth of a limit, refilled continuously."""

    limit: int
    level: float
    updated: float

    def refill(self, now: float) -> None:
        """Add what ``now - updated`` seconds refill, up to the limit."""
        self.level = min(self.limit, self.level + (now - self.updated) * self.limit / 60.0)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until the bucket holds ``amount`` (0 when it already does)."""
        return max(0.0, (amount - self.level) * 60.0 / self.limit)

    def reset(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.limit - self.level) * 60.0 / self.limit)


@dataclass
class ModelLimiter:
    """The buckets of one model and what they did."""

    requests: Bucket | None
    tokens: Bucket | None
    admitted: int = 0
    refused: int = 0
    admitted_tokens: int = 0


@dataclass(frozen=True)
class Verdict:
    """Whether a call is admitted, the headers to send, and (refused) the wait."""

    admitted: bool
    headers: dict[str, str]
    retry_after_s: float = 0.0


def format_reset(seconds: float) -> str:
    """A duration as OpenAI writes it: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes:
        return f"{int(minutes)}m{rest:.0f}s"
    return f"{rest:.3g}s"


@dataclass
class RateLimits:
    """Limits per model (``DEFAULT_KEY`` for every model without its own) and their buckets."""

    specs: dict[str, RateLimitSpec] = field(default_factory=dict)
    models: dict[str, ModelLimiter] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic

    def configure(self, spec: RateLimitSpec) -> None:
        """Set (or, with both limits null, remove) a model's or the default limits; buckets
        start full."""
        key = spec.model or DEFAULT_KEY
        if spec.rpm is None and spec.tpm is None:
            self.specs.pop(key, None)
        else:
            self.specs[key] = spec
        if key == DEFAULT_KEY:
            self.models.clear()
        else:
            self.models.pop(key, None)

    def clear(self) -> None:
        """Remove every limit."""
        self.specs.clear()
        self.models.clear()

    def admit(self, model: str, tokens: int) -> Verdict | None:
        """Charge one request and ``tokens`` to ``model``, or refuse; None when not limited."""
        limiter = self._limiter(model)
        if limiter is None:
            return None
        now = self.clock()
        buckets = [b for b in (limiter.requests, limiter.tokens) if b is not None]
        for bucket in buckets:
            bucket.refill(now)
        wait = max(
            limiter.requests.wait_for(1) if limiter.requests else 0.0,
            limiter.tokens.wait_for(tokens) if limiter.tokens else 0.0,
        )
        # A call larger than the whole limit can never fit: it waits for a full bucket.
        if limiter.tokens and tokens > limiter.tokens.limit:
            wait = max(wait, limiter.tokens.reset())
        admitted = wait == 0.0
        if admitted:
            if limiter.requests:
                limiter.requests.level -= 1
            if limiter.tokens:
                limiter.tokens.level -= tokens
            limiter.admitted += 1
            limiter.admitted_tokens += tokens
        else:
            limiter.refused += 1
        return Verdict(admitted, _headers(limiter), wait)

    def state(self) -> dict[str, object]:
        """The limits, and each model's buckets and counters (``GET /_sim/ratelimits``)."""
        now = self.clock()
        models: dict[str, object] = {}
        for name, limiter in self.models.items():
            for bucket in (limiter.requests, limiter.tokens):
                if bucket is not None:
                    bucket.refill(now)
            models[name] = {
                "remaining_requests": limiter.requests.level if limiter.requests else None,
                "remaining_tokens": limiter.tokens.level if limiter.tokens else None,
                "admitted": limiter.admitted,
                "refused": limiter.refused,
                "admitted_tokens": limiter.admitted_tokens,
            }
        limits = {key: spec.model_dump(exclude={"model"}) for key, spec in self.specs.items()}
        return {"limits": limits, "models": models}

    def _limiter(self, model: str) -> ModelLimiter | None:
        limiter = self.models.get(model)
        if limiter is not None:
            return limiter
        spec = self.specs.get(model) or self.specs.get(DEFAULT_KEY)
        if spec is None:
            return None
        now = self.clock()
        limiter = ModelLimiter(
            requests=Bucket(spec.rpm, spec.rpm, now) if spec.rpm else None,
            tokens=Bucket(spec.tpm, spec.tpm, now) if spec.tpm else None,
        )
        self.models[model] = limiter
        return limiter


def _headers(limiter: ModelLimiter) -> dict[str, str]:
    headers: dict[str, str] = {}
    for kind, bucket in (("requests", limiter.requests), ("tokens", limiter.tokens)):
        if bucket is None:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(bucket.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(bucket.level)))
        headers[f"x-ratelimit-reset-{kind}"] = format_reset(bucket.reset())
    return headers
