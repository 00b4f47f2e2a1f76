"""What the capacity store answers (``aiorch_runtime.capacity``): a capacity reservation's
grant, a spend reservation's verdict, and a settlement; and what a provider's answer tells it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

BudgetVerdict = Literal["reserved", "over", "held"]


@dataclass(frozen=True)
class Grant:
    """The answer to a reservation: granted now; or wait ``wait`` and ask again; or ``never``
    (more tokens than the model's bucket of ``token_limit`` holds)."""

    granted: bool
    wait: timedelta
    tokens_left: float
    requests_left: float
    never: bool = False
    token_limit: int = 0
    # Granted after queueing: how long the caller had been queued (its whole wait, over every
    # time it came back).
    queued_for: timedelta = timedelta(0)


@dataclass(frozen=True)
class BudgetAnswer:
    """The answer to a spend reservation: ``reserved``; ``over`` (what was spent leaves no room
    for the worst case); or ``held`` (only the reservations of calls in flight leave none)."""

    verdict: BudgetVerdict
    spent: float
    reserved: float


@dataclass(frozen=True)
class SpendSettled:
    """The answer to a settlement: the day's spend, and whether this settlement counted the
    call (False: the call was settled before, and nothing was added)."""

    total: float
    counted: bool


@dataclass(frozen=True)
class ProviderSignal:
    """What a provider's answer says about its limits (any part may be missing)."""

    remaining_tokens: int | None = None
    remaining_requests: int | None = None
    limit_tokens: int | None = None
    limit_requests: int | None = None
    retry_after: timedelta | None = None

    @property
    def empty(self) -> bool:
        """True when the answer carried no rate-limit information."""
        return all(value is None for value in vars(self).values())
