"""Signed reviews for tests: the local stack turns reviewer authentication on, so a test sends
reviews the way the CLI and the review inbox do, signed for the run's current round."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.client import WorkflowHandle

from aiorch.ops.signing import SigningKey
from workflows import contract
from workflows.payloads import ReviewDecision, RunStatus


async def signed(
    handle: WorkflowHandle[Any, Any],
    key: SigningKey,
    decision: str,
    reviewer: str,
    feedback: str | None = None,
    *,
    review_round: int | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The review payload for ``handle``'s current round (or ``review_round``), signed by
    ``key`` at ``now`` (default: the wall clock; time-skipping tests pass the server's time)."""
    if review_round is None:
        status: RunStatus = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
        review_round = status.review_round
    described = await handle.describe()
    review = ReviewDecision(decision=decision, reviewer=reviewer, feedback=feedback)
    return key.sign(
        review,
        workflow_id=handle.id,
        review_round=review_round,
        now=now or datetime.now(UTC),
        run_id=described.raw_description.workflow_execution_info.first_run_id,
    ).model_dump(mode="json", exclude_none=True)
