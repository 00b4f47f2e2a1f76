"""The words every pipeline's graph is written in: the contract's status categories, who
handles a state (``Role``), the events every pipeline shares, the engine's own states (where a
run starts and where it can end) and what each means, a state's meaning (``StateInfo``) and an
edge (``Transition``).

Plain data: no temporalio, no I/O (``workflows.engine.graph`` builds graphs from these).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import get_args

from workflows.payloads import FinalState


class Status(StrEnum):
    """The contract's status categories, coarser than states."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    WAITING_FOR_INPUT = "WaitingForInput"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class Role(StrEnum):
    """Who handles a state: the pipeline's handler (``WORK``), or the engine.

    Compared by value (``==``), never by identity: a pipeline built outside the workflow
    sandbox and an engine module re-imported inside it hold different copies of this enum.
    """

    START = "start"
    WORK = "work"
    REVIEW = "review"
    ESCALATION = "escalation"
    RETRY = "retry"
    CAPACITY = "capacity"
    BUDGET = "budget"
    BATCH = "batch"
    END = "end"


class Event(StrEnum):
    """The events every pipeline shares; a pipeline names its own as plain strings."""

    START = "start"
    RETRYABLE_ERROR = "retryable_error"
    PERMANENT_ERROR = "permanent_error"
    BACKOFF_ELAPSED = "backoff_elapsed"
    EXHAUSTED = "exhausted"
    APPROVE = "approve"
    REEDIT = "reedit"
    REJECT = "reject"
    CORRECT = "correct"
    REVIEW_TIMEOUT = "review_timeout"
    ESCALATION_TIMEOUT = "escalation_timeout"
    CANCEL = "cancel"
    CAPACITY_WAIT = "capacity_wait"
    CAPACITY_READY = "capacity_ready"
    OVER_BUDGET = "over_budget"
    BUDGET_EXCEEDED = "budget_exceeded"
    OVERSPEND_APPROVED = "overspend_approved"
    OVERSPEND_REJECTED = "overspend_rejected"
    BUDGET_TIMEOUT = "budget_timeout"
    BATCH_SUBMITTED = "batch_submitted"
    BATCH_DONE = "batch_done"


# The states every pipeline shares: where a run starts and where it can end.
IDLE = "idle"
COMPLETED = "completed"
FAILED = "failed"
DEAD_LETTER = "dead_letter"
CANCELLED = "cancelled"
TERMINAL_STATES: frozenset[str] = frozenset({COMPLETED, FAILED, DEAD_LETTER, CANCELLED})
# The states a run's result names (a cancelled run has none: it is cancelled): the result's
# ``FinalState``.
FINAL_STATES: frozenset[str] = frozenset(get_args(FinalState))
# The names the engine's review sub-graph uses unless a pipeline names its own.
AWAIT_REVIEW = "await_review"
ESCALATE = "escalate"
AWAIT_CAPACITY = "await_capacity"
AWAIT_BUDGET = "await_budget"
AWAIT_BATCH = "await_batch"


@dataclass(frozen=True)
class StateInfo:
    """What a state means: its status category, progress in percent, a description, who
    handles it, and whether visibility shows it (``AiState``: each upsert is a billable action,
    so states a run only passes through are not shown)."""

    status: Status
    progress: int
    description: str
    role: Role = Role.WORK
    shown: bool = True


@dataclass(frozen=True)
class Transition:
    """One allowed edge of the graph."""

    source: str
    event: str
    target: str


# The engine's states with the meaning they have in every pipeline.
START_INFO = StateInfo(Status.PENDING, 0, "accepted, not started", Role.START, shown=False)
END_INFOS: Mapping[str, StateInfo] = MappingProxyType(
    {
        COMPLETED: StateInfo(Status.COMPLETED, 100, "done", Role.END),
        FAILED: StateInfo(Status.FAILED, 100, "failed permanently or rejected", Role.END),
        DEAD_LETTER: StateInfo(
            Status.FAILED, 100, "gave up; sent to the dead-letter queue", Role.END
        ),
        CANCELLED: StateInfo(Status.CANCELLED, 100, "cancelled; compensation done", Role.END),
    }
)
