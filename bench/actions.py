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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aiorch.ops.reviews import Signer, submit_review
from bench.baseline import BASELINE_APPROVE_UPDATE
from bench.load import BASELINE, OURS, Batch, BenchError, Target, retrying
from bench.server_metrics import difference, settled_actions
from workflows import contract
from workflows.llm.graph import State
from workflows.payloads import ReviewDecision

Log = Callable[[str], None]

IN_FLIGHT = 25  # runs of a batch in flight at once (see the module docstring)
WAIT_POLL_S = 0.1
RUN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class PathSpec:
    """How the runs of one path are started and driven."""

    name: str
    review: str
    llm_failures: int
    description: str


PATHS: tuple[PathSpec, ...] = (
    PathSpec("happy", "never", 0, "review never"),
    PathSpec("review", "always", 0, "one approve (an update, as starter.py review sends it)"),
    PathSpec("retry", "never", 1, "one 429 from the LLM, then success"),
)


@dataclass(frozen=True)
class ActionBatch:
    """One batch: ``runs`` runs of one target on one path and the actions the server counted."""

    target: str
    path: str
    runs: int
    failed: int
    counted: dict[str, int]  # total per action type that moved during the batch
    seconds: float
    first_error: str | None = None

    @property
    def per_run(self) -> float:
        """Billable actions per run."""
        return sum(self.counted.values()) / self.runs

    @property
    def per_run_by_type(self) -> dict[str, float]:
        """Billable actions per run, by action type."""
        return {kind: n / self.runs for kind, n in self.counted.items()}

    @property
    def whole(self) -> bool:
        """Whether every action type counted a whole number per run (no chance actions)."""
        return all(n % self.runs == 0 for n in self.counted.values())

    def as_dict(self, price_per_million_actions: float) -> dict[str, Any]:
        """The JSON form, with the cost per million runs at the given price."""
        return {
            "runs": self.runs,
            "failed": self.failed,
            "seconds": self.seconds,
            "per_run": self.per_run,
            "per_run_by_type": self.per_run_by_type,
            "whole_per_run": self.whole,
            "counted_totals": self.counted,
            "cost_per_million_runs": self.per_run * price_per_million_actions,
            "first_error": self.first_error,
        }


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
    client: Client, target: Target, path: PathSpec, run_id: str, signer: Signer
) -> None:
    """Start one run, drive it along ``path`` and check that it completed."""
    await retrying(
        lambda: target.start(client, run_id, path.review, llm_failures=path.llm_failures)
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
    client: Client, target: Target, path: PathSpec, k: int, signer: Signer
) -> tuple[int, str | None]:
    """``k`` runs of ``path``, at most `IN_FLIGHT` at once; (failed runs, first error)."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(run_id: str) -> str | None:
        async with gate:
            try:
                await _one_run(client, target, path, run_id, signer)
            except Exception as err:  # any failure of one run: the others still count
                # A failed run fails the bench at the end (bench.run counts it). One left
                # running would go on making actions into the next batch's count: end it
                # (terminating is not an action).
                with contextlib.suppress(Exception):
                    await client.get_workflow_handle(run_id).terminate("bench: run failed")
                return f"{type(err).__name__}: {err}"
            return None

    errors = [e for e in await asyncio.gather(*(one(i) for i in Batch.new(k).ids)) if e]
    return len(errors), (errors[0] if errors else None)


async def measure(
    client: Client, metrics_url: Callable[[], str], k: int, log: Log, signer: Signer
) -> dict[str, dict[str, ActionBatch]]:
    """Every path, baseline then ours, ``k`` runs each: {path: {target: ActionBatch}}.

    ``signer`` signs our reviews (the local stack turns reviewer authentication on).

    ``metrics_url`` gives the dev server's ``/metrics`` URL. Nothing else may run on the
    server meanwhile (see the module docstring).
    """
    url = metrics_url()
    before = await settled_actions(url)
    batches: dict[str, dict[str, ActionBatch]] = {}
    for path in PATHS:
        batches[path.name] = {}
        for target in (BASELINE, OURS):
            began = time.monotonic()
            failed, first_error = await run_path(client, target, path, k, signer)
            seconds = time.monotonic() - began
            after = await settled_actions(url)
            batch = ActionBatch(
                target.name, path.name, k, failed, difference(before, after), seconds, first_error
            )
            before = after
            batches[path.name][target.name] = batch
            whole = "" if batch.whole else " (not whole per run)"
            log(
                f"actions {path.name} {target.name}: {format_count(batch.per_run)}/run{whole} "
                f"({k} runs in {seconds:.1f}s, failed {failed})"
            )
            if first_error:
                log(f"  first failure: {first_error[:300]}")
    return batches


def format_count(value: float) -> str:
    """A per-run count: whole numbers without decimals, anything else with two."""
    return f"{value:.0f}" if value == round(value) else f"{value:.2f}"


def type_order(action_type: str) -> tuple[int, str]:
    """Sort key for action types: the start, the workflow's commands, then what clients and
    workers add (activity retries, queries, signals, heartbeats, updates)."""
    if action_type == "grpc_StartWorkflowExecution":
        return (0, action_type)
    if action_type.startswith("command_"):
        return (1, action_type)
    return (2, short_type(action_type))


def short_type(action_type: str) -> str:
    """The server's action type without its ``grpc_``/``command_``/``message_`` prefix."""
    for prefix in ("grpc_", "command_", "message_"):
        if action_type.startswith(prefix):
            return action_type[len(prefix) :]
    return action_type


def report_json(
    batches: dict[str, dict[str, ActionBatch]], k: int, price_per_million_actions: float
) -> dict[str, Any]:
    """The phase's JSON: per path, each side's counts and cost, and ours/baseline."""
    paths: dict[str, Any] = {}
    for spec in PATHS:
        sides = batches[spec.name]
        base, ours = sides["baseline"], sides["ours"]
        paths[spec.name] = {
            "description": spec.description,
            "baseline": base.as_dict(price_per_million_actions),
            "ours": ours.as_dict(price_per_million_actions),
            "ratio": ours.per_run / base.per_run if base.per_run else None,
        }
    return {
        "k": k,
        "price_per_million_actions": price_per_million_actions,
        "counter": "action",
        "namespace": "default",
        "in_flight": IN_FLIGHT,
        "paths": paths,
    }


def lost_failed(batches: dict[str, dict[str, ActionBatch]]) -> int:
    """Runs that failed in any batch."""
    return sum(b.failed for sides in batches.values() for b in sides.values())
