"""Reviewers' corrections as evaluation examples (``aiorch reviews export``).

Every reedit and every approval with corrected fields is kept in the run that took it
(``RunCore.corrections``) and returned with its result (``RunResult.corrections``): the
reviewer, the round, the pipeline and its version, the feedback, and the result before and
after. This module reads them from the runs that ended (completed, failed or dead-lettered)
since a moment, and turns each one made since then into one `Example` (a reedit with no
feedback is none): with the request the run
was started with (read from its history) when it can be read, and, for corrected fields, each
field that changed. A run that continued as new carries its earlier corrections to the run that
ends, so a long reedit loop gives all of its (within the bound the run keeps).

Runs still waiting give theirs once they end. Reading needs the deployment's data converter
(``PAYLOAD_KEYS`` when payloads are encrypted): examples hold content.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio.client import Client, WorkflowExecution

from aiorch.ops import pipelines, visibility
from aiorch.ops.dead_runs import NotRedrivable, RedriveError, run_request
from aiorch.ops.results import NoResult, run_result
from workflows.payloads import Correction, CorrectionKind, changed_fields, lacks_feedback


class FieldChange(BaseModel):
    """One field a reviewer changed: its name, and its value before and after."""

    model_config = ConfigDict(frozen=True)

    field: str
    before: Any = None
    after: Any = None


class Example(BaseModel):
    """One evaluation example: a reviewer's correction with its run and what it corrected.

    ``id`` is stable (run, round, reviewer, kind), so exporting twice gives the same ids."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: CorrectionKind
    workflow_id: str
    run_id: str
    pipeline: str
    pipeline_version: str
    review_round: int
    reviewer: str
    at: datetime
    input: dict[str, Any] | None = None
    feedback: str | None = None
    before: str | dict[str, Any] | None = None
    after: str | dict[str, Any] | None = None
    answered: bool = False
    cut: bool = False
    changes: list[FieldChange] = []


def field_changes(before: object, after: object) -> list[FieldChange]:
    """The top-level fields whose values differ between two objects (none unless both are)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    return [
        FieldChange(field=name, before=before.get(name), after=after.get(name))
        for name in changed_fields(before, after)
    ]


def example(
    execution: WorkflowExecution, correction: Correction, request: dict[str, Any] | None
) -> Example:
    """``correction``, made in the run ``execution``, as an example."""
    return Example(
        id=f"{execution.id}:round-{correction.review_round}:{correction.reviewer}:"
        f"{correction.kind}",
        kind=correction.kind,
        workflow_id=execution.id,
        run_id=execution.run_id,
        pipeline=correction.pipeline,
        pipeline_version=correction.pipeline_version,
        review_round=correction.review_round,
        reviewer=correction.reviewer,
        at=correction.at,
        input=request,
        feedback=correction.feedback,
        before=correction.before,
        after=correction.after,
        answered=correction.answered,
        cut=correction.cut,
        changes=field_changes(correction.before, correction.after)
        if correction.kind == "correct"
        else [],
    )


def exported(
    corrections: Sequence[Correction], since: datetime, until: datetime | None
) -> list[Correction]:
    """The corrections made in [since, until) that are examples: not a reedit with no feedback
    (one the run took before reedits needed feedback, or by its ``review`` signal), which
    teaches nothing."""
    return [
        c
        for c in corrections
        if c.at >= since
        and (until is None or c.at < until)
        and not lacks_feedback(c.kind, c.feedback)
    ]


def ended_query(since: datetime, until: datetime | None, pipeline: str | None) -> str:
    """Runs (of ``pipeline``, or every one) that ended with a result in [since, until)."""
    clauses = [visibility.ENDED_WITH_RESULT, f"CloseTime >= '{visibility.visibility_time(since)}'"]
    if until is not None:
        clauses.append(f"CloseTime < '{visibility.visibility_time(until)}'")
    return visibility.runs_query(*clauses, pipeline=pipeline)


async def export(
    client: Client,
    since: datetime,
    *,
    until: datetime | None = None,
    pipeline: str | None = None,
    with_input: bool = True,
    concurrency: int = 10,
) -> list[Example]:
    """Every correction made in [since, until) in a run that ended since ``since``, oldest
    first (``pipeline``: only its runs; ``with_input``: read each run's request too).

    Raises:
        temporalio.service.RPCError: Temporal failed.
    """
    query = ended_query(since, until, pipeline)
    executions = [e async for e in client.list_workflows(query)]
    gate = asyncio.Semaphore(concurrency)

    async def of(execution: WorkflowExecution) -> list[Example]:
        async with gate:
            try:
                result = await run_result(client, execution.id, execution.run_id)
            except NoResult:
                return []
            made = exported(result.corrections, since, until)
            if not made:
                return []
            request = await _request(client, execution) if with_input else None
        return [example(execution, correction, request) for correction in made]

    found: Sequence[list[Example]] = await asyncio.gather(*(of(e) for e in executions))
    return sorted((e for each in found for e in each), key=lambda e: (e.at, e.id))


async def _request(client: Client, execution: WorkflowExecution) -> dict[str, Any] | None:
    """The request the run was started with, as JSON, or None when it cannot be read."""
    pipeline = pipelines.of_type(execution.workflow_type)
    if pipeline is None:
        return None
    try:
        request = await run_request(client, execution.id, execution.run_id, pipeline)
    except (NotRedrivable, RedriveError):
        return None
    return request.model_dump(mode="json")
