"""The model call as a step any pipeline can use: one ``invoke_llm`` attempt, and what the run
does with its outcome (an answer, a failed call, a wait for the model's shared capacity, a call
the budget would not allow, or a call that went into the provider's batch).

Exactly one attempt per call: retries are the graph's retry state (``retry_edges``), so each
attempt, its error and its backoff are visible in history and in ``status.attempts``; the
capacity, budget and batch waits are the engine's (``capacity_edges``, ``budget_edges``,
``batch_edges``). An attempt counts only once a call is made: waiting for capacity or a budget
spends none. The pipeline says what an answer leads to (``Answered``).

The lane (docs/cost.md): a call is made synchronously, or through the provider's batch API
(about half the price, answered within 24 h), as the run's plan says, unless the pipeline's
step names one. A batched call's ``invoke_llm`` comes back once its batch is submitted; the run
waits in the batch state, and the answer (or the failure) comes back to this step, which takes
it up as it would a synchronous call's.

A step may name its own priority for its calls (a step whose answer can wait: 5), never more
urgent than its run's (``step_priority``), so a pipeline cannot lift a run past what its
tenant may ask for (``TENANT_MAX_PRIORITY``).

Spill-over (docs/capacity.md): a synchronous call the model's shared capacity sends back to
wait longer than the plan's ``spill_after_s`` (a batch-eligible run, ``SPILL_OVER=on``) is made
again at once in the batch lane, as the same attempt, instead of waiting; the run then waits in
the batch state as any batched call's does. Behind the ``spill-over`` patch, asked only when a
call spills, so a run that does not spill issues the commands it always did.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
import workflows.engine.budgets as budgets
import workflows.engine.commands as commands
import workflows.errors as errors
from workflows.engine.graph import Event, Graph
from workflows.engine.pipeline import Context
from workflows.payloads import (
    DEFAULT_PRIORITY,
    CallFailure,
    Lane,
    LlmCallInput,
    LlmCallResult,
    PromptPlan,
    RunCore,
)

SPILL_OVER_PATCH = "spill-over"

Answered = Callable[[Context[Any, Any], LlmCallResult], None]
"""What the pipeline does with an answer (the attempt is recorded): it moves the run."""


def lane_for(graph: Graph, state: str, asked: Lane) -> Lane:
    """The lane of a call made in ``state``: the one ``asked`` for, but synchronous where the
    graph has no batch state for the step to wait in (``batch_edges``)."""
    if asked == "batch" and graph.target_of(state, Event.BATCH_SUBMITTED) is None:
        return "sync"
    return asked


def step_priority(run: int | None, step: int | None) -> int | None:
    """The priority of a step's calls: the run's, or the step's own where it names one, but
    never more urgent than the run's (none counts as the default)."""
    if step is None:
        return run
    return max(step, DEFAULT_PRIORITY if run is None else run)


def choose_model(run: RunCore[Any], plan: PromptPlan) -> str:
    """The primary model, or the fallback after ``fallback_after`` failures in a row."""
    if plan.fallback_model and run.consecutive_failures >= plan.fallback_after:
        return plan.fallback_model
    return plan.model


async def call(
    ctx: Context[Any, Any],
    attempt: int,
    output_schema: dict[str, Any] | None = None,
    *,
    lane: Lane = "sync",
    spilled: bool = False,
    version: str = "",
    priority: int | None = None,
) -> LlmCallResult:
    """``invoke_llm``: exactly one attempt, made once the run's budgets and the model's shared
    capacity allow it; else the result says why not (``outcome``) and no call was made.
    ``output_schema``: the JSON Schema of the object the reply must be (None: the contract's
    ``LlmReply``). ``lane`` ``batch``: the call goes into the provider's batch API, and the
    activity comes back once its batch is submitted (``batched``), within the plan's
    ``batch_queue_s``; ``spilled``: it does so because the synchronous call would have waited
    past the plan's ``spill_after_s``. ``version``: the step's version, part of the result
    cache's key. ``priority``: the step's own (``step_priority``)."""
    run, plan = ctx.run, ctx.plan
    model = choose_model(run, plan)
    urgency = step_priority(plan.priority, priority)
    info = workflow.info()
    request = LlmCallInput(
        workflow_id=info.workflow_id,
        chain_id=info.first_execution_run_id,
        system_prompt=plan.system_prompt,
        user_prompt=plan.user_prompt,
        input_ref=plan.input_ref,
        input_sha256=plan.input_sha256,
        model=model,
        attempt=attempt,
        temperature=plan.temperature,
        feedback=list(run.feedback),
        corrective=run.corrective_next,
        max_reply_chars=plan.max_reply_chars,
        output_schema=output_schema,
        tenant=plan.tenant,
        priority=urgency,
        budget_usd=plan.budget_usd,
        spent_usd=run.cost_usd,
        budget_approved=run.budget_approved,
        lane=lane,
        spilled=spilled,
        batch_wait_s=plan.batch_wait_s,
        result_cache=plan.result_cache,
        version=version,
    )
    if lane == "batch":
        # Completed by the batch's workflow once submitted: no heartbeats meanwhile.
        return await commands.execute(
            contract.ACTIVITY_INVOKE_LLM,
            request,
            LlmCallResult,
            timeout=timedelta(seconds=plan.batch_queue_s),
            retry=activity_policy.SINGLE_ATTEMPT,
            summary=f"invoke_llm: attempt {attempt} on {model}, batch lane",
        )
    return await commands.execute(
        contract.ACTIVITY_INVOKE_LLM,
        request,
        LlmCallResult,
        timeout=timedelta(seconds=plan.llm_timeout_s + 15),
        heartbeat=activity_policy.HEARTBEAT_TIMEOUT,
        retry=activity_policy.SINGLE_ATTEMPT,
        summary=f"invoke_llm: attempt {attempt} on {model}",
        priority=urgency,
    )


async def invoke(
    ctx: Context[Any, Any],
    answered: Answered,
    output_schema: dict[str, Any] | None = None,
    *,
    lane: Lane | None = None,
    version: str = "",
    priority: int | None = None,
) -> None:
    """The step's handler: one attempt (or the outcome of the run's batched one, when its
    batch answered), then the run moves as its outcome says. ``lane``: the step's own lane
    (None: the plan's; synchronous in a graph without a batch state, `lane_for`);
    ``version``: the step's version (a change that alters what a reply means, for the result
    cache); ``priority``: the step's own for its calls (``step_priority``)."""
    run = ctx.run
    if run.batch_result is not None:
        reply, run.batch_result = run.batch_result, None
        await _take_up(ctx, answered, reply, run.attempts)
        return
    attempt = run.attempts + 1
    asked = lane or ctx.plan.lane
    spilled = ""
    try:
        reply = await call(
            ctx, attempt, output_schema, lane=asked, version=version, priority=priority
        )
        if spills_over(ctx, reply, asked):
            spilled = f"spilled over a {reply.wait_s or 0.0:.2f}s wait for capacity: "
            reply = await call(
                ctx,
                attempt,
                output_schema,
                lane="batch",
                spilled=True,
                version=version,
                priority=priority,
            )
    except ActivityError as err:
        if activity_policy.cancelled(err):
            run.attempts = attempt
            raise
        failed(ctx, activity_policy.failure_of(err), attempt)
        return
    await _take_up(ctx, answered, reply, attempt, spilled=spilled)


def spills_over(ctx: Context[Any, Any], reply: LlmCallResult, lane: Lane) -> bool:
    """True when the synchronous call that got ``reply`` takes the batch lane instead of
    waiting: the capacity store would have it wait longer than the plan's ``spill_after_s``
    and the step has a batch state to wait in (``lane_for``). The patch is asked last, so only
    a run that spills records its marker."""
    after: float | None = ctx.plan.spill_after_s
    return (
        reply.outcome == "wait"
        and lane == "sync"
        and after is not None
        and (reply.wait_s or 0.0) > after
        and lane_for(ctx.graph, ctx.run.state, "batch") == "batch"
        and workflow.patched(SPILL_OVER_PATCH)
    )


async def _take_up(
    ctx: Context[Any, Any],
    answered: Answered,
    reply: LlmCallResult,
    attempt: int,
    *,
    spilled: str = "",
) -> None:
    """Move the run as ``reply``, the outcome of attempt ``attempt``, says; ``spilled``: why
    the call went into a batch (spill-over), the start of the transition's detail."""
    run = ctx.run
    if reply.outcome == "wait":
        must_wait(ctx, reply)
    elif reply.outcome == "over_budget":
        await budgets.over_budget(ctx, reply.budget or "a budget")
    elif reply.outcome == "batched":
        run.attempts = attempt
        run.model = reply.model
        run.batch_item, run.batch_id = reply.batch_item, reply.batch_id
        detail = f"{spilled}in batch {reply.batch_id} on {reply.model}"
        ctx.move(Event.BATCH_SUBMITTED, detail=detail)
    elif reply.outcome == "failed":
        unknown = CallFailure(error=f"{errors.LLM_RETRYABLE}: no answer", type=errors.LLM_RETRYABLE)
        failed(ctx, reply.failure or unknown, attempt)
    else:
        run.attempts = attempt
        run.cost_usd += reply.cost_usd or 0.0
        run.model = reply.model
        run.consecutive_failures = 0
        run.corrective_next = False
        answered(ctx, reply)


def failed(ctx: Context[Any, Any], failure: CallFailure, attempt: int) -> None:
    """A call that failed: a permanent error ends the run, anything else goes to the retry
    state (a malformed reply is retried with a corrective instruction)."""
    run = ctx.run
    run.attempts = attempt
    detail = ctx.set_error(failure.error)
    run.retry_after_s = failure.retry_after_s
    run.corrective_next = failure.type == errors.LLM_MALFORMED_REPLY
    if failure.permanent:
        ctx.move(Event.PERMANENT_ERROR, detail=detail)
    else:
        run.consecutive_failures += 1
        ctx.move(Event.RETRYABLE_ERROR, detail=detail)


def must_wait(ctx: Context[Any, Any], reply: LlmCallResult) -> None:
    """No capacity for the call now: wait in the capacity state, no attempt spent."""
    ctx.run.capacity_wait_s = reply.wait_s or 0.0
    ctx.move(
        Event.CAPACITY_WAIT,
        detail=f"no capacity on {reply.model} for {ctx.run.capacity_wait_s:.2f}s",
    )
