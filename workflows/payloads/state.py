"""The workflow's own state, and what a continued run is handed."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, model_validator

from workflows.graph import State
from workflows.payloads._base import (
    RESUMABLE_STATES,
    _Mutable,
    _Strict,
)
from workflows.payloads.activity import (
    LlmCallResult,
    PromptPlan,
)
from workflows.payloads.client import (
    PipelineRequest,
    RunProgress,
)

__all__ = [
    "ContinuedRun",
    "RunState",
]


class RunState(RunProgress, _Mutable):
    """Everything a run knows about itself (its progress and the rest): held by the workflow,
    changed by its handlers, and carried whole to the run that continues it (continue-as-new)."""

    state: State = State.IDLE
    # When the current state began, and when the first run of this chain started.
    state_since: datetime | None = None
    started_at: datetime | None = None
    history_bytes: int = 0
    consecutive_failures: int = 0
    corrective_next: bool = False
    retry_after_s: float | None = None
    feedback: list[str] = Field(default_factory=list)
    # When the current review wait (await_review or escalate) times out.
    review_deadline: datetime | None = None
    plan: PromptPlan | None = None
    reply: LlmCallResult | None = None
    embedding_id: str | None = None
    # Operator actions: expire_review ends one review wait, dead_letter every one until the end.
    forced_timeout: str | None = None
    dead_letter_requested: str | None = None
    # Capacity and budgets: the wait before asking for capacity again, when the budget
    # decision times out, and whether an operator approved crossing the budget.
    capacity_wait_s: float | None = None
    budget_deadline: datetime | None = None
    budget_approved: bool = False


class ContinuedRun(_Strict):
    """Input of a continued run: the original request plus the carried state. Accepted only
    from this workflow's own continue-as-new (the workflow checks how the run was started),
    never from a client."""

    request: PipelineRequest
    carried: RunState

    @model_validator(mode="after")
    def _resumable(self) -> ContinuedRun:
        if self.carried.state not in RESUMABLE_STATES:
            raise ValueError(f"a continued run cannot resume in {self.carried.state.value!r}")
        if self.carried.plan is None:
            raise ValueError("a continued run must carry its plan")
        return self
