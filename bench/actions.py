"""Billable Temporal actions per run, as the server counts them (issue 16).

Temporal Cloud bills per action, and a namespace's rate limit is counted in actions per second,
so actions per run is what a run costs its user, whatever the machine. This phase runs ``k``
runs of each path for the baseline and for ours and reads the dev server's ``action`` counter
(``bench.server_metrics``) before and after each batch:

- ``happy``: review ``never`` (the baseline: its three activities);
- ``review``: review ``always``, then one approve through the ``submit_review`` update exactly
  as ``starter.py review`` sends it (``aiorch.ops.reviews.submit_review``: the round read from
  the run's ``AiReviewRound`` with a describe, which is not an action, then the update); the
  baseline waits for its ``approve`` update and gets one;
- ``retry``: the LLM call answers 429 once (ours: the simulator's ``[sim:status=429:times=1]``,
  then the ``retry_llm`` backoff; the baseline: its LLM stand-in fails once and Temporal's
  retry policy retries it).

What is counted and what is not:

- The counter is namespace-wide, so the batches run when nothing else runs on the server (this
  phase runs first, after the warm-up runs have closed) and one batch runs at a time. A count
  is read once it has stood still for longer than the server's publishing interval, so every
  action of a batch's runs is in it and none of the next batch's.
- The server's own namespace (``temporal_system``) is left out (label ``namespace``).
- The bench's own reads are not actions and so are not counted: visibility counts and lists,
  ``describe`` and ``fetch_history`` (how it sees that a run waits for its review) and the
  result of each run (a history long poll). It sends no query of its own.
- What a path's client sends is counted deliberately: the review path's update (the
  baseline's update), as the server counts them.
- Every action type the counter reports is billable. Markers appear as
  ``command_BatchMarkers``, one per workflow task that records any (a local activity and the
  ``workflow.patched`` markers of one task count once); the server's source mentions
  per-marker types for other pricing models, but server 1.32 emits none.

At most `IN_FLIGHT` runs of a batch run at once: ours heartbeats only when an LLM or embeddings
call takes over two seconds (``activities.heartbeat.HEARTBEAT_EVERY``), which a simulator that
answers at once never does unless the machine is saturated; a heartbeat is an action, so a
saturated batch would count them by chance. Every count is therefore a whole number per run,
and `ActionBatch.whole` says whether it was.

Then ours alone in two more lanes (issue 27), happy path: ``batch``, every run asking for the
provider's batch API (the worker groups `IN_FLIGHT` calls a batch, so each batch's runs fill
one group), and ``cached``, every run's message opening with the same 2,000-token prefix (the
simulator's prompt cache is primed with it first, so every measured run reads it). A batch
group is one ``LlmBatch`` workflow whose actions the group's runs share: they are counted from
its history by Temporal's pricing (its start, signals, timers, scheduled activities and their
retries), so the batch lane is reported per run of its own (a whole number), per group, and the
two together per run.

The paths, lanes and counts, and the phase's JSON, are in ``bench.action_counts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aiorch.ops.reviews import Signer, submit_review
from bench.action_counts import (
    HAPPY,
    IN_FLIGHT,
    LANES,
    PATHS,
    ActionBatch,
    LaneBatch,
    LaneSpec,
    PathSpec,
    format_count,
)
from bench.baseline import BASELINE_APPROVE_UPDATE
from bench.load import BASELINE, MESSAGE, OURS, Batch, BenchError, Target, retrying
from bench.server_metrics import difference, settled_actions
from workflows import contract
from workflows.llm.graph import State
from workflows.llm.prompt import SYSTEM_PROMPT
from workflows.payloads import ReviewDecision

Log = Callable[[str], None]

WAIT_POLL_S = 0.1
RUN_TIMEOUT_S = 120.0


async def _waits_for_review(client: Client, target: Target, run_id: str) -> bool:
    """Whether the run now waits for its review (read without queries: they are actions)."""
    handle = client.get_workflow_handle(run_id)
    if target is OURS:
        # Describe reads the run's current search attributes, the AiState visibility shows.
        described = await retrying(handle.describe)
        return bool(described.typed_search_attributes.get(contract.AI_STATE) == State.AWAIT_REVIEW)
    # The baseline has no state to show: it waits once its LLM step (the second activity)
    # has completed and its worker has nothing left to do.
    history = await retrying(handle.fetch_history)
    completed = sum(
        1 for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    last = history.events[-1].event_type
    return completed == 2 and last == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED


async def _approve(client: Client, target: Target, run_id: str, signer: Signer) -> None:
    """One approval the way each side's reviewer sends it (ours signed, as the CLI signs)."""
    if target is OURS:
        await submit_review(
            client, run_id, ReviewDecision(decision="approve", reviewer="bench"), signer=signer
        )
    else:
        handle = client.get_workflow_handle(run_id)
        await handle.execute_update(BASELINE_APPROVE_UPDATE, "bench", result_type=str)


async def _one_run(
    client: Client,
    target: Target,
    path: PathSpec,
    run_id: str,
    signer: Signer,
    lane: LaneSpec | None = None,
) -> None:
    """Start one run (in ``lane``, if given), drive it along ``path`` and check that it
    completed."""
    await retrying(
        lambda: target.start(
            client,
            run_id,
            path.review,
            llm_failures=path.llm_failures,
            lane=lane.lane if lane else None,
            prefix=lane.prefix if lane else "",
        )
    )
    if path.review == "always":
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not await _waits_for_review(client, target, run_id):
            if time.monotonic() >= deadline:
                raise BenchError(f"{run_id} did not reach its review in {RUN_TIMEOUT_S:g} s")
            await asyncio.sleep(WAIT_POLL_S)
        await _approve(client, target, run_id, signer)
    raw = await asyncio.wait_for(retrying(client.get_workflow_handle(run_id).result), RUN_TIMEOUT_S)
    if not target.completed(raw):
        raise BenchError(f"{run_id} ended without completing: {raw!r:.200}")


async def run_path(
    client: Client,
    target: Target,
    path: PathSpec,
    k: int,
    signer: Signer,
    lane: LaneSpec | None = None,
) -> tuple[int, str | None, list[str]]:
    """``k`` runs of ``path`` (in ``lane``), at most `IN_FLIGHT` at once; (failed runs, first
    error, the runs' ids)."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    ids = Batch.new(k).ids

    async def one(run_id: str) -> str | None:
        async with gate:
            try:
                await _one_run(client, target, path, run_id, signer, lane)
            except Exception as err:  # any failure of one run: the others still count
                # A failed run fails the bench at the end (bench.run counts it). One left
                # running would go on making actions into the next batch's count: end it
                # (terminating is not an action).
                with contextlib.suppress(Exception):
                    await client.get_workflow_handle(run_id).terminate("bench: run failed")
                return f"{type(err).__name__}: {err}"
            return None

    errors = [e for e in await asyncio.gather(*(one(i) for i in ids)) if e]
    return len(errors), (errors[0] if errors else None), ids


async def group_actions(client: Client, since: datetime) -> tuple[int, int]:
    """The ``LlmBatch`` workflows started since ``since`` and their billable actions, counted
    from their histories by Temporal's pricing: the start, each signal, timer and scheduled
    activity, and each activity retry."""
    query = (
        f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}' "
        f"AND StartTime >= '{since.isoformat()}'"
    )
    billed = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        EventType.EVENT_TYPE_TIMER_STARTED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    }
    groups = actions = 0
    async for found in client.list_workflows(query):
        groups += 1
        history = await retrying(client.get_workflow_handle(found.id).fetch_history)
        for event in history.events:
            if event.event_type in billed:
                actions += 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                actions += event.activity_task_started_event_attributes.attempt - 1
    return groups, actions


async def prime_prompt_cache(simulator_url: str, lane: LaneSpec) -> None:
    """Have the simulator see the lane's shared prefix once, as the pipeline sends it (the
    system prompt, then the message), so every measured run reads it from the cache."""
    body = {
        "model": "sim-large",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": lane.prefix + MESSAGE},
        ],
    }
    request = urllib.request.Request(
        f"{simulator_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    await asyncio.to_thread(lambda: urllib.request.urlopen(request, timeout=30).close())


async def measure_lanes(
    client: Client,
    metrics_url: Callable[[], str],
    k: int,
    log: Log,
    signer: Signer,
    simulator_url: str,
) -> dict[str, LaneBatch]:
    """``k`` runs of ours in each of `LANES` (happy path): {lane: LaneBatch}. Nothing else may
    run on the server meanwhile (see the module docstring)."""
    url = metrics_url()
    lanes: dict[str, LaneBatch] = {}
    for lane in LANES:
        if lane.prefix_words:
            await prime_prompt_cache(simulator_url, lane)
        before = await settled_actions(url)
        since = datetime.now(UTC) - timedelta(seconds=1)
        began = time.monotonic()
        failed, first_error, ids = await run_path(client, OURS, HAPPY, k, signer, lane)
        seconds = time.monotonic() - began
        after = await settled_actions(url)
        groups, grouped = await group_actions(client, since)
        batch = ActionBatch(
            OURS.name, lane.name, k, failed, difference(before, after), seconds, first_error
        )
        lanes[lane.name] = LaneBatch(lane, batch, ids, groups, grouped)
        own = lanes[lane.name].per_run_own
        shared = f", own {format_count(own)}/run + {groups} group(s) of {grouped} actions"
        log(
            f"actions lane {lane.name} ours: {format_count(batch.per_run)}/run"
            f"{shared if groups else ''} ({k} runs in {seconds:.1f}s, failed {failed})"
        )
        if first_error:
            log(f"  first failure: {first_error[:300]}")
    return lanes


async def measure(
    client: Client, metrics_url: Callable[[], str], k: int, log: Log, signer: Signer
) -> tuple[dict[str, dict[str, ActionBatch]], dict[str, list[str]]]:
    """Every path, baseline then ours, ``k`` runs each: ({path: {target: ActionBatch}}, {path:
    our runs' ids}).

    ``signer`` signs our reviews (the local stack turns reviewer authentication on).

    ``metrics_url`` gives the dev server's ``/metrics`` URL. Nothing else may run on the
    server meanwhile (see the module docstring).
    """
    url = metrics_url()
    before = await settled_actions(url)
    batches: dict[str, dict[str, ActionBatch]] = {}
    ours_ids: dict[str, list[str]] = {}
    for path in PATHS:
        batches[path.name] = {}
        for target in (BASELINE, OURS):
            began = time.monotonic()
            failed, first_error, ids = await run_path(client, target, path, k, signer)
            seconds = time.monotonic() - began
            after = await settled_actions(url)
            batch = ActionBatch(
                target.name, path.name, k, failed, difference(before, after), seconds, first_error
            )
            before = after
            batches[path.name][target.name] = batch
            if target is OURS:
                ours_ids[path.name] = ids
            whole = "" if batch.whole else " (not whole per run)"
            log(
                f"actions {path.name} {target.name}: {format_count(batch.per_run)}/run{whole} "
                f"({k} runs in {seconds:.1f}s, failed {failed})"
            )
            if first_error:
                log(f"  first failure: {first_error[:300]}")
    return batches, ours_ids
