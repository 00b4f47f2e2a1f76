"""The runs the ledger phase projects: a mixed fleet of both shipped pipelines and a pipeline
file, with reviews, corrections, retries and dead letters, driven until every run has closed;
and a steady stream of runs at a fixed rate for the follower to keep up with.

Every run goes through the same paths a user's do: started with `aiorch.ops.visibility.
start_run`, reviewed with `aiorch.ops.batch.review_all` and `aiorch.ops.reviews.submit_review`,
signed with the stack's reviewer key. The LLM simulator's directives make the retries
(``[sim:status=429:times=1]``: one throttled answer, then a good one) and the dead letters
(``[sim:status=503]`` on every attempt).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from temporalio.client import Client

from aiorch.ops import pipelines
from aiorch.ops.batch import review_all
from aiorch.ops.reviews import Signer, submit_review
from aiorch.ops.visibility import CLOSED, runs_query, start_run, waiting_for_review
from bench.load import BenchError, count, retrying
from bench.stack import PROJECT_ROOT
from workflows import contract
from workflows.data.payloads import DataRequest
from workflows.documents.payloads import DocumentRequest
from workflows.payloads import PipelineRequest, ReviewDecision

KINDS: Final = (
    # One cycle of 25 runs: what a fleet of N holds, in these proportions.
    *["happy"] * 10,
    *["reviewed"] * 3,
    *["retried"] * 2,
    "dead_letter",
    *["document"] * 3,
    "corrected",
    *["triage"] * 5,
)
INVOICE: Final = """Vendor: Acme Supplies Ltd
Invoice number: INV-{number}
Issue date: 2026-11-02
Currency: EUR
Line: Widgets | 3 | 4.50 | 13.50
Line: Shipping | 1 | 5.00 | 5.00
Tax: 3.70
Total: 25.00
"""
TRIAGE: Final = "SupportTriage"  # the example pipeline file, pipelines/support_triage.yaml
START_CONCURRENCY: Final = 64
POLL_S: Final = 0.5


def pipeline_folder(data_dir: Path) -> Path:
    """A pipeline folder holding the support-triage example as it ships."""
    folder = data_dir / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    shipped = PROJECT_ROOT / "pipelines" / "support_triage.yaml"
    (folder / shipped.name).write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    return folder


async def start_one(client: Client, kind: str) -> str:
    """Start one run of ``kind`` (see `KINDS`); returns its workflow id."""
    queue = contract.DEFAULT_TASK_QUEUE
    request_id = secrets.token_hex(12)  # a request id's form: 24 hex digits
    if kind in {"document", "corrected"}:
        document = DocumentRequest(
            request_id=request_id, document=INVOICE.format(number=request_id), review="always"
        )
        return await start_run(
            client, document, task_queue=queue, pipeline=pipelines.named("documents")
        )
    if kind == "triage":
        ticket = DataRequest(request_id=request_id, input={"ticket": "My invoice is wrong."})
        return await start_run(client, ticket, task_queue=queue, pipeline=pipelines.named(TRIAGE))
    shapes: dict[str, tuple[str, dict[str, Any]]] = {
        "happy": ("Summarise the report", {}),
        "reviewed": ("Draft a reply", {"review": "always", "tenant": "acme"}),
        "retried": ("Throttled once [sim:status=429:times=1]", {}),
        "dead_letter": ("Always down [sim:status=503]", {"options": {"llm_max_attempts": 2}}),
    }
    message, fields = shapes[kind]
    request = PipelineRequest(request_id=request_id, user_message=message, **fields)
    return await start_run(client, request, task_queue=queue)


@dataclass
class Fleet:
    """The fleet's workflow ids by kind."""

    ids: dict[str, list[str]] = field(default_factory=dict)

    @property
    def every(self) -> list[str]:
        return [workflow_id for ids in self.ids.values() for workflow_id in ids]

    def kinds(self) -> dict[str, int]:
        return {kind: len(ids) for kind, ids in self.ids.items()}


async def start_fleet(client: Client, n: int) -> Fleet:
    """Start ``n`` runs of the mix `KINDS`, ``START_CONCURRENCY`` starts in flight."""
    gate = asyncio.Semaphore(START_CONCURRENCY)
    fleet = Fleet()

    async def one(kind: str) -> None:
        async with gate:
            workflow_id = await retrying(lambda: start_one(client, kind))
        fleet.ids.setdefault(kind, []).append(workflow_id)

    await asyncio.gather(*(one(kind) for kind in itertools.islice(itertools.cycle(KINDS), n)))
    return fleet


async def _correct(client: Client, workflow_id: str, signer: Signer) -> bool:
    """Approve a waiting document with its total corrected; False: not waiting yet."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        view = await handle.query(contract.QUERY_REVIEW_VIEW)
    except Exception:  # not waiting for a review yet: try again at the next poll
        return False
    if not view or "fields" not in view:
        return False
    fields = {**view["fields"], "total": "22.20"}
    decision = ReviewDecision(decision="approve", reviewer="carol", fields=fields)
    outcome = await submit_review(client, workflow_id, decision, signer=signer)
    return outcome.applied


async def drive(client: Client, fleet: Fleet, signer: Signer, timeout_s: float) -> float:
    """Review every run that waits (corrections for the ``corrected`` documents, approvals
    for the others) until the whole fleet has closed; returns the seconds it took.

    Raises:
        BenchError: the fleet did not close within ``timeout_s``.
    """
    began = time.monotonic()
    ours = set(fleet.every)
    to_correct = set(fleet.ids.get("corrected", []))
    approve = ReviewDecision(decision="approve", reviewer="rita")
    every_query = runs_query(CLOSED)
    while (closed := await count(client, every_query)) < len(ours):
        if time.monotonic() - began > timeout_s:
            raise BenchError(f"ledger fleet: {closed}/{len(ours)} closed after {timeout_s:.0f}s")
        waiting = [
            execution.id
            async for execution in client.list_workflows(waiting_for_review(), page_size=1000)
            if execution.id in ours
        ]
        for workflow_id in [w for w in waiting if w in to_correct]:
            if await _correct(client, workflow_id, signer):
                to_correct.discard(workflow_id)
        plain = [w for w in waiting if w not in fleet.ids.get("corrected", [])]
        if plain:
            await review_all(client, plain, approve, signer=signer)
        await asyncio.sleep(POLL_S)
    return time.monotonic() - began


async def _start_retrying(client: Client, kind: str) -> str:
    return await retrying(lambda: start_one(client, kind))


async def stream(
    client: Client, rate: float, seconds: float
) -> tuple[list[str], Counter[str], float]:
    """Start happy and retried runs at ``rate`` per second for ``seconds`` (each start on the
    clock, not after the last one answered); returns their ids, how many of each kind, and the
    seconds the starts took."""
    kinds: Counter[str] = Counter()
    tasks: list[asyncio.Task[str]] = []
    began = time.monotonic()
    for index in range(int(rate * seconds)):
        kind = "retried" if index % 10 == 9 else "happy"
        kinds[kind] += 1
        tasks.append(asyncio.create_task(_start_retrying(client, kind)))
        await asyncio.sleep(max(0.0, began + (index + 1) / rate - time.monotonic()))
    ids = list(await asyncio.gather(*tasks))
    return ids, kinds, time.monotonic() - began
