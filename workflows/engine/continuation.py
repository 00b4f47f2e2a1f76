"""Continue-as-new: when a run moves to a fresh Temporal run, and who may hand it state.

Temporal warns at 10,240 events or 10 MB of history and terminates a run at 51,200 events or
50 MB. A reedit loop adds about a dozen events per round, and every signal adds one, whoever
sends it. So a run moves to a fresh run (same workflow id) before its history grows large:
after ``RunPolicy.reedit_rounds_per_run`` rounds, once its history passes
``CONTINUE_AT_BYTES`` or ``CONTINUE_AT_EVENTS``, or as soon as the server suggests it. That
happens at safe points only (``Graph.resumable_states``): right after a reedit decision (the
new run starts in the state the reedit leads to, ``invoke_llm`` in the LLM pipeline), or while
the run waits for a reviewer (it resumes the same wait, with the same deadline). The new run
gets the pipeline's whole run state; what it carries stays bounded because the state itself is
(``workflows.engine.record`` bounds the history, this module the feedback).

Carried state is trusted only from this workflow's own continue-as-new. Temporal also marks
cron runs and workflow retries as continuations of an earlier run, and a client chooses the
input of both, so a carried state is accepted only when the run is a continuation that is
neither (``continuation_problem``), and this workflow refuses cron schedules and workflow retry
policies outright: the graph owns retries, and a request runs once.

Deterministic: ``due`` and ``hand_over`` read and command the current run through
``workflow.*``; the rest are pure functions.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from pydantic import BaseModel
from temporalio import workflow

import workflows.engine.record as record
import workflows.errors as errors
from workflows.engine.graph import Graph
from workflows.payloads import NOTE_CONTINUED_AS_NEW, RequestBase, RunCore, printable

FEEDBACK_WINDOW_BYTES = 32 * 1024
# Far below Temporal's warnings (10 MB, 10,240 events).
CONTINUE_AT_BYTES = 2 * 1024 * 1024
CONTINUE_AT_EVENTS = 2_000


def carries_state(raw: Any) -> bool:
    """Whether ``raw`` (a decoded start input) is a continued run's (``ContinuedRun``)."""
    return isinstance(raw, dict) and "carried" in raw


def parse_input(
    raw: Any,
    graph: Graph,
    request_model: type[RequestBase],
    continued_model: type[BaseModel],
) -> tuple[RequestBase, RunCore[Any] | None]:
    """The request, and the carried state when ``raw`` is a continued run's input
    (``continued_model``: the pipeline's ``ContinuedRun``).

    Raises:
        pydantic.ValidationError: not a valid request (or continued run).
        errors.InvalidRequest: a continued run's state is not one a run may resume in.
    """
    if carries_state(raw):
        continued = continued_model.model_validate(raw)
        request, carried = continued.request, continued.carried  # type: ignore[attr-defined]
        problem = carried_problem(carried, graph)
        if problem:
            raise errors.InvalidRequest(problem)
        return request, carried
    return request_model.model_validate(raw), None


def carried_problem(carried: RunCore[Any], graph: Graph) -> str | None:
    """Why ``carried`` cannot be a continued run's state in ``graph``, or None when it can."""
    if carried.state not in graph.resumable_states:
        return f"carried: a continued run cannot resume in {printable(carried.state)!r}"
    if carried.plan is None:
        return "carried: a continued run must carry its plan"
    return None


def start_problem(
    *,
    pipeline: str,
    carried: bool,
    continued_run_id: str | None,
    cron_schedule: str | None,
    has_retry_policy: bool,
    attempt: int,
) -> str | None:
    """Why this run of ``pipeline`` may not start as it was started, or None when it may.

    A cron schedule or a workflow retry policy is refused for every run; carried state is
    accepted only from a continue-as-new, which is then the only way the run can be a
    continuation of an earlier one.
    """
    if cron_schedule:
        return (
            f"{pipeline} runs take no cron schedule (a request runs once; start runs from "
            "a Temporal Schedule instead)"
        )
    if has_retry_policy or attempt > 1:
        return f"{pipeline} runs take no workflow retry policy (the state graph owns retries)"
    if carried and continued_run_id is None:
        return "carried state is accepted only from the workflow's own continue-as-new"
    return None


def id_problem(workflow_id: str, request_id: str) -> str | None:
    """Why a run may not run under ``workflow_id``, or None when it may: the workflow id must be
    the request id, which names the run in the vector store, in idempotency keys, in review
    tokens and in notifications."""
    if workflow_id != request_id:
        return (
            f"invalid request: the workflow id must be the request id ({request_id}), not "
            f"{printable(workflow_id, 80)!r}"
        )
    return None


def is_due(
    *,
    rounds_this_run: int,
    rounds_per_run: int,
    suggested: bool,
    history_bytes: int = 0,
    history_events: int = 0,
) -> bool:
    """True when a run should move to a fresh run at its next safe point."""
    return (
        rounds_this_run >= rounds_per_run
        or suggested
        or history_bytes >= CONTINUE_AT_BYTES
        or history_events >= CONTINUE_AT_EVENTS
    )


def due(*, rounds: int = 0, rounds_per_run: int = sys.maxsize) -> bool:
    """`is_due` for the current run: its rounds, the server's suggestion, its history size."""
    info = workflow.info()
    return is_due(
        rounds_this_run=rounds,
        rounds_per_run=rounds_per_run,
        suggested=info.is_continue_as_new_suggested(),
        history_bytes=info.get_current_history_size(),
        history_events=info.get_current_history_length(),
    )


async def hand_over(
    run: RunCore[Any], request: RequestBase, continued_model: type[BaseModel], when: str
) -> NoReturn:
    """Continue as new, carrying ``run`` whole (as ``continued_model``, the pipeline's
    ``ContinuedRun``), once every handler has finished."""
    await workflow.wait_condition(workflow.all_handlers_finished)
    events = workflow.info().get_current_history_length()
    record.note(run, NOTE_CONTINUED_AS_NEW, f"continued as a new run {when} ({events} events)")
    workflow.continue_as_new(continued_model(request=request, carried=run))


def bounded_feedback(feedback: Sequence[str], max_bytes: int = FEEDBACK_WINDOW_BYTES) -> list[str]:
    """The newest feedback that fits ``max_bytes`` (UTF-8); older feedback is dropped first.

    The LLM sees every kept item on each call, so this also bounds each call's prompt and
    each ``invoke_llm`` input in history.
    """
    kept: list[str] = []
    used = 0
    for item in reversed(feedback):
        size = len(item.encode("utf-8"))
        if used + size > max_bytes:
            break
        kept.append(item)
        used += size
    kept.reverse()
    return kept
