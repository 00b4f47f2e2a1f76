"""Driving load: start N runs at once, follow them through visibility, check every result.

Status reads never go through queries (a query is a workflow task on the worker): completion is
counted with visibility (``CountWorkflowExecutions``), latencies come from the visibility
records' server-side start and close times, and each run's result is read once it has closed,
outside the timed window. Every batch gets its own workflow id prefix (8 hex chars), so one
``WorkflowId STARTS_WITH`` query finds exactly its runs and a 24-hex id stays a valid
``request_id``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCStatusCode

from aiorch.ops.retries import TRANSIENT
from aiorch.ops.retries import retrying as ops_retrying
from aiorch.ops.visibility import CLOSED, start_run
from bench.baseline import BASELINE_TASK_QUEUE, BASELINE_WORKFLOW
from bench.procstat import cpu_seconds
from bench.stats import percentile
from workflows import contract
from workflows.payloads import PipelineRequest, PipelineResult

T = TypeVar("T")
RESULT_READS = 64  # concurrent result reads after a batch has closed
START_CONCURRENCY = 500  # start RPCs in flight at once ("started at once", bounded sockets)
POLL_S = 0.25
MESSAGE = "Summarise why durable execution matters for LLM pipelines."


class BenchError(Exception):
    """The bench cannot go on (a server is gone, runs never close); the message says why."""


@dataclass(frozen=True)
class Target:
    """What a load phase runs: ``baseline`` (BenchBaseline) or ``ours`` (AiOrchestrator)."""

    name: str
    workflow_type: str
    task_queue: str

    async def start(
        self,
        client: Client,
        request_id: str,
        review: str,
        *,
        llm_failures: int = 0,
        lane: str | None = None,
        prefix: str = "",
    ) -> None:
        """Start one run the way its users would.

        ``review`` ``always`` makes the run wait for a review after its LLM step (the baseline
        waits for its ``approve`` update); ``llm_failures`` makes its LLM call fail that many
        times first with a 429 (ours: the simulator's directive; the baseline: its stand-in).
        Ours only: ``lane`` asks for a lane (``batch``), ``prefix`` comes before the message.
        """
        if self.workflow_type == contract.WORKFLOW_TYPE:
            message = prefix + MESSAGE
            if prefix:  # the shared prefix first, the run's own text after it
                message += f" (request {request_id})"
            if llm_failures:
                message = f"{message} [sim:status=429:times={llm_failures}]"
            options = {"lane": lane} if lane else {}
            request = PipelineRequest.model_validate(
                {
                    "request_id": request_id,
                    "user_message": message,
                    "review": review,
                    "options": options,
                }
            )
            await start_run(client, request, task_queue=self.task_queue)
        else:
            payload: dict[str, Any] = {"request_id": request_id}
            if review == "always":
                payload["review"] = True
            if llm_failures:
                payload["llm_failures"] = llm_failures
            await client.start_workflow(
                self.workflow_type, payload, id=request_id, task_queue=self.task_queue
            )

    def completed(self, raw: Any) -> bool:
        """Whether a run's result says it completed (not failed or dead-lettered)."""
        if self.workflow_type == contract.WORKFLOW_TYPE:
            return PipelineResult.model_validate(raw).state == "completed"
        return isinstance(raw, dict) and raw.get("state") == "completed"


BASELINE = Target("baseline", BASELINE_WORKFLOW, BASELINE_TASK_QUEUE)
OURS = Target("ours", contract.WORKFLOW_TYPE, contract.DEFAULT_TASK_QUEUE)


@dataclass
class Batch:
    """The runs of one batch: their ids and the query that finds them."""

    tag: str
    ids: list[str]

    @classmethod
    def new(cls, n: int) -> Batch:
        tag = secrets.token_hex(4)
        return cls(tag, [tag + secrets.token_hex(8) for _ in range(n)])

    def query(self, extra: str = "") -> str:
        """A visibility query for this batch's runs, with an optional further condition."""
        query = f"WorkflowId STARTS_WITH '{self.tag}'"
        return f"{query} AND {extra}" if extra else query


@dataclass(frozen=True)
class BatchFigures:
    """What one batch measured (the per-run figures divide by the batch's size)."""

    target: str
    n: int
    runs_per_s: float
    p50_s: float
    p95_s: float
    server_cpu_s_per_run: float
    worker_cpu_s_per_run: float
    simulator_cpu_s_per_run: float | None
    history_events: float
    wall_s: float
    lost: int
    failed: int
    machine_busy_before: float | None = None  # CPU busy fraction just before the batch


async def retrying(call: Callable[[], Awaitable[T]], *, attempts: int = 60) -> T:
    """``call()``, retried while the server is unavailable (a restart, a full queue) or the
    client reconnects: the operator tools' retry, patient enough for a server restart."""
    return await ops_retrying(
        call,
        attempts=attempts,
        backoff=(0.2, 2.0),
        transient=TRANSIENT | {RPCStatusCode.UNKNOWN},
        reconnecting=True,
    )


async def start_batch(client: Client, target: Target, batch: Batch, review: str) -> None:
    """Start every run of ``batch`` at once (at most START_CONCURRENCY RPCs in flight)."""
    gate = asyncio.Semaphore(START_CONCURRENCY)

    async def one(request_id: str) -> None:
        async with gate:
            await retrying(lambda: target.start(client, request_id, review))

    await asyncio.gather(*(one(i) for i in batch.ids))


async def count(client: Client, query: str) -> int:
    """How many executions visibility finds for ``query``."""
    found = await retrying(lambda: client.count_workflows(query))
    return found.count


async def wait_count(
    client: Client,
    query: str,
    expected: int,
    timeout_s: float,
    on_poll: Callable[[int], None] | None = None,
) -> int:
    """Poll visibility until ``query`` counts ``expected`` runs or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await count(client, query)
        if on_poll is not None:
            on_poll(found)
        if found >= expected or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(POLL_S)


@dataclass(frozen=True)
class Closed:
    """One closed run as visibility records it."""

    status: WorkflowExecutionStatus | None
    start: datetime
    close: datetime | None


async def closed_runs(client: Client, batch: Batch) -> dict[str, Closed]:
    """Every closed run of ``batch`` by workflow id, from visibility."""

    async def listing() -> dict[str, Closed]:
        found: dict[str, Closed] = {}
        query = batch.query(CLOSED)
        async for execution in client.list_workflows(query, page_size=1000):
            found[execution.id] = Closed(
                execution.status, execution.start_time, execution.close_time
            )
        return found

    return await retrying(listing)


async def check_results(client: Client, target: Target, ids: list[str]) -> int:
    """Read every run's result; returns how many did not complete (failed or wrong state)."""
    gate = asyncio.Semaphore(RESULT_READS)

    async def one(workflow_id: str) -> bool:
        async with gate:
            handle = client.get_workflow_handle(workflow_id)
            try:
                raw = await retrying(lambda: handle.result())
            except WorkflowFailureError:
                return False
            return target.completed(raw)

    outcomes = await asyncio.gather(*(one(i) for i in ids))
    return sum(1 for ok in outcomes if not ok)


async def history_events(client: Client, ids: list[str], sample: int = 3) -> float:
    """The median number of history events of a few runs (they all take the same path)."""
    counts = []
    for workflow_id in ids[:sample]:
        handle = client.get_workflow_handle(workflow_id)
        history = await retrying(handle.fetch_history)
        counts.append(len(history.events))
    counts.sort()
    return float(counts[len(counts) // 2])


def cpu_snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process."""
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


async def run_batch(
    client: Client,
    target: Target,
    n: int,
    pids: Mapping[str, int],
    *,
    timeout_s: float,
) -> BatchFigures:
    """Start ``n`` runs at once and measure them until every one has closed.

    ``pids`` names the processes to account CPU to: ``server``, ``worker`` and optionally
    ``simulator``. Throughput is ``n`` over the span from the first server-side start to the
    last close; latency is each run's close minus its start, both as the server recorded them.
    """
    batch = Batch.new(n)
    before = cpu_snapshot(pids)
    wall = time.monotonic()
    await start_batch(client, target, batch, "never")
    await wait_count(client, batch.query(CLOSED), n, timeout_s)
    wall_s = time.monotonic() - wall
    after = cpu_snapshot(pids)
    closed = await closed_runs(client, batch)
    mine = [closed[i] for i in batch.ids if i in closed and closed[i].close is not None]
    lost = n - len(mine)
    failed = sum(1 for c in mine if c.status != WorkflowExecutionStatus.COMPLETED)
    failed += await check_results(client, target, [i for i in batch.ids if i in closed])
    if not mine:
        raise BenchError(f"no {target.name} run of {n} closed within {timeout_s:g} s")
    first = min(c.start for c in mine)
    last = max(c.close for c in mine if c.close is not None)
    span = max((last - first).total_seconds(), 1e-6)
    latencies = [(c.close - c.start).total_seconds() for c in mine if c.close is not None]

    def per_run(name: str) -> float:
        return (after[name] - before[name]) / n

    return BatchFigures(
        target=target.name,
        n=n,
        runs_per_s=len(mine) / span,
        p50_s=percentile(latencies, 0.50),
        p95_s=percentile(latencies, 0.95),
        server_cpu_s_per_run=per_run("server"),
        worker_cpu_s_per_run=per_run("worker"),
        simulator_cpu_s_per_run=per_run("simulator") if "simulator" in pids else None,
        history_events=await history_events(client, batch.ids),
        wall_s=wall_s,
        lost=lost,
        failed=failed,
    )


async def single_run_latency(client: Client, target: Target) -> tuple[float, bool]:
    """One run on an idle system: seconds from the start call until its result, and whether it
    completed. The result is read with one long poll, the cheapest way to wait for one run."""
    batch = Batch.new(1)
    began = time.perf_counter()
    await target.start(client, batch.ids[0], "never")
    try:
        raw = await client.get_workflow_handle(batch.ids[0]).result()
    except WorkflowFailureError:
        return time.perf_counter() - began, False
    return time.perf_counter() - began, target.completed(raw)
