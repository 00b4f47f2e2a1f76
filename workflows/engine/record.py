"""The record of one run: every move it made and how it is shown, as functions over its graph
and its ``RunCore``.

``move`` takes one graph edge and records it (a history entry, a span and metrics, the Web UI's
current details); ``publish_state`` upserts ``AiState``/``AiStateSince`` once per workflow task,
with the state the task ends in, so the bookkeeping rides on commands the task sends anyway;
``status`` is what the queries and the updates return, and ``finish`` closes the run.

Everything a run keeps is bounded whatever clients send: history entries are appended through
``append``, which drops the oldest past ``HISTORY_MAX_BYTES`` (``history_dropped`` counts them),
corrections through ``add_correction`` (``CORRECTIONS_MAX_BYTES``, ``corrections_dropped``;
each text or set of fields past ``MAX_CORRECTION_BYTES`` is left out), and error texts are cut
at ``MAX_ERROR_CHARS``. So the status, update results, the carried state and the result stay
below Temporal's payload limits.

Workflow code, passed through the sandbox; ``tests/unit/test_workflow_code.py`` holds it to the
sandbox's rules.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final, TypedDict, Unpack

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ApplicationError

import workflows.contract as contract
import workflows.engine.observability as observability
import workflows.engine.policies as policies
import workflows.errors as errors
from workflows.engine.graph import COMPLETED, FAILED, FINAL_STATES, Graph, Role
from workflows.payloads import (
    Correction,
    Decision,
    HistoryEntry,
    LlmCallResult,
    ModelSettings,
    ReviewContent,
    ReviewView,
    RunCore,
    RunProgress,
    RunResult,
    RunStatus,
)

# Several hundred review rounds fit; the result, status and carried state stay small.
HISTORY_MAX_BYTES = 128 * 1024
MAX_ERROR_CHARS = 2000
# The last refused decision a run keeps (``RunCore.last_refusal``), cut to this.
MAX_REFUSAL_CHARS = 300
# Corrections kept with the run (the newest), and the largest text or fields one keeps.
CORRECTIONS_MAX_BYTES = 128 * 1024
MAX_CORRECTION_BYTES = 16 * 1024
# Since this patch a run back in review in the task that ended its round publishes the new
# round (``round_unpublished``); before it, ``AiReviewRound`` kept the old one.
ROUND_REPUBLISHED_PATCH: Final = "review-round-republished"


def bounded_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    return text if len(text) <= limit else text[: limit - 6] + " [cut]"


def set_error(run: RunCore[Any], text: str) -> str:
    """Record ``text`` as the run's last error (bounded); returns what was recorded."""
    run.last_error = bounded_text(text, MAX_ERROR_CHARS)
    return run.last_error


def append(run: RunCore[Any], entry: HistoryEntry) -> None:
    """Add ``entry`` to the history, dropping the oldest entries past ``HISTORY_MAX_BYTES``."""
    run.history.append(entry)
    run.history_bytes += _size(entry)
    while run.history_bytes > HISTORY_MAX_BYTES and len(run.history) > 1:
        run.history_bytes -= _size(run.history.pop(0))
        run.history_dropped += 1


def _size(entry: HistoryEntry | Correction) -> int:
    return len(entry.model_dump_json()) + 1


def bounded_value(value: str | dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool]:
    """``value`` if it is at most ``MAX_CORRECTION_BYTES`` as JSON, else None; and whether it
    was left out."""
    if value is None:
        return None, False
    size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
    return (value, False) if size <= MAX_CORRECTION_BYTES else (None, True)


def add_correction(run: RunCore[Any], correction: Correction) -> None:
    """Keep ``correction`` (its before and after bounded), dropping the oldest past
    ``CORRECTIONS_MAX_BYTES``."""
    before, cut_before = bounded_value(correction.before)
    after, cut_after = bounded_value(correction.after)
    kept = correction.model_copy(
        update={"before": before, "after": after, "cut": cut_before or cut_after}
    )
    run.corrections.append(kept)
    trim_corrections(run)


def complete_reedits(run: RunCore[Any], after: str | dict[str, Any] | None) -> None:
    """Give the reedits still waiting for the result they asked for (``after`` is None) that
    result: the run has a new one."""
    if after is None:
        return
    bounded, cut = bounded_value(after)
    for index, correction in enumerate(run.corrections):
        if not correction.answered:
            run.corrections[index] = correction.model_copy(
                update={"after": bounded, "answered": True, "cut": correction.cut or cut}
            )
    trim_corrections(run)


def trim_corrections(run: RunCore[Any]) -> None:
    """Drop the oldest corrections while they take more than ``CORRECTIONS_MAX_BYTES``."""
    total = sum(_size(c) for c in run.corrections)
    while total > CORRECTIONS_MAX_BYTES and len(run.corrections) > 1:
        total -= _size(run.corrections.pop(0))
        run.corrections_dropped += 1


class MoveDetails(TypedDict, total=False):
    """What a move records besides its event, each optional: its history entry's ``detail``,
    ``reviewer``, ``feedback``, ``review_round``, ``group`` (the review policy's group that
    decided) and ``rule`` (the auto-approve rule that approved); ``at``, when it happened
    (default: now); and for the transition's span, the model's reply it reports (``answer``)
    and what that answered (``prompt``)."""

    detail: str | None
    at: datetime | None
    reviewer: str | None
    feedback: str | None
    review_round: int | None
    answer: LlmCallResult | None
    prompt: str | None
    group: str | None
    rule: str | None


def move(graph: Graph, run: RunCore[Any], event: str, **moved: Unpack[MoveDetails]) -> None:
    """Take one graph edge: validate, record it (at ``moved["at"]``, default now) and show
    it."""
    target = graph.next_state(run.state, event)
    now = moved.get("at") or workflow.now()
    entered_at = min(run.state_since or now, now)
    detail = moved.get("detail")
    entry = HistoryEntry(
        from_state=run.state,
        to_state=target,
        event=str(event),
        at=now,
        attempt=run.attempts,
        detail=bounded_text(detail, MAX_ERROR_CHARS) if detail else None,
        reviewer=moved.get("reviewer"),
        feedback=moved.get("feedback"),
        review_round=moved.get("review_round"),
        group=moved.get("group"),
        rule=moved.get("rule"),
    )
    append(run, entry)
    run.state = target
    run.state_since = now
    observability.record_transition(
        graph,
        run,
        entry,
        entered_at=entered_at,
        answer=moved.get("answer"),
        prompt=moved.get("prompt"),
    )
    workflow.set_current_details(details(graph, run))


def note(
    run: RunCore[Any],
    event: str,
    detail: str,
    *,
    reviewer: str | None = None,
    group: str | None = None,
    vote: Decision | None = None,
) -> None:
    """Record something that happened without moving the run (continue-as-new, a vote)."""
    append(
        run,
        HistoryEntry(
            from_state=run.state,
            to_state=run.state,
            event=event,
            at=workflow.now(),
            attempt=run.attempts,
            detail=bounded_text(detail, MAX_ERROR_CHARS),
            reviewer=reviewer,
            review_round=run.review_round or None,
            group=group,
            vote=vote,
        ),
    )


def published_at_start(graph: Graph) -> str | None:
    """The state the run's ``AiState`` held when it started (a starter sets the state the run
    will first rest in; a continued run inherits its own), if it names one of ``graph``'s."""
    value = workflow.info().typed_search_attributes.get(contract.AI_STATE)
    return value if value in graph.states else None


def publish_state(
    graph: Graph, run: RunCore[Any], published: str | None, *, version: str | None = None
) -> str | None:
    """Upsert ``AiState``/``AiStateSince`` (and ``AiReviewRound`` in a review state, and
    ``AiPipelineVersion`` for a pipeline with a ``version``) if the run rests in a shown state
    other than ``published``, or waits in a review round visibility does not hold yet
    (``round_unpublished``); returns what visibility now holds.

    Called whenever the run is about to wait on the server (an activity, a timer, a review)
    and when it ends, that is, before every point where a workflow task can end. Visibility
    only ever sees the state at those points, so one upsert per task says everything, and
    states the run only passes through (``StateInfo.shown``) are not worth an upsert: each
    upsert is a billable action.
    """
    if run.state not in graph.shown_states or run.state_since is None:
        return published
    if run.state == published and not round_unpublished(graph, run):
        return published
    updates: list[SearchAttributeUpdate[Any]] = [
        contract.AI_STATE.value_set(run.state),
        contract.AI_STATE_SINCE.value_set(run.state_since),
    ]
    if run.state in graph.review_states:
        updates.append(contract.AI_REVIEW_ROUND.value_set(run.review_round))
    if version is not None:
        # In the same command: the version costs no action of its own.
        updates.append(contract.AI_PIPELINE_VERSION.value_set(version))
    workflow.upsert_search_attributes(updates)
    return run.state


def round_unpublished(graph: Graph, run: RunCore[Any]) -> bool:
    """Whether the run waits for review in a round visibility's ``AiReviewRound`` does not
    hold: back in the review state it left, in the task that ended the round (corrected fields
    that still break a rule are validated in it), so its ``AiState`` did not change.

    A run recorded before ``ROUND_REPUBLISHED_PATCH`` left the round unpublished there, and
    replays so (the patch is asked only when it makes a difference).
    """
    if run.state not in graph.review_states:
        return False
    shown = workflow.info().typed_search_attributes.get(contract.AI_REVIEW_ROUND)
    return shown != run.review_round and workflow.patched(ROUND_REPUBLISHED_PATCH)


def details(graph: Graph, run: RunCore[Any]) -> str:
    """The Web UI's current-details line: where the run is, never content."""
    info = graph.info(run.state)
    parts = [f"**{run.state}** ({info.status.value}, {info.progress}%)"]
    if run.attempts:
        parts.append(f"LLM attempt {run.attempts}")
    if run.model:
        parts.append(f"model {run.model}")
    if (variant := variant_of(run)) is not None:
        parts.append(f"variant {variant}")
    if info.role in (Role.REVIEW, Role.ESCALATION):
        parts.append(
            f"waiting for a reviewer in round {run.review_round}: starter.py review show <id>, "
            "then review <id> approve|reedit|reject, or the review inbox"
        )
        shown = policy_line(graph, run)
        if shown:
            parts.append(shown)
    if info.role == Role.CAPACITY and run.capacity_wait_s is not None:
        parts.append(f"queued for the model's capacity for {run.capacity_wait_s:.1f}s")
    if info.role == Role.BUDGET:
        parts.append("over budget: starter.py budget <id> approve|reject --operator NAME")
    if info.role == Role.BATCH and run.batch_id is not None:
        parts.append(f"in the provider's batch {run.batch_id} (answers within 24 h)")
    if run.last_error and (info.role in (Role.RETRY, Role.BUDGET) or run.state == FAILED):
        parts.append(f"last error: {observability.error_reason(run.last_error)}")
    return " · ".join(parts)


def variant_of(run: RunCore[Any]) -> str | None:
    """The rollout variant the run was planned with (``prompt-v2/B``), or None."""
    assignment = run.plan.assignment if isinstance(run.plan, ModelSettings) else None
    return f"{assignment.experiment}/{assignment.variant.name}" if assignment else None


def policy_line(graph: Graph, run: RunCore[Any]) -> str | None:
    """Where a waiting round stands under the run's review policy, in one line (``policy
    two-of-finance, stage 1 of 2: group finance, 1 of 2 approvals: alice``); None for a run
    without a policy, or not waiting."""
    shown = policies.progress(graph, run)
    if shown is None or shown.policy is None:
        return None
    where = f"policy {shown.policy}, stage {shown.stage + 1} of {shown.stages}"
    if shown.group:
        where += f": group {shown.group}"
    return f"{where}, {shown.describe()}"


def status(graph: Graph, run: RunCore[Any], *, version: str | None = None) -> RunStatus:
    """What the ``status`` query and the updates return (``version``: of a pipeline defined
    as data)."""
    return RunStatus(
        state=run.state,
        status=graph.status_of(run.state).value,
        progress=graph.progress_of(run.state),
        tenant=run.plan.tenant if run.plan is not None else None,
        pipeline=graph.name,
        pipeline_version=version,
        variant=variant_of(run),
        review=policies.progress(graph, run),
        **{name: getattr(run, name) for name in RunProgress.model_fields},
    )


def review_view(graph: Graph, run: RunCore[Any], content: ReviewContent) -> ReviewView:
    """What the ``review_view`` query returns: the pipeline's ``content`` with where the run
    is, until when it waits for a reviewer, who may decide now (the current stage's reviewers),
    where its round stands under its review policy, and its history."""
    plan = run.plan
    shown = policies.progress(graph, run)
    reviewers = plan.allowed_reviewers if plan is not None else None
    if shown is not None and shown.reviewers is not None:
        reviewers = shown.reviewers
    return ReviewView(
        **content.model_dump(),
        content_digest=content.digest(),
        chain_id=workflow.info().first_execution_run_id,
        pipeline=graph.name,
        state=run.state,
        status=graph.status_of(run.state).value,
        review_round=run.review_round,
        waiting=run.state in graph.review_states,
        deadline=run.review_deadline if run.state in graph.review_states else None,
        requested_by=plan.requested_by if plan is not None else None,
        allowed_reviewers=reviewers,
        model=run.model,
        variant=variant_of(run),
        history=list(run.history),
        history_dropped=run.history_dropped,
        review=shown,
    )


def finish(run: RunCore[Any], result: RunResult) -> RunResult:
    """``result``, the result of a run that ended in a final state, with the corrections its
    reviewers made.

    A run that ended in ``failed`` or ``dead_letter`` closes as a failed Temporal run (so the
    Web UI, ``ExecutionStatus='Failed'`` and the SDK's failure metrics see it): this raises a
    non-retryable ``RunFailed`` whose details carry the same result.

    Raises:
        ApplicationError: ``RunFailed``, the run ended in failed or dead_letter.
        errors.InvalidTransition: the run is not in a final state (a bug).
    """
    if run.state not in FINAL_STATES:
        raise errors.InvalidTransition(run.state, "(finish)", "run ended in a non-final state")
    result = result.model_copy(
        update={
            "corrections": list(run.corrections),
            "corrections_dropped": run.corrections_dropped,
        }
    )
    if run.state == COMPLETED:
        return result
    reason = observability.error_reason(run.last_error)
    shown = "" if reason == observability.UNKNOWN_REASON else f" ({reason})"
    raise ApplicationError(
        f"run ended in {run.state}{shown}", result, type=errors.RUN_FAILED, non_retryable=True
    )
