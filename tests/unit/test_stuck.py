"""Pure helpers behind `starter.py stuck` (`aiorch.ops.stuck`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aiorch.ops import pipelines
from aiorch.ops.stuck import StuckAction, StuckRun, applies, stuck_query
from workflows.llm.graph import State

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
TYPES = ", ".join(f"'{name}'" for name in pipelines.workflow_types())


def test_stuck_query_covers_runs_never_picked_up() -> None:
    """Open runs older than the cutoff in their state, or started before it and never moved."""
    query = stuck_query(T0, State.AWAIT_REVIEW)
    assert query == (
        f"WorkflowType IN ({TYPES}) AND TaskQueue = 'ai-orchestrator' AND "
        "ExecutionStatus = 'Running' AND "
        "(AiStateSince < '2026-11-01T12:00:00Z' OR "
        "(AiStateSince IS NULL AND StartTime < '2026-11-01T12:00:00Z')) "
        "AND AiState = 'await_review'"
    )
    assert "AiState =" not in stuck_query(T0)


@pytest.mark.parametrize(
    ("action", "state", "expected"),
    [
        (StuckAction.TIMEOUT, "await_review", True),
        (StuckAction.TIMEOUT, "escalate", True),
        (StuckAction.TIMEOUT, "retry_llm", False),
        (StuckAction.DEAD_LETTER, "escalate", True),
        (StuckAction.DEAD_LETTER, "invoke_llm", False),
        (StuckAction.CANCEL, "invoke_llm", True),
        (StuckAction.CANCEL, None, True),
        (StuckAction.NONE, "await_review", False),
    ],
)
def test_actions_apply_to_their_states(
    action: StuckAction, state: str | None, expected: bool
) -> None:
    """The review signals act on review states only; cancel acts on any state."""
    assert applies(action, StuckRun("wf", state, T0)) is expected
