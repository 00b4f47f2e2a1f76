"""Sending a review so that it is applied once, however often it is sent.

The decision names its review round (the one the reviewer looked at; by default the run's
current round, read from visibility), and the ``submit_review`` update's id is derived from
(run, round, reviewer): re-sending the same review returns the first result instead of deciding
again (Temporal keeps update ids per run), and a decision for a round that is over is refused
by the workflow, so a late or repeated decision can never land on a later round.

A decision goes to the run the reviewer looked at (a ``ReviewTarget``: that run's id, its
chain's first run id, the round and, from the review inbox, the digest of what it showed),
never to whichever run holds the workflow id by the time it is sent: its token names the run
chain (and the content), so it is refused by a new run that reuses the workflow id.

``starter.py review`` and ``starter.py review-all`` (``aiorch.ops.batch``) both go through
`submit_review`, which signs the decision for its run and round with a `Signer` when reviewer
authentication is on. A batch builds each run's decision with a `DecisionFor` from (workflow
id, round), so what is sent, signed and deduplicated always names the round the run is in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import get_args

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from aiorch.ops.retries import retrying
from workflows import contract
from workflows.engine.graph import Event
from workflows.engine.reviews import event_of
from workflows.payloads import NOTE_REVIEW_VOTE, Decision, HistoryEntry, ReviewDecision, RunStatus

CORRECT = Event.CORRECT.value
# A history entry whose event is a decision records a review (its round, its reviewer): an
# approval with corrected fields records the event ``correct``.
DECISION_EVENTS: frozenset[str] = frozenset({*get_args(Decision), CORRECT})


DecisionFor = Callable[[str, int | None], ReviewDecision]
"""Builds the (unsigned) decision for ``(workflow_id, review_round)``; the round is None when
the run has not reached a review yet."""


@dataclass(frozen=True)
class ReviewTarget:
    """The run a decision is for: where it is sent (``run_id``, the run the reviewer looked
    at), what its token names (``chain_id``, the chain's first run id; ``digest``, of what the
    reviewer was shown, when the tool showed it) and the round; ``ended``: how the run closed
    (Temporal's status: ``COMPLETED``, ``FAILED``, ...), once it has."""

    workflow_id: str
    run_id: str | None
    chain_id: str | None
    review_round: int | None
    digest: str | None = None
    ended: str | None = None


def for_each_round(template: ReviewDecision) -> DecisionFor:
    """``template`` for any run, naming that run's round."""

    def decide(workflow_id: str, review_round: int | None) -> ReviewDecision:
        return template.model_copy(update={"review_round": review_round})

    return decide


def update_id(workflow_id: str, review_round: int | None, reviewer: str) -> str:
    """The update id for ``reviewer``'s decision on ``review_round`` of ``workflow_id``."""
    return f"review:{workflow_id}:round-{review_round or 0}:{reviewer}"


@dataclass(frozen=True)
class ReviewOutcome:
    """What a sent review led to: the status after it, the decision the round recorded, and,
    under a review policy, the vote the round counted for this reviewer without deciding."""

    sent: ReviewDecision
    status: RunStatus
    recorded: HistoryEntry | None
    counted: HistoryEntry | None = None

    @property
    def applied(self) -> bool:
        """True when the run's history records this very decision (decision, reviewer, round),
        as the round's decision or as a vote it counted.

        False for a cached result of an earlier, different decision with the same update id,
        and when the run returned no record of the round at all.
        """
        if self.vote_counted:
            return True
        recorded = self.recorded
        return (
            recorded is not None
            and recorded.event == event_of(self.sent)
            and recorded.reviewer == self.sent.reviewer
            and recorded.review_round == self.sent.review_round
        )

    @property
    def vote_counted(self) -> bool:
        """True when the round counted this decision as a vote (a quorum not reached by it)."""
        counted = self.counted
        return (
            counted is not None
            and counted.vote == self.sent.decision
            and (self.recorded is None or self.recorded.reviewer != self.sent.reviewer)
        )

    @property
    def applied_as_sent(self) -> bool:
        """False when the round was decided by an earlier, different decision."""
        recorded = self.recorded
        return (
            self.vote_counted
            or recorded is None
            or (recorded.event == event_of(self.sent) and recorded.reviewer == self.sent.reviewer)
        )

    def describe(self, workflow_id: str, *, where: bool = True) -> str:
        """One line for the reviewer; ``where``: with the state the run was in when it
        answered, or, for a decision it did not apply, how to see where it is (the inbox leaves
        it out: by the time the page shows, the run has moved on)."""
        status = self.status
        round_text = f"round {self.sent.review_round}" if self.sent.review_round else "review"
        now = f"; now {status.state} ({status.status})" if where else ""
        recorded = self.recorded
        if self.vote_counted and recorded is None:
            tally = status.review.describe() if status.review is not None else "counted"
            return (
                f"{workflow_id}: {self.sent.decision} counted ({round_text}): {tally}; the "
                "round waits for more reviewers"
            )
        if self.vote_counted:
            assert recorded is not None
            return (
                f"{workflow_id}: {self.sent.decision} counted ({round_text}); the round was "
                f"then decided: {recorded.detail or recorded.event}{now}"
            )
        if recorded is None and self.sent.review_round:
            return (
                f"{workflow_id}: {self.sent.decision} sent for {round_text}, but the run shows "
                f"no decision for it (see `starter.py history {workflow_id}`){now}"
            )
        if self.applied_as_sent:
            return f"{workflow_id}: {self.sent.decision} accepted ({round_text}){now}"
        assert recorded is not None
        # The status is the earlier decision's answer (the same update id): where the run
        # was then, so it is not shown.
        return (
            f"{workflow_id}: {round_text} was already decided ({recorded.event} by "
            f"{recorded.reviewer}); your {self.sent.decision} was not applied"
            + (f" (`starter.py status {workflow_id}` shows where the run is now)" if where else "")
        )


def repeated_decision(
    history: list[HistoryEntry], decision: ReviewDecision, review_round: int, state: str
) -> HistoryEntry | None:
    """The run's latest decision, when ``decision`` repeats it (same reviewer, decision and
    feedback, taken in the review state ``state`` the run waits in now) on an earlier round
    than ``review_round``, the one it waits in now. A decision taken in another review state
    (a pipeline's second review) is another question, never a repeat.

    That is what a decision sent again looks like (a shell retry) once the round it was meant
    for is over: by default a client decides the round the run waits in, so without this check
    a repeated reedit would be applied again, to the next round. Within one round the update
    id (`update_id`) already makes a repeat return the first result.
    """
    latest = next((entry for entry in reversed(history) if entry.event in DECISION_EVENTS), None)
    if (
        latest is not None
        and latest.review_round is not None
        and latest.review_round < review_round
        and latest.from_state == state
        and latest.reviewer == decision.reviewer
        and latest.event == event_of(decision)
        and (latest.feedback or None) == (decision.feedback or None)
    ):
        return latest
    return None


def decision_for_round(history: list[HistoryEntry], review_round: int) -> HistoryEntry | None:
    """The decision recorded for ``review_round``, if any."""
    for entry in reversed(history):
        if entry.event in DECISION_EVENTS and entry.review_round == review_round:
            return entry
    return None


def vote_in_round(
    history: list[HistoryEntry], review_round: int, reviewer: str
) -> HistoryEntry | None:
    """The vote ``reviewer`` cast in ``review_round`` that a review policy counted, if any."""
    for entry in reversed(history):
        if (
            entry.event == NOTE_REVIEW_VOTE
            and entry.review_round == review_round
            and entry.reviewer == reviewer
        ):
            return entry
    return None


Signer = Callable[[ReviewDecision, ReviewTarget], ReviewDecision]
"""Signs a decision for its target: see ``aiorch.ops.signing.SigningKey.signer``."""


async def current_target(client: Client, workflow_id: str) -> ReviewTarget:
    """The run that holds ``workflow_id`` now, and its current review round (None before its
    first review).

    Read with describe (not a billable action, where a query would be one): the round from
    the ``AiReviewRound`` search attribute, which the run publishes with every review wait.

    Raises:
        temporalio.service.RPCError: no such run, or the server is unreachable.
    """
    description = await retrying(client.get_workflow_handle(workflow_id).describe)
    status = description.status
    return ReviewTarget(
        workflow_id=workflow_id,
        run_id=description.run_id,
        chain_id=description.raw_description.workflow_execution_info.first_run_id or None,
        review_round=description.typed_search_attributes.get(contract.AI_REVIEW_ROUND) or None,
        ended=status.name if status not in (None, WorkflowExecutionStatus.RUNNING) else None,
    )


def already_applied(
    history: list[HistoryEntry], decision: ReviewDecision, review_round: int | None
) -> HistoryEntry | None:
    """The entry that recorded ``decision`` (same reviewer and decision) for ``review_round``,
    if the run took it: what a decision sent again after the run ended finds."""
    recorded = decision_for_round(history, review_round) if review_round else None
    if (
        recorded is not None
        and recorded.reviewer == decision.reviewer
        and recorded.event == event_of(decision)
    ):
        return recorded
    return None


async def decision_for_current_round(
    client: Client, workflow_id: str, decide: DecisionFor
) -> tuple[ReviewDecision, ReviewTarget]:
    """The decision ``decide`` builds for the run's current round, and the run it is for (see
    `current_target`)."""
    target = await current_target(client, workflow_id)
    return decide(workflow_id, target.review_round), target


def refusal_reason(error: WorkflowUpdateFailedError) -> str:
    """Why a run refused an update (a review's or a budget decision's), as the run said it:
    the message it raised, without the type name it was raised as. The inbox shows it on the
    run's page and the command line prints it."""
    cause = error.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


async def submit_review(
    client: Client,
    workflow_id: str,
    decision: ReviewDecision,
    *,
    signer: Signer | None = None,
    target: ReviewTarget | None = None,
) -> ReviewOutcome:
    """Send ``decision`` through the ``submit_review`` update to ``target``'s run, idempotently
    (see module doc), signed for it by ``signer`` when reviewer authentication is on.

    Without a target the decision is for the run that holds the workflow id now, at the
    decision's round (by default its current one). A call that fails in transit is made again
    with the *same* decision (`aiorch.ops.retries`), which is safe: its update id names the
    round. A refused decision is never sent again.

    Raises:
        temporalio.client.WorkflowUpdateFailedError: the run refused it (the cause says why).
        temporalio.service.RPCError: no such open run (the run looked at has ended, or another
            holds the id now), or the server stayed unreachable.
        temporalio.client.RPCTimeoutOrCancelledError: the answer did not come in time.
    """
    if target is None:
        target = await current_target(client, workflow_id)
    if decision.review_round is None:
        decision = decision.model_copy(update={"review_round": target.review_round})
    else:
        target = replace(target, review_round=decision.review_round)
    if signer is not None and decision.review_round is not None:
        decision = signer(decision, target)
    handle = client.get_workflow_handle(workflow_id, run_id=target.run_id)
    # The same update id on every try: one applied but whose answer was lost in transit
    # returns that first result (aiorch.ops.retries).
    status: RunStatus = await retrying(
        lambda: handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW,
            decision,
            id=update_id(workflow_id, decision.review_round, decision.reviewer),
            result_type=RunStatus,
        )
    )
    recorded, counted = None, None
    if decision.review_round:
        recorded = decision_for_round(status.history, decision.review_round)
        counted = vote_in_round(status.history, decision.review_round, decision.reviewer)
    return ReviewOutcome(sent=decision, status=status, recorded=recorded, counted=counted)
