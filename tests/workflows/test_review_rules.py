"""Who may review and when: review rounds, allowed reviewers, the feedback limit and a review
policy's quorum, enforced alike by the submit_review validator (refused, nothing recorded) and
the review signal (a refusal counted, not acted on)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer

from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from tests.support.orchestration import Orchestration
from tests.support.reviewing import signed
from tests.support.run_history import entry_for, events, notes
from tests.support.scripted_activities import Reply
from tests.support.time_skipping import skip_time
from tests.workflows.test_review_decisions import CONFIDENT
from workflows import contract
from workflows.engine.identity import parse_review_keys
from workflows.engine.observability import METRIC_APPROVAL_DELAY, METRIC_AUTO_APPROVALS
from workflows.payloads import NOTE_REVIEW_VOTE, PipelineResult, ReviewView, RunStatus

FINANCE = ["alice", "bob", "carol"]
TWO_OF_THREE: dict[str, Any] = {
    "review_policy": "two-of-finance",
    "review_stages": [
        {"group": "finance", "reviewers": FINANCE, "approvals": 2},
        {"group": "finance", "reviewers": FINANCE, "approvals": 2},
    ],
}


async def submit(handle: WorkflowHandle[Any, PipelineResult], review: dict[str, Any]) -> RunStatus:
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW, review, result_type=RunStatus
    )
    return status


async def refusal(handle: WorkflowHandle[Any, PipelineResult], review: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await submit(handle, review)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    return cause.message


async def test_decision_for_another_round_is_refused(orch: Orchestration) -> None:
    """status.review_round numbers each answer under review; a decision pinned to another round
    is refused (a re-sent reedit can never land on the next answer), one pinned to the current
    round is applied."""
    orch.fakes.llm_script = [
        Reply(content="v1", needs_review=True),
        Reply(content="v2", needs_review=True),
    ]
    handle = await orch.start(review="auto")
    first = await orch.wait_for_state(handle, "await_review")
    assert first.review_round == 1

    reedit = {"decision": "reedit", "reviewer": "ann", "feedback": "shorter", "review_round": 1}
    after = await submit(handle, reedit)
    assert after.review_round == 1
    second = await orch.wait_for_state(handle, "await_review")
    assert second.review_round == 2

    message = await refusal(handle, reedit)
    assert message == f"review for round 1 refused: run {handle.id} is at review round 2"
    assert (await orch.status(handle)).history == second.history
    await handle.signal(contract.SIGNAL_REVIEW, reedit)
    await submit(handle, {"decision": "approve", "reviewer": "ann", "review_round": 2})
    result = await finished(handle)

    assert result.state == "completed" and result.content == "v2"
    assert events(result.history).count("reedit") == 1
    final = await orch.status(handle)
    assert final.reviews_refused == 1
    assert final.last_refusal is not None and "review for round 1 refused" in final.last_refusal
    approval = result.history[-2]
    assert (approval.event, approval.reviewer, approval.review_round) == ("approve", "ann", 2)
    assert len(orch.fakes.llm_calls) == 2
    await orch.check_finished(handle, result)


async def test_only_allowed_reviewers_decide(orch: Orchestration) -> None:
    """With options.allowed_reviewers, anyone else is refused by the update and counted (not
    applied) for the signal; an allowed reviewer's decision is applied."""
    handle = await orch.awaiting_review(options={"allowed_reviewers": ["alice", "bob"]})

    message = await refusal(handle, {"decision": "approve", "reviewer": "mallory"})
    assert message == f"reviewer 'mallory' is not allowed to review run {handle.id}"
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "reject", "reviewer": "mallory"})
    status = await submit(handle, {"decision": "approve", "reviewer": "bob"})
    result = await finished(handle)

    assert status.state == "generate_embedding"
    assert result.state == "completed"
    final = await orch.status(handle)
    assert final.reviews_refused == 1
    assert final.last_refusal == f"reviewer 'mallory' is not allowed to review run {handle.id}"
    assert "reject" not in events(result.history)
    await orch.check_finished(handle, result)


async def test_feedback_over_the_run_limit_is_refused(orch: Orchestration) -> None:
    """Feedback longer than the plan's max_feedback_chars is refused, naming the limit; the run
    keeps waiting and takes a shorter reedit."""
    orch.fakes.plan_overrides["max_feedback_chars"] = 20
    orch.fakes.llm_script = [Reply(needs_review=True), Reply()]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")

    long_feedback = {"decision": "reedit", "reviewer": "ann", "feedback": "x" * 21}
    message = await refusal(handle, long_feedback)
    assert message == f"feedback is 21 characters; run {handle.id} accepts at most 20"
    assert (await orch.status(handle)).state == "await_review"
    await submit(handle, {"decision": "reedit", "reviewer": "ann", "feedback": "x" * 20})
    result = await finished(handle)

    assert result.state == "completed"
    assert orch.fakes.llm_calls[-1].feedback == ["x" * 20]
    await orch.check_finished(handle, result)


async def test_one_approval_does_not_release_the_run_before_its_deadline(
    orch: Orchestration,
) -> None:
    """One approval of two leaves the run waiting, in the review state with its deadline, and
    the reviewer's inbox view shows the tally; the Web UI's details name the round, how to
    see what is decided, and the policy's progress."""
    orch.fakes.plan_overrides.update(TWO_OF_THREE)
    handle = await orch.awaiting_review(options={"review_timeout_s": 600})

    await submit(handle, {"decision": "approve", "reviewer": "carol"})
    await skip_time(orch.env, timedelta(seconds=300))

    view: ReviewView = await handle.query(contract.QUERY_REVIEW_VIEW, result_type=ReviewView)
    assert view.state == "await_review" and view.waiting
    assert view.review is not None and view.review.approvals == ["carol"]
    assert view.allowed_reviewers == FINANCE
    assert len(orch.fakes.embedding_calls) == 0
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "waiting for a reviewer in round 1: starter.py review show <id>" in (
        metadata.current_details
    )
    assert metadata.current_details.endswith(
        "policy two-of-finance, stage 1 of 2: group finance, 1 of 2 approvals: carol"
    )


async def test_two_of_three_approvals_release_the_run_and_a_reviewer_counts_once(
    orch: Orchestration,
) -> None:
    """Under a 2-of-3 policy, alice's approval is counted without moving the run (the update
    answers with the tally, the history has a vote note, status shows "1 of 2 approvals:
    alice"); her second approval, by update or by signal, is refused and counts nothing; bob's
    approval completes the quorum and the run goes on, the history naming both and the group."""
    orch.fakes.plan_overrides.update(TWO_OF_THREE)
    handle = await orch.awaiting_review()

    after_alice = await submit(handle, {"decision": "approve", "reviewer": "alice"})
    assert after_alice.state == "await_review"
    assert after_alice.review is not None
    assert (after_alice.review.approvals, after_alice.review.approvals_needed) == (["alice"], 2)
    assert after_alice.review.describe() == "1 of 2 approvals: alice"
    vote = notes(after_alice.history, NOTE_REVIEW_VOTE)
    assert [(v.reviewer, v.vote, v.group, v.review_round) for v in vote] == [
        ("alice", "approve", "finance", 1)
    ]
    assert [v.detail for v in vote] == ["approve by alice: 1 of 2 approvals: alice"]

    again = await refusal(handle, {"decision": "approve", "reviewer": "alice"})
    assert again == (
        f"'alice' already voted approve in round 1 of run {handle.id}; a reviewer counts once "
        "a round"
    )
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "alice"})
    still = await orch.wait_for_state(handle, "await_review")
    assert still.review is not None and still.review.approvals == ["alice"]

    after_bob = await submit(handle, {"decision": "approve", "reviewer": "bob"})
    result = await finished(handle)

    assert after_bob.state == "generate_embedding"
    assert result.state == "completed"
    approval = entry_for(result.history, "approve")
    assert (approval.reviewer, approval.group, approval.review_round) == ("bob", "finance", 1)
    assert approval.detail == "approve by bob (2 of 2 approvals: alice, bob)"
    assert events(result.history).count("approve") == 1
    final = await orch.status(handle)
    assert final.reviews_refused == 1
    assert final.last_refusal is not None and "already voted approve" in final.last_refusal
    await orch.check_finished(handle, result)


async def test_a_reject_needs_its_own_quorum_when_the_policy_says_so(
    orch: Orchestration,
) -> None:
    """With rejections: 2, one reject is a vote; approvals and rejections are tallied apart;
    a second reject from another reviewer ends the round."""
    orch.fakes.plan_overrides.update({**TWO_OF_THREE, "rejections": 2})
    handle = await orch.awaiting_review()

    first = await submit(handle, {"decision": "reject", "reviewer": "alice"})
    assert first.state == "await_review"
    assert first.review is not None and first.review.rejections == ["alice"]
    assert first.review.describe() == "0 of 2 approvals; 1 of 2 rejections: alice"
    await submit(handle, {"decision": "approve", "reviewer": "bob"})
    second = await submit(handle, {"decision": "reject", "reviewer": "carol"})
    result = await finished(handle)

    assert second.state == "failed"
    assert entry_for(result.history, "reject").detail == (
        "reject by carol (2 of 2 rejections: alice, carol)"
    )


async def test_a_vote_signed_with_a_key_revoked_since_no_longer_counts(
    orch: Orchestration,
) -> None:
    """Under a 2-of-3 policy with signed reviews, alice's approval stops counting once the key
    that signed it is revoked: bob's approval after it is the only one, and the run still
    waits for a second."""
    alice_key, bob_key = SigningKey.generate("alice-key"), SigningKey.generate("bob-key")
    keys = f"{alice_key.public_entry(['alice'])},{bob_key.public_entry(['bob'])}"
    orch.fakes.plan_overrides.update({**TWO_OF_THREE, "review_keys": parse_review_keys(keys)})
    handle = await orch.awaiting_review()
    now = await orch.env.get_current_time()

    first = await submit(handle, await signed(handle, alice_key, "approve", "alice", now=now))
    assert first.review is not None and first.review.approvals == ["alice"]
    await handle.signal(contract.SIGNAL_REVOKE, {"key_ids": ["alice-key"]})
    second = await submit(handle, await signed(handle, bob_key, "approve", "bob", now=now))

    assert second.state == "await_review"
    assert second.review is not None and second.review.approvals == ["bob"]


async def test_a_decided_round_records_how_long_it_waited_and_a_rule_what_it_approved(
    orch: Orchestration, worker_metrics: MetricBuffer
) -> None:
    """Two finance approvals 40 s after the result began to wait record one approval delay of
    40 s for the LLM pipeline, the finance group and ``approve``; a result an auto-approve rule
    approves counts once for the pipeline and the rule (the worker's metrics, read from its
    runtime)."""
    orch.fakes.plan_overrides.update(TWO_OF_THREE)
    handle = await orch.awaiting_review()
    await skip_time(orch.env, timedelta(seconds=40))
    await submit(handle, {"decision": "approve", "reviewer": "alice"})
    await submit(handle, {"decision": "approve", "reviewer": "bob"})
    assert (await finished(handle)).state == "completed"
    orch.fakes.plan_overrides.update(auto_approve=[CONFIDENT])
    orch.fakes.llm_script = [Reply(confidence=0.95)]
    assert (await finished(await orch.start(review="always"))).state == "completed"

    updates = worker_metrics.retrieve_updates()
    delays = [u for u in updates if u.metric.name == METRIC_APPROVAL_DELAY]
    assert [labels(u.attributes, "pipeline", "group", "decision") for u in delays] == [
        {"pipeline": "llm", "group": "finance", "decision": "approve"}
    ]
    assert 40 <= float(delays[0].value) < 41
    approvals = [u for u in updates if u.metric.name == METRIC_AUTO_APPROVALS]
    assert [(labels(u.attributes, "pipeline", "rule"), u.value) for u in approvals] == [
        ({"pipeline": "llm", "rule": "confident"}, 1)
    ]


def labels(attributes: Mapping[str, object], *names: str) -> dict[str, object]:
    """The project's own labels of a metric update (the SDK adds its own: task queue, ...)."""
    return {name: attributes.get(name) for name in names}
