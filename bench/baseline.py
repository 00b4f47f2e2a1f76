"""The baseline: a bare workflow with as many trivial activities as our pipeline's happy path.

``AiOrchestrator`` with review ``never`` takes three steps (``fetch_prompt``, ``invoke_llm``,
``generate_embedding``), so ``BenchBaseline`` runs three activities that return at once, as a
hand-written workflow would, on a task queue of its own and with the same worker tuning. Ours
runs the inline ``fetch_prompt`` as a local activity: that is one of our optimizations, measured
against this baseline, not a reason to change it. What is left between the two is our
bookkeeping, payloads and the real activity clients: the orchestration overhead the benchmark is
after.

For the action count (``bench.actions``) the baseline also takes our two other paths the way a
hand-written workflow would, both off by default so the load phases run exactly the three
activities above:

- ``review: true`` in the input: after the LLM-like step it waits for the ``approve`` update
  (no validator, no timeout), then embeds;
- ``llm_failures: N``: the LLM-like activity fails its first N attempts with a retryable error
  and Temporal's default retry policy (first retry after 1 s) retries it.

Workflow code only (passed through the sandbox, like ours); its worker is
``bench.baseline_worker``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

BASELINE_WORKFLOW = "BenchBaseline"
BASELINE_TASK_QUEUE = "bench-baseline"
BASELINE_ACTIVITIES = ("bench_fetch", "bench_llm", "bench_embed")
BASELINE_APPROVE_UPDATE = "approve"


@activity.defn(name="bench_fetch")
async def bench_fetch(request_id: str) -> str:
    """Trivial stand-in for fetch_prompt."""
    return request_id


@activity.defn(name="bench_llm")
async def bench_llm(prompt: str, failures: int = 0) -> str:
    """Trivial stand-in for invoke_llm; its first ``failures`` attempts fail as a 429 would."""
    if activity.info().attempt <= failures:
        raise ApplicationError("rate limited (simulated 429)", type="RateLimited")
    return prompt


@activity.defn(name="bench_embed")
async def bench_embed(content: str) -> str:
    """Trivial stand-in for generate_embedding."""
    return content


@workflow.defn(name=BASELINE_WORKFLOW)
class BenchBaseline:
    """Three activities in a row, nothing else: what a hand-written workflow would cost."""

    def __init__(self) -> None:
        self._approved = False

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, str]:
        value = str(request["request_id"])
        failures = int(request.get("llm_failures", 0))
        for name in BASELINE_ACTIVITIES:
            # The same call as ever unless this run asks for failures, so the load phases'
            # commands and payloads do not change.
            args = [value, failures] if name == "bench_llm" and failures else [value]
            value = await workflow.execute_activity(
                name, args=args, result_type=str, start_to_close_timeout=timedelta(seconds=60)
            )
            if name == "bench_llm" and request.get("review"):
                await workflow.wait_condition(lambda: self._approved)
        return {"request_id": value, "state": "completed"}

    @workflow.update(name=BASELINE_APPROVE_UPDATE)
    def approve(self, reviewer: str) -> str:
        """A reviewer's approval: the run goes on to its last step."""
        self._approved = True
        return f"approved by {reviewer}"
