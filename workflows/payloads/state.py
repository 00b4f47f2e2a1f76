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
from workflows.payloads.activity import LlmCallResult, PromptPlan
from workflows.payloads.client import RequestBase, RunProgress
from workflows.payloads.policy import Correction, Vote
from workflows.payloads.run_policy import RunPolicy

__all__ = [
    "BatchCall",
    "ContinuedRun",
    "CorrectionLog",
    "ModelCallState",
    "OperatorRequests",
    "Planned",
    "RetryState",
    "ReviewRound",
    "ReviewerChanges",
    "RunCore",
    "RunPosition",
    "RunState",
]

PlanT = TypeVar("PlanT", bound=RunPolicy)
RequestT = TypeVar("RequestT", bound=RequestBase)
StateT = TypeVar("StateT", bound=BaseModel)


# What the engine keeps for a run, by concern. Pydantic lays a model's fields out from its
# last base to its first, so ``RunCore`` lists these in reverse: the carried JSON keeps the
# order it had when they were one flat list.


class RunPosition(_Mutable):
    """Where the run is: its state, since when, when its chain started, and how many bytes
    its history holds."""

    state: str
    # When the current state began, and when the first run of this chain started.
    state_since: datetime | None = None
    started_at: datetime | None = None
    history_bytes: int = 0


class RetryState(_Mutable):
    """A step's failures in a row, and the delay the last one asked for."""

    consecutive_failures: int = 0
    retry_after_s: float | None = None


class ReviewRound(_Mutable):
    """The review round: its reviewers' feedback so far, when the current review wait
    (a review or escalation state) times out, when the round began, and the votes it counted
    short of its policy's quorum."""

    feedback: list[str] = Field(default_factory=list)
    review_deadline: datetime | None = None
    round_started_at: datetime | None = None
    votes: list[Vote] = Field(default_factory=list)


class Planned(_Mutable, Generic[PlanT]):
    """The run's plan, once it is planned."""

    plan: PlanT | None = None


class OperatorRequests(_Mutable):
    """Operator actions: ``expire_review`` ends one review wait, ``dead_letter`` every one
    until the end."""

    forced_timeout: str | None = None
    dead_letter_requested: str | None = None


class ModelCallState(_Mutable):
    """The model call's waits: the wait before asking for capacity again, when the budget
    decision times out, whether an operator approved crossing the budget; and whether the
    next call asks again for a well-formed reply (the last one was malformed)."""

    capacity_wait_s: float | None = None
    budget_deadline: datetime | None = None
    budget_approved: bool = False
    corrective_next: bool = False


class ReviewerChanges(_Mutable):
    """What reviewers and operators changed for the steps to come: fields a reviewer
    corrected with an approval (for the state the correction leads to), and reviewer keys
    (ids) and reviewers an operator revoked since the run was planned."""

    corrected: dict[str, Any] | None = None
    revoked_keys: list[str] = Field(default_factory=list)
    revoked_reviewers: list[str] = Field(default_factory=list)


class CorrectionLog(_Mutable):
    """Every reedit and correction, as evaluation data (the newest kept, within a bound)."""

    corrections: list[Correction] = Field(default_factory=list)
    corrections_dropped: int = 0


class BatchCall(_Mutable):
    """The batch lane: the batched call the run waits for (in ``batch_id``), and its outcome,
    which the model call's step takes up next."""

    batch_item: str | None = None
    batch_result: LlmCallResult | None = None


class RunCore(
    BatchCall,
    CorrectionLog,
    ReviewerChanges,
    ModelCallState,
    OperatorRequests,
    Planned[PlanT],
    ReviewRound,
    RetryState,
    RunPosition,
    RunProgress,
    _Mutable,
    Generic[PlanT],
):
    """Everything the engine knows about a run (its progress and the rest): held by the
    workflow, changed by its handlers, and carried whole to the run that continues it."""


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
