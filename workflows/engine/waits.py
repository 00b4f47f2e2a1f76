"""The engine's waits around a model call: back off before a retry (or give up), wait for the
model's shared capacity, and wait for the provider's batch to answer.

Each is the handler of an engine state (``Role.RETRY``, ``Role.CAPACITY``, ``Role.BATCH``),
as functions over a run (``Context``). Workflow code, passed through the sandbox; time and
randomness come from ``workflow.*``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

import workflows.engine.commands as commands
from workflows.engine.backoff import full_jitter_delay
from workflows.engine.graph import Event
from workflows.engine.pipeline import Context


async def retry(ctx: Context[Any, Any]) -> None:
    """Back off before the step tries again, or dead-letter the run once the plan's
    attempts are spent."""
    run, plan = ctx.run, ctx.policy
    if run.consecutive_failures >= plan.max_attempts:
        step = ctx.graph.target_of(run.state, Event.BACKOFF_ELAPSED) or run.state
        refused = await ctx.dead_letter(step)
        ctx.move(Event.EXHAUSTED, detail=f"gave up after {run.attempts} attempts{refused}")
        return
    delay = full_jitter_delay(
        run.consecutive_failures,
        initial=timedelta(seconds=plan.backoff_initial_s),
        cap=timedelta(seconds=plan.backoff_max_s),
        unit_random=workflow.random().random(),
        at_least=timedelta(seconds=run.retry_after_s) if run.retry_after_s else None,
    )
    await workflow.sleep(delay, summary=f"{run.state} backoff {delay.total_seconds():.1f}s")
    ctx.move(Event.BACKOFF_ELAPSED, detail=f"waited {delay.total_seconds():.2f}s")


async def await_capacity(ctx: Context[Any, Any]) -> None:
    """Wait on a timer (no call, no attempt, no activity slot) until the model's shared
    capacity should cover the call, then ask again."""
    run = ctx.run
    delay = timedelta(seconds=run.capacity_wait_s or 0.0)
    await workflow.sleep(delay, summary=f"{run.state} {delay.total_seconds():.1f}s")
    run.capacity_wait_s = None
    ctx.move(Event.CAPACITY_READY, detail=f"waited {delay.total_seconds():.2f}s for capacity")


async def await_batch(ctx: Context[Any, Any]) -> None:
    """Wait (no timer, no poll, no activity slot) for the provider's batch to answer the
    run's call, then hand the outcome back to the step that made it."""
    run = ctx.run
    outcome = await commands.await_batch(run, ctx.policy)
    run.batch_item, run.batch_result = None, outcome
    done = "answered" if outcome.outcome == "answered" else "failed"
    ctx.move(Event.BATCH_DONE, detail=f"batch {run.batch_id}: {done}")
