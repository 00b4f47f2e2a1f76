"""The replay lab's driver: for each selected recorded run, a baseline fork (the original's own
settings) and a candidate fork (the candidate's variant), both from the same state, compared
with the original (`run_forks`).

Forks run on the workers' lab task queue (``LAB_TASK_QUEUE``), as the lab's workflow class
(``workflows.engine.lab``): seeded with the original's recorded outputs up to the fork state,
dry where they would write, ended where they would wait for a person, spending as the lab's
tenant. A fork's workflow id is its request id (24 hex digits, derived from the lab, the
original and the kind, so a lab run names its forks alike each time); its memo links it to
its original. The originals are only read.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Final

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError

from aiorch.ops.lab.fork_requests import fork_request
from aiorch.ops.lab.outcomes import ForkKind, ForkOutcome, LabRun, RunComparison
from aiorch.ops.lab.recorded import NotForkable, Original, model_use, read_original
from aiorch.ops.ledger import project
from aiorch.ops.results import run_converter
from aiorch.ops.signing import requester_key_from_settings
from aiorch_runtime.config import Settings, lab_queue
from workflows.engine.forks import ForkInput, ForkResult
from workflows.payloads import Variant

# Comparisons under way at once (each is two forks) without a spend cap; with one they run
# one at a time, so the cap is overshot by one run's forks at most.
CONCURRENT_RUNS: Final = 4
# A fork that no lab worker takes up ends here instead of holding the lab run forever.
FORK_TIMEOUT: Final = timedelta(minutes=30)
# A Temporal run id (a UUID); anything else is not looked up.
_RUN_ID: Final = re.compile(r"^[0-9A-Fa-f-]{8,64}$")
_LOOKUP_CHUNK: Final = 100

Progress = Callable[[str], None]


def fork_id(lab_id: str, run_id: str, kind: ForkKind) -> str:
    """The fork's workflow and request id: 24 hex digits (``REQUEST_ID_PATTERN``)."""
    return hashlib.sha256(f"{lab_id}\n{run_id}\n{kind}".encode()).hexdigest()[:24]


async def run_forks(
    client: Client,
    settings: Settings,
    run_ids: Sequence[str],
    *,
    from_state: str,
    candidate: Variant,
    lab_id: str,
    spend_cap_usd: float | None = None,
    progress: Progress | None = None,
) -> LabRun:
    """Fork each of ``run_ids`` (recorded runs of the production task queue) from
    ``from_state``, as a baseline and as ``candidate``, and compare them with the original.

    Runs that are not forked go to ``LabRun.skipped`` with why: not found, not closed, never
    reached ``from_state``, not forkable, or the forks' summed cost reached ``spend_cap_usd``
    (no fork starts after that; with a cap, runs are forked one at a time). ``progress`` gets
    a line as each fork starts and ends.

    Raises:
        ValueError: the candidate asks for another version of a pipeline file (not supported
            by forks yet), or ``TEMPORAL_TASK_QUEUE`` holds a quote or a backslash.
        temporalio.service.RPCError: visibility could not be asked.
        ConfigError: ``REQUESTER_KEY`` is set but unusable.
    """
    if candidate.pipeline_version is not None:
        raise ValueError("a candidate's pipeline_version is not supported by forks yet")
    say = progress or (lambda line: None)
    found, still_open = await _find(client, settings.temporal_task_queue, run_ids)
    skipped: dict[str, str] = {}
    comparisons: dict[str, RunComparison] = {}
    spent = 0.0
    slots = asyncio.Semaphore(CONCURRENT_RUNS if spend_cap_usd is None else 1)
    lab = _Lab(client, settings, from_state, candidate, lab_id, say)

    async def compare(run_id: str, workflow_id: str) -> None:
        nonlocal spent
        async with slots:
            if spend_cap_usd is not None and spent >= spend_cap_usd:
                skipped[run_id] = f"the spend cap (${spend_cap_usd:g}) was reached"
                return
            try:
                original = await read_original(client, workflow_id, run_id, from_state)
            except NotForkable as why:
                skipped[run_id] = str(why)
                return
            comparison = await lab.compare(original)
            spent += comparison.baseline.use.cost_usd + comparison.candidate.use.cost_usd
            comparisons[run_id] = comparison

    tasks = []
    for run_id in dict.fromkeys(run_ids):
        if run_id in still_open:
            skipped[run_id] = "not closed (a fork needs a run that ended)"
        elif run_id not in found:
            skipped[run_id] = "not found (no run of this task queue has that run id)"
        else:
            tasks.append(compare(run_id, found[run_id]))
    await asyncio.gather(*tasks)
    return LabRun(
        lab_id=lab_id,
        select="",
        from_state=from_state,
        candidate=candidate,
        comparisons=[comparisons[r] for r in dict.fromkeys(run_ids) if r in comparisons],
        skipped={r: skipped[r] for r in run_ids if r in skipped},
        spend_cap_usd=spend_cap_usd,
    )


async def _find(
    client: Client, task_queue: str, run_ids: Sequence[str]
) -> tuple[dict[str, str], set[str]]:
    """Each closed run's workflow id by run id, and the run ids of runs still open."""
    found: dict[str, str] = {}
    still_open: set[str] = set()
    wanted = sorted({r for r in run_ids if _RUN_ID.match(r)})
    if any(character in task_queue for character in "'\"\\"):
        raise ValueError("TEMPORAL_TASK_QUEUE holds a quote or a backslash: no query can name it")
    for start in range(0, len(wanted), _LOOKUP_CHUNK):
        listed = ", ".join(f"'{r}'" for r in wanted[start : start + _LOOKUP_CHUNK])
        query = f"RunId IN ({listed}) AND TaskQueue = '{task_queue}'"
        async for execution in client.list_workflows(query):
            if execution.status == WorkflowExecutionStatus.RUNNING:
                still_open.add(execution.run_id)
            else:
                found[execution.run_id] = execution.id
    return found, still_open


class _Lab:
    """One lab run's forks: how they are started and read back."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        from_state: str,
        candidate: Variant,
        lab_id: str,
        say: Progress,
    ) -> None:
        self.client, self.from_state, self.candidate = client, from_state, candidate
        self.lab_id, self.say = lab_id, say
        self.queue = lab_queue(settings.temporal_task_queue, settings.lab_task_queue)
        self.settings, self.tenant = settings, settings.lab_tenant
        self.key = requester_key_from_settings(settings)

    async def compare(self, original: Original) -> RunComparison:
        """The original and its two forks, run side by side."""
        baseline, candidate = await asyncio.gather(
            self.fork(original, "baseline"), self.fork(original, "candidate")
        )
        return RunComparison(
            pipeline=original.pipeline,
            from_state=self.from_state,
            original=original.outcome,
            baseline=baseline,
            candidate=candidate,
        )

    async def fork(self, original: Original, kind: ForkKind) -> ForkOutcome:
        """Start one fork of ``original``, wait for it, and read how it did."""
        workflow_id = fork_id(self.lab_id, original.run_id, kind)
        fork = ForkInput(
            request=fork_request(
                original.request, original.workflow_type, workflow_id, self.settings, self.key
            ),
            lab_id=self.lab_id,
            original_workflow_id=original.workflow_id,
            original_run_id=original.run_id,
            from_state=self.from_state,
            kind=kind,
            variant=self.candidate if kind == "candidate" else None,
            recorded=original.recorded,
            tenant=self.tenant,
            assignment=original.assignment,
        )
        memo = {
            "lab_id": self.lab_id,
            "kind": kind,
            "original_workflow_id": original.workflow_id,
            "original_run_id": original.run_id,
            "from_state": self.from_state,
        }
        model = self.candidate.model if kind == "candidate" else None
        failed = ForkOutcome(kind=kind, workflow_id=workflow_id, state="unknown")
        try:
            handle = await self.client.start_workflow(
                original.workflow_type,
                fork,
                id=workflow_id,
                task_queue=self.queue,
                result_type=ForkResult,
                memo=memo,
                execution_timeout=FORK_TIMEOUT,
            )
        except RPCError as err:
            self.say(f"{kind} fork of {original.run_id} could not start: {err.message}")
            return failed.model_copy(update={"error": f"not started: {err.message}"})
        self.say(f"started {kind} fork {workflow_id} of {original.run_id}")
        run_id = handle.result_run_id
        try:
            result = await handle.result()
        except WorkflowFailureError as err:
            self.say(f"{kind} fork {workflow_id} failed: {err.cause}")
            return failed.model_copy(update={"run_id": run_id, "error": str(err.cause)})
        history = await handle.fetch_history()
        projection = await project(
            workflow_id, run_id or "", history.events, run_converter(self.client, workflow_id)
        )
        self.say(f"{kind} fork {workflow_id} ended in {result.state}")
        return ForkOutcome(
            kind=kind,
            workflow_id=workflow_id,
            run_id=run_id,
            state=result.state,
            model=result.model or model,
            text=result.text,
            fields=result.fields,
            problems=result.problems,
            needs_review=result.needs_review,
            waits=result.waits,
            use=model_use(projection, history.events[0].event_time.ToDatetime()),
            error=result.error,
        )
