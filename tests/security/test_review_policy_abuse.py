"""Review policies attacked, against a real dev server and a real worker process whose operator
asks for two approvals from the group finance (alice, bob, carol) on every LLM run.

Each reviewer holds a key that signs for them alone (``REVIEW_PUBLIC_KEYS``: one per reviewer);
dave has a key too but is in no group. The attackers: a reviewer who wants to release a run
alone, a requester who wants to review their own run or to shrink the quorum, and anyone with
a Temporal client who writes payloads by hand.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV
from workflows import contract, errors
from workflows.payloads import ReviewDecision, RunStatus

pytestmark = pytest.mark.e2e

KEYS = {name: SigningKey.generate(name) for name in ("alice", "bob", "carol", "dave")}
# One person's key that may sign for two members of finance (a shared or delegated key).
TEAM = SigningKey.generate("team")
POLICY = {"llm": {"name": "two-of-finance", "stages": [{"group": "finance", "approvals": 2}]}}


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return {
        **E2E_WORKER_ENV,
        "REVIEW_PUBLIC_KEYS": ",".join(
            [
                *(key.public_entry([name]) for name, key in KEYS.items()),
                TEAM.public_entry(["bob", "carol"]),
            ]
        ),
        "REVIEW_POLICIES": json.dumps(POLICY),
        "REVIEW_GROUPS": json.dumps({"finance": ["alice", "bob", "carol"]}),
    }


async def review(
    handle: WorkflowHandle[Any, Any], signer: str, decision: str = "approve", **fields: Any
) -> dict[str, Any]:
    """A review signed by ``signer``'s own key (naming ``fields['reviewer']``, default the
    signer), for the run's current round and chain."""
    status = await status_of(handle)
    described = await handle.describe()
    payload = ReviewDecision(decision=decision, reviewer=fields.pop("reviewer", signer), **fields)
    return (
        KEYS[signer]
        .sign(
            payload,
            workflow_id=handle.id,
            review_round=status.review_round,
            now=datetime.now(UTC),
            run_id=described.raw_description.workflow_execution_info.first_run_id,
        )
        .model_dump(mode="json", exclude_none=True)
    )


async def send(handle: WorkflowHandle[Any, Any], payload: dict[str, Any]) -> RunStatus:
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW, payload, result_type=RunStatus
    )
    return status


async def refused(handle: WorkflowHandle[Any, Any], payload: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await send(handle, payload)
    return str(info.value.cause)


async def test_one_reviewer_cannot_release_a_run_alone(client: Client) -> None:
    """alice approves (counted: 1 of 2). Approving again with a fresh token, by update or by a
    flood of signals, signing a decision that names bob with her key, or sending a rejection to
    change sides: each is refused or counted as refused, and the run still waits with her one
    approval. bob's approval releases it."""
    handle = await start(client, request("Wire the payment", review="always"))
    await wait_for_state(handle, "await_review")

    counted = await send(handle, await review(handle, "alice"))
    assert counted.review is not None and counted.review.approvals == ["alice"]
    assert "already voted approve" in await refused(handle, await review(handle, "alice"))
    for _ in range(5):
        await handle.signal(contract.SIGNAL_REVIEW, await review(handle, "alice"))
    as_bob = await review(handle, "alice", reviewer="bob")
    assert "may not sign for this reviewer" in await refused(handle, as_bob)
    assert "already voted approve" in await refused(handle, await review(handle, "alice", "reject"))

    waiting = await wait_for_state(handle, "await_review")
    assert waiting.review is not None and waiting.review.approvals == ["alice"]
    assert waiting.reviews_refused == 5
    await send(handle, await review(handle, "bob"))
    result = await finished(handle)
    assert result.state == "completed"
    assert [e.reviewer for e in result.history if e.event == "approve"] == ["bob"]


async def test_a_key_for_two_names_casts_one_vote(client: Client) -> None:
    """The holder of a key that signs for bob and carol approves as bob (counted: 1 of 2),
    then as carol: refused, by update and by signal, as the same key's second vote, and the run
    still waits with one approval. alice's approval releases it."""
    handle = await start(client, request("Pay the supplier", review="always"))
    await wait_for_state(handle, "await_review")

    async def as_team(reviewer: str) -> dict[str, Any]:
        status = await status_of(handle)
        described = await handle.describe()
        return TEAM.sign(
            ReviewDecision(decision="approve", reviewer=reviewer),
            workflow_id=handle.id,
            review_round=status.review_round,
            now=datetime.now(UTC),
            run_id=described.raw_description.workflow_execution_info.first_run_id,
        ).model_dump(mode="json", exclude_none=True)

    counted = await send(handle, await as_team("bob"))
    assert counted.review is not None and counted.review.approvals == ["bob"]
    assert "a key counts once a round" in await refused(handle, await as_team("carol"))
    await handle.signal(contract.SIGNAL_REVIEW, await as_team("carol"))
    for _ in range(50):
        waiting = await status_of(handle)
        if waiting.reviews_refused:
            break
        await asyncio.sleep(0.1)
    assert waiting.state == "await_review" and waiting.reviews_refused == 1
    assert waiting.review is not None and waiting.review.approvals == ["bob"]
    await send(handle, await review(handle, "alice"))
    result = await finished(handle)
    assert result.state == "completed"
    assert [e.reviewer for e in result.history if e.event == "approve"] == ["alice"]


async def test_a_reviewer_outside_the_group_never_counts(client: Client) -> None:
    """dave's key is trusted and no ALLOWED_REVIEWERS keeps him out, but he is in no group:
    his approval is refused, by update and by signal."""
    handle = await start(client, request("Release the draft", review="always"))
    await wait_for_state(handle, "await_review")
    assert "is not in group finance" in await refused(handle, await review(handle, "dave"))
    await handle.signal(contract.SIGNAL_REVIEW, await review(handle, "dave"))
    status = await wait_for_state(handle, "await_review")
    assert status.review is not None and status.review.approvals == []
    await handle.cancel()


async def test_a_requester_cannot_review_their_run_or_shrink_the_quorum(client: Client) -> None:
    """alice asks for a run: her approval is refused though she is in finance. Asking for a run
    reviewed only by herself and bob (options.allowed_reviewers), which would leave one
    reviewer for a quorum of two, fails the run at once (InvalidRequest)."""
    own = await start(client, request("My own summary", review="always", requested_by="alice"))
    await wait_for_state(own, "await_review")
    assert "'alice' requested this run" in await refused(own, await review(own, "alice"))
    await own.cancel()

    shrunk = await start(
        client,
        request(
            "Shrink it",
            review="always",
            requested_by="alice",
            options={"allowed_reviewers": ["alice", "bob"]},
        ),
    )
    result = await finished(shrunk)
    assert result.state == "failed"
    assert result.history[-1].detail is not None
    assert result.history[-1].detail.startswith("InvalidRequest: review policy two-of-finance")
    assert "needs 2 approvals" in result.history[-1].detail


async def test_a_payload_cannot_claim_a_group_or_bring_its_own_rules(client: Client) -> None:
    """A review that names a group, or a request that carries a review policy or auto-approve
    rules, is not a payload the contract knows: the review is refused as invalid, the run fails
    at once; the operator's policy is the only one."""
    handle = await start(client, request("Check me", review="always"))
    await wait_for_state(handle, "await_review")
    claim = {**await review(handle, "carol"), "group": "finance"}
    assert "invalid review" in await refused(handle, claim)
    await handle.cancel()

    rules = [{"name": "all", "when": [{"fact": "attempts", "op": ">=", "value": 0}]}]
    smuggling: list[dict[str, Any]] = [{"auto_approve": rules}, {"options": {"review_stages": []}}]
    for smuggled in smuggling:
        run = await start(client, request("Approve yourself", review="always", **smuggled))
        with pytest.raises(WorkflowFailureError) as info:
            await run.result()
        cause = info.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == errors.INVALID_REQUEST
        assert "Extra inputs are not permitted" in cause.message
