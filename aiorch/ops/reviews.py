"""Sending a review so that it is applied once, however often it is sent.

The decision names its review round (the one the reviewer looked at; by default the run's
current round, read with the ``status`` query), and the ``submit_review`` update's id is derived
from (run, round, reviewer): re-sending the same review returns the first result instead of
deciding again (Temporal keeps update ids per run), and a decision for a round that is over is
refused by the workflow, so a late or repeated decision can never land on a later round.

``starter.py review`` and ``starter.py review-all`` (``aiorch.ops.batch``) both go through
`submit_review`, which signs the decision for its run and round with a `Signer` when reviewer
authentication is on. A batch builds each run's decision with a `DecisionFor` from (workflow
id, round), so what is sent, signed and deduplicated always names the round the run is in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

from temporalio.client import Client

from workflows import contract
from workflows.engine.graph import Event
from workflows.engine.reviews import event_of
from workflows.payloads import Decision, HistoryEntry, ReviewDecision, RunStatus

# A history entry whose event is a decision records a review (its round, its reviewer); an
# approval with corrected fields is recorded as the ``correct`` event.
DECISION_EVENTS: frozenset[str] = frozenset(get_args(Decision)) | {Event.CORRECT}

DecisionFor = Callable[[str, int | None], ReviewDecision]
"""Builds the (unsigned) decision for ``(workflow_id, review_round)``; the round is None when
the run has not reached a review yet."""


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
    """What a sent review led to: the status after it and the decision the round recorded."""

    sent: ReviewDecision
    status: RunStatus
    recorded: HistoryEntry | None

    @property
    def applied(self) -> bool:
        """True when the run's history records this very decision (decision, reviewer, round).

        False for a cached result of an earlier, different decision with the same update id,
        and when the run returned no record of the round at all.
        """
        recorded = self.recorded
        return (
            recorded is not None
            and recorded.event == event_of(self.sent)
            and recorded.reviewer == self.sent.reviewer
            and recorded.review_round == self.sent.review_round
        )

    @property
    def applied_as_sent(self) -> bool:
        """False when the round was decided by an earlier, different decision."""
        recorded = self.recorded
        return recorded is None or (
            recorded.event == event_of(self.sent) and recorded.reviewer == self.sent.reviewer
        )

    def describe(self, workflow_id: str) -> str:
        """One line for the reviewer."""
        status = self.status
        round_text = f"round {self.sent.review_round}" if self.sent.review_round else "review"
        recorded = self.recorded
        if recorded is None and self.sent.review_round:
            return (
                f"{workflow_id}: {self.sent.decision} sent for {round_text}, but the run shows "
                f"no decision for it (see `starter.py history {workflow_id}`); "
                f"now {status.state} ({status.status})"
            )
        if self.applied_as_sent:
            return (
                f"{workflow_id}: {self.sent.decision} accepted ({round_text}); "
                f"now {status.state} ({status.status})"
            )
        assert recorded is not None
        return (
            f"{workflow_id}: {round_text} was already decided ({recorded.event} by "
            f"{recorded.reviewer}); your {self.sent.decision} was not applied. "
            f"Now {status.state} ({status.status})"
        )


def decision_for_round(history: list[HistoryEntry], review_round: int) -> HistoryEntry | None:
    """The decision recorded for ``review_round``, if any."""
    for entry in reversed(history):
        if entry.event in DECISION_EVENTS and entry.review_round == review_round:
            return entry
    return None


Signer = Callable[[ReviewDecision, str, int], ReviewDecision]
"""Signs a decision for (workflow id, review round): see ``aiorch.ops.signing.SigningKey.sign``."""


async def current_round(client: Client, workflow_id: str) -> int | None:
    """The run's current review round, None before its first review.

    Read from the run's ``AiReviewRound`` search attribute (describe: not a billable action,
    where a ``status`` query would be one); the run publishes it with every review wait.

    Raises:
        temporalio.service.RPCError: no such run, or the server is unreachable.
    """
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.typed_search_attributes.get(contract.AI_REVIEW_ROUND) or None


async def decision_for_current_round(
    client: Client, workflow_id: str, decide: DecisionFor
) -> ReviewDecision:
    """The decision ``decide`` builds for the run's current round (see `current_round`)."""
    return decide(workflow_id, await current_round(client, workflow_id))


async def submit_review(
    client: Client, workflow_id: str, decision: ReviewDecision, *, signer: Signer | None = None
) -> ReviewOutcome:
    """Send ``decision`` through the ``submit_review`` update, idempotently (see module doc),
    signed for its round by ``signer`` when reviewer authentication is on.

    A decision without a round is first given the run's current round. Retrying a call that
    failed in transit with the *same* decision is safe: its update id names the round.

    Raises:
        temporalio.client.WorkflowUpdateFailedError: the run refused it (the cause says why).
        temporalio.service.RPCError: no such open run, or the server is unreachable.
    """
    if decision.review_round is None:
        decision = await decision_for_current_round(client, workflow_id, for_each_round(decision))
    if signer is not None and decision.review_round is not None:
        decision = signer(decision, workflow_id, decision.review_round)
    status: RunStatus = await client.get_workflow_handle(workflow_id).execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        decision,
        id=update_id(workflow_id, decision.review_round, decision.reviewer),
        result_type=RunStatus,
    )
    recorded = (
        decision_for_round(status.history, decision.review_round) if decision.review_round else None
    )
    return ReviewOutcome(sent=decision, status=status, recorded=recorded)
