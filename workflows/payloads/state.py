"""The workflow's own state, and what a continued run is handed.

``RunCore`` is what the engine keeps for every run of every pipeline; a pipeline's state extends
it (``RunState`` is the LLM pipeline's), so what a continued run carries is one flat JSON object
whatever the pipeline.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from workflows.payloads._base import _Mutable, _Strict
from workflows.payloads.activity import LlmCallResult, PromptPlan, RunPolicy
from workflows.payloads.client import RequestBase, RunProgress
from workflows.payloads.policy import Correction, Vote

__all__ = [
    "ContinuedRun",
    "RunCore",
    "RunState",
]

PlanT = TypeVar("PlanT", bound=RunPolicy)
RequestT = TypeVar("RequestT", bound=RequestBase)
StateT = TypeVar("StateT", bound=BaseModel)


class RunCore(RunProgress, _Mutable, Generic[PlanT]):
    """Everything the engine knows about a run (its progress and the rest): held by the
    workflow, changed by its handlers, and carried whole to the run that continues it."""

    state: str
    # When the current state began, and when the first run of this chain started.
    state_since: datetime | None = None
    started_at: datetime | None = None
    history_bytes: int = 0
    consecutive_failures: int = 0
    retry_after_s: float | None = None
    feedback: list[str] = Field(default_factory=list)
    # When the current review wait (a review or escalation state) times out, when its round
    # began, and the votes the round counted short of its policy's quorum.
    review_deadline: datetime | None = None
    round_started_at: datetime | None = None
    votes: list[Vote] = Field(default_factory=list)
    plan: PlanT | None = None
    # Operator actions: expire_review ends one review wait, dead_letter every one until the end.
    forced_timeout: str | None = None
    dead_letter_requested: str | None = None
    # Capacity and budgets: the wait before asking for capacity again, when the budget
    # decision times out, and whether an operator approved crossing the budget.
    capacity_wait_s: float | None = None
    budget_deadline: datetime | None = None
    budget_approved: bool = False
    # The next model call asks again for a well-formed reply (the last one was malformed).
    corrective_next: bool = False
    # Fields a reviewer corrected with an approval, for the state the correction leads to.
    corrected: dict[str, Any] | None = None
    # Reviewer keys (ids) and reviewers an operator revoked since the run was planned.
    revoked_keys: list[str] = Field(default_factory=list)
    revoked_reviewers: list[str] = Field(default_factory=list)
    # Every reedit and correction, as evaluation data (the newest kept, within a bound).
    corrections: list[Correction] = Field(default_factory=list)
    corrections_dropped: int = 0
    # The batch lane: the batched call the run waits for (in batch_id), and its outcome, which
    # the model call's step takes up next.
    batch_item: str | None = None
    batch_result: LlmCallResult | None = None


class RunState(RunCore[PromptPlan]):
    """The LLM pipeline's run: the engine's state, the model's reply and the stored vector."""

    reply: LlmCallResult | None = None
    embedding_id: str | None = None


class ContinuedRun(_Strict, Generic[RequestT, StateT]):
    """Input of a continued run: the original request plus the carried state. Accepted only
    from this workflow's own continue-as-new (the workflow checks how the run was started and
    that the state is one a run may resume in), never from a client."""

    request: RequestT
    carried: StateT
