"""The batch lane under a worker kill, seen from outside: which worker is creating a batch
(to SIGKILL it then), what the simulator's batches hold (each call's name, ``custom_id``, in
their input files: a call in two batches was submitted twice), and which groups' submissions
were retried after the kill and found their batch.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client

from aiorch.devstack.processes import ManagedProcess
from bench.shared_limit import scheduled_ids
from workflows import contract

BATCH_WORKFLOWS = f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'"


@dataclass(frozen=True)
class BatchAudit:
    """What the simulator's batches hold: batches created, the lines in them, the distinct
    calls, and the calls found in more than one batch (or twice in one)."""

    batches: int
    lines: int
    calls: int
    duplicates: int

    def as_dict(self) -> dict[str, int]:
        """The JSON form."""
        return {
            "batches": self.batches,
            "lines": self.lines,
            "calls": self.calls,
            "duplicates": self.duplicates,
        }


def _get(simulator_url: str, path: str) -> bytes:
    with urllib.request.urlopen(f"{simulator_url}{path}", timeout=30) as response:
        body: bytes = response.read()
    return body


def batch_state(simulator_url: str) -> dict[str, Any]:
    """The simulator's ``/_sim/batches``: its settings, ``submissions`` and every batch."""
    state: dict[str, Any] = json.loads(_get(simulator_url, "/_sim/batches"))
    return state


def audit_batches(simulator_url: str) -> BatchAudit:
    """Read every batch's input file from the simulator's Files API and count its calls."""
    state = batch_state(simulator_url)
    names: Counter[str] = Counter()
    for batch in state["batches"]:
        content = _get(simulator_url, f"/v1/files/{batch['input_file_id']}/content")
        names.update(json.loads(line)["custom_id"] for line in content.splitlines() if line)
    return BatchAudit(
        batches=int(state["submissions"]),
        lines=sum(names.values()),
        calls=len(names),
        duplicates=sum(1 for count in names.values() if count > 1),
    )


async def submitting_worker(
    client: Client, workers: list[ManagedProcess]
) -> tuple[int, str] | None:
    """The index of the worker (among ``workers``) running a ``submit_batch`` activity now,
    and that batch group's workflow id; None when no worker of these is submitting."""
    by_pid = {str(worker.pid): n for n, worker in enumerate(workers)}
    async for found in client.list_workflows(f"{BATCH_WORKFLOWS} AND ExecutionStatus = 'Running'"):
        description = await client.get_workflow_handle(found.id).describe()
        for pending in description.raw_description.pending_activities:
            started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            if pending.activity_type.name == contract.ACTIVITY_SUBMIT_BATCH and started:
                n = by_pid.get(pending.last_worker_identity.partition("@")[0])
                if n is not None:
                    return n, found.id
    return None


async def retried_submissions(client: Client, since: datetime) -> int:
    """How many batch groups started since ``since`` had their ``submit_batch`` complete on a
    later attempt than the first (the history's started event records the last attempt)."""
    retried = 0
    query = f"{BATCH_WORKFLOWS} AND StartTime >= '{since.isoformat()}'"
    async for found in client.list_workflows(query):
        events = (await client.get_workflow_handle(found.id).fetch_history()).events
        submits = scheduled_ids(events, contract.ACTIVITY_SUBMIT_BATCH)
        retried += any(
            e.activity_task_started_event_attributes.attempt > 1
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.scheduled_event_id in submits
        )
    return retried
