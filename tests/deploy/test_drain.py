"""Rolling restarts and crashes lose nothing: three worker processes share one task queue and a
batch of 300 runs; one is drained with SIGTERM mid-batch, another is killed with SIGKILL, and
every run still completes.

Every LLM call takes a second (a simulator delay), so each worker always holds calls in flight.
What each worker did is read back from the runs' histories: an activity's ``started`` event
names the worker that ran it (``pid@host``), its closing event says how it ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.stack import LocalStack
from aiorch_runtime.temporal import AiOrchestratorPlugin
from tests.deploy.processes import probe, process_env, start_worker
from workflows import contract
from workflows.payloads import PipelineResult

pytestmark = [pytest.mark.e2e, pytest.mark.long]

RUNS = 300
WORKERS = 3
LLM_DELAY_MS = 1000
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "timed out",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "cancelled",
}


@dataclass(frozen=True)
class Attempt:
    """One activity attempt as history records it."""

    activity: str
    worker: str  # the identity that ran it
    outcome: str
    closed_at: datetime


@dataclass(frozen=True)
class RunningWorker:
    proc: ManagedProcess
    identity: str
    health_port: int


def _simulator(stack: LocalStack, method: str, path: str, body: Any = None) -> Any:
    root = stack.addresses.openai_base_url.removesuffix("/v1")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{root}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with _DIRECT.open(request, timeout=30) as response:
        return json.load(response) if method == "GET" else None


def _answered_chats(stack: LocalStack) -> int:
    log = _simulator(stack, "GET", "/_sim/requests")
    return sum(1 for r in log if r["path"] == "chat" and r["status"] is not None)


async def _until(condition: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def _attempts(handle: WorkflowHandle[Any, Any]) -> list[Attempt]:
    history = await handle.fetch_history()
    names: dict[int, str] = {}
    started: dict[int, str] = {}
    attempts: list[Attempt] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            started[attributes.scheduled_event_id] = attributes.identity
        elif event.event_type in _CLOSED:
            field = event.WhichOneof("attributes")
            assert field is not None
            attributes = getattr(event, field)
            scheduled = attributes.scheduled_event_id
            attempts.append(
                Attempt(
                    activity=names[scheduled],
                    worker=started.get(scheduled, "?"),
                    outcome=_CLOSED[event.event_type],
                    closed_at=event.event_time.ToDatetime(tzinfo=UTC),
                )
            )
    return attempts


@pytest.mark.timeout(420)
async def test_three_workers_share_300_runs_through_a_drain_and_a_crash(
    bare_stack: LocalStack,
) -> None:
    """Three workers take a batch of 300 runs. SIGTERM to the first mid-batch turns its
    readiness to ``draining`` (liveness stays up), lets every LLM call it had started finish
    (some after the signal) and ends it with exit status 0; SIGKILL to the second strands the
    calls it held, which time out and are retried by the others. Every run completes, and each
    of the three workers ran part of the batch."""
    _simulator(bare_stack, "POST", "/_sim/faults", {"path": "chat", "delay_ms": LLM_DELAY_MS})
    workers: list[RunningWorker] = []
    try:
        for n in range(WORKERS):
            port = free_port()
            env = process_env(
                bare_stack,
                {
                    "TEMPORAL_ADDRESS": bare_stack.addresses.temporal_address,
                    "HEALTH_PORT": str(port),
                    # Embedded Qdrant serves one process per directory (production: a server).
                    "VECTOR_STORE_PATH": str(bare_stack.data_dir / f"vectors-{n}"),
                },
            )
            proc = start_worker(bare_stack, f"worker-{n}", env)
            workers.append(RunningWorker(proc, f"{proc.pid}@{socket.gethostname()}", port))
        for worker in workers:
            assert probe(worker.health_port, "/readyz")[0] == 200
        drained, killed, _survivor = workers

        client = await Client.connect(
            bare_stack.addresses.temporal_address, plugins=[AiOrchestratorPlugin()]
        )
        ids = [uuid.uuid4().hex[:24] for _ in range(RUNS)]
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    contract.WORKFLOW_TYPE,
                    {"request_id": run_id, "user_message": f"run {n}", "review": "never"},
                    id=run_id,
                    task_queue=contract.DEFAULT_TASK_QUEUE,
                )
                for n, run_id in enumerate(ids)
            )
        )

        await _until(lambda: _answered_chats(bare_stack) >= RUNS // 5, "a fifth done", 120)
        os.kill(drained.proc.pid, signal.SIGTERM)
        signalled_at = datetime.now(UTC)
        await _until(
            lambda: probe(drained.health_port, "/readyz")[0] == 503, "readiness to drop", 5
        )
        assert probe(drained.health_port, "/readyz")[1]["status"] == "draining"
        assert probe(drained.health_port, "/healthz")[0] == 200
        await _until(lambda: not drained.proc.is_running(), "the drained worker to exit", 60)
        assert drained.proc.returncode == 0, drained.proc.log_text()[-2000:]

        await _until(lambda: _answered_chats(bare_stack) >= RUNS // 2, "half done", 120)
        killed.proc.kill()

        results = await asyncio.wait_for(
            asyncio.gather(*(handle.result() for handle in handles)), timeout=300
        )
        states = Counter(PipelineResult.model_validate(result).state for result in results)
        assert states == {"completed": RUNS}

        attempts = [a for h in handles for a in await _attempts(h)]
        by_worker = Counter(a.worker for a in attempts)
        assert {w.identity for w in workers} <= set(by_worker), by_worker
        drained_llm = [
            a for a in attempts if a.worker == drained.identity and a.activity == "invoke_llm"
        ]
        assert drained_llm and {a.outcome for a in drained_llm} == {"completed"}
        assert any(a.closed_at > signalled_at for a in drained_llm), "nothing was in flight"
        killed_llm = [a for a in attempts if a.worker == killed.identity]
        assert any(a.outcome == "timed out" for a in killed_llm), "the kill stranded nothing"
    finally:
        _simulator(bare_stack, "DELETE", "/_sim/faults")
        for worker in workers:
            worker.proc.stop()
