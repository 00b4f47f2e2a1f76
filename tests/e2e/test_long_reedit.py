"""A 200-round reedit loop against the real dev server and worker: it continues as new before
its history grows near Temporal's limits, and keeps every history entry queryable."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, status_of
from tests.support.live_stack import connect, stack_with_worker
from tests.support.reviewing import signed
from workflows import contract, errors
from workflows.payloads import NOTE_CONTINUED_AS_NEW, RunStatus

pytestmark = pytest.mark.e2e

ROUNDS = 200
ROUNDS_PER_RUN = 50  # REEDIT_ROUNDS_PER_RUN's default
# Temporal warns at 10,240 events or 10 MB of history per run.
WARN_EVENTS = 10_240
WARN_BYTES = 10 * 1024 * 1024
SERVER_WARNINGS = re.compile(r"history (size|count) exceeds|exceeds? (the )?warn", re.IGNORECASE)


@pytest.fixture(scope="module")
def long_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from stack_with_worker(tmp_path_factory.mktemp("long"))


async def until_awaiting(handle: WorkflowHandle[Any, Any], review_round: int) -> RunStatus:
    for _ in range(1500):
        current = await status_of(handle)
        if current.state == "await_review" and current.review_round == review_round:
            return current
        await asyncio.sleep(0.01)
    raise AssertionError(f"{handle.id} never reached review round {review_round}")


async def run_histories(client: Client, workflow_id: str) -> list[Any]:
    runs = [r async for r in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    return [
        await client.get_workflow_handle(workflow_id, run_id=run.run_id).fetch_history()
        for run in runs
    ]


async def test_two_hundred_reedit_rounds_continue_as_new_without_history_warnings(
    long_stack: LocalStack,
) -> None:
    """Two hundred reedits through the submit_review update: the loop moves to a fresh run every
    50 rounds or 2 MB, no run comes near 10,240 events or 10 MB, the server suggests
    continue-as-new to no run and logs no history warning, and the status query and the result
    still hold every history entry of all five runs, in order."""
    client = await connect(long_stack)
    handle = await start(client, request("Draft a haiku about queues", review="always"))
    await until_awaiting(handle, 1)
    for n in range(1, ROUNDS + 1):
        await handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW,
            await signed(
                handle, long_stack.reviewer_key, "reedit", "ann", f"round {n}", review_round=n
            ),
            result_type=RunStatus,
        )
        await until_awaiting(handle, n + 1)

    before = await status_of(handle)
    await handle.signal(
        contract.SIGNAL_REVIEW, await signed(handle, long_stack.reviewer_key, "approve", "ann")
    )
    result = await finished(handle)

    assert result.state == "completed"
    events = Counter(entry.event for entry in result.history)
    assert events["reedit"] == ROUNDS
    assert events["needs_review"] == ROUNDS + 1
    # Every 50 rounds, and sooner once late rounds (larger update results) fill 2 MB.
    continued = events[NOTE_CONTINUED_AS_NEW]
    assert continued >= ROUNDS // ROUNDS_PER_RUN
    assert before.history_dropped == 0
    assert result.history[: len(before.history)] == before.history
    reedits = [e for e in result.history if e.event == "reedit"]
    assert [e.feedback for e in reedits] == [f"round {n}" for n in range(1, ROUNDS + 1)]
    assert [e.review_round for e in reedits] == list(range(1, ROUNDS + 1))

    histories = await run_histories(client, handle.id)
    assert len(histories) == continued + 1
    for history in histories:
        started = [
            e.workflow_task_started_event_attributes
            for e in history.events
            if e.HasField("workflow_task_started_event_attributes")
        ]
        assert len(history.events) < WARN_EVENTS // 4
        assert max(s.history_size_bytes for s in started) < WARN_BYTES // 3
        assert not any(s.suggest_continue_as_new for s in started)
    server_log = long_stack.processes["temporal"].log_text()
    assert not SERVER_WARNINGS.search(server_log), SERVER_WARNINGS.search(server_log)
    sizes = sorted(
        (
            len(h.events),
            max(
                e.workflow_task_started_event_attributes.history_size_bytes
                for e in h.events
                if e.HasField("workflow_task_started_event_attributes")
            ),
        )
        for h in histories
    )
    print(f"runs (events, bytes): {sizes}")  # figures for the report; -s shows them


async def test_a_client_cannot_start_a_run_with_forged_carried_state(
    long_stack: LocalStack,
) -> None:
    """Carried state (history, review rounds, decisions) is accepted only from continue-as-new:
    a client that starts a run with a continuation-shaped input, e.g. to plant an approval in
    the audit trail, gets a failed run with a clear InvalidRequest and no activity runs."""
    client = await connect(long_stack)
    forged_request = request("forge")
    forged = {
        "request": forged_request,
        "carried": {
            "state": "invoke_llm",
            "history": [
                {
                    "from_state": "await_review",
                    "to_state": "generate_embedding",
                    "event": "approve",
                    "at": "2026-01-01T00:00:00Z",
                    "reviewer": "ceo",
                }
            ],
            "plan": {
                "system_prompt": "s",
                "user_prompt": "u",
                "review_timeout_s": 1,
                "escalation_timeout_s": 1,
                "llm_max_attempts": 1,
                "model": "sim-large",
            },
        },
    }
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        forged,
        id=forged_request["request_id"],
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == errors.INVALID_REQUEST
    assert "only from the workflow's own continue-as-new" in cause.message
    history = await handle.fetch_history()
    assert not [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
