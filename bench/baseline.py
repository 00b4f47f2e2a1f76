"""The baseline: a bare workflow with as many trivial activities as our pipeline's happy path.

``AiOrchestrator`` with review ``never`` takes three steps (``fetch_prompt``, ``invoke_llm``,
``generate_embedding``), so ``BenchBaseline`` runs three activities that return at once, as a
hand-written workflow would, on a task queue of its own and with the same worker tuning. Ours
runs the inline ``fetch_prompt`` as a local activity: that is one of our optimizations, measured
against this baseline, not a reason to change it. What is left between the two is our
bookkeeping, payloads and the real activity clients: the orchestration overhead the benchmark is
after.

Workflow code only (the sandbox re-imports this module); its worker is ``bench.baseline_worker``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

BASELINE_WORKFLOW = "BenchBaseline"
BASELINE_TASK_QUEUE = "bench-baseline"
BASELINE_ACTIVITIES = ("bench_fetch", "bench_llm", "bench_embed")


@activity.defn(name="bench_fetch")
async def bench_fetch(request_id: str) -> str:
    """Trivial stand-in for fetch_prompt."""
    return request_id


@activity.defn(name="bench_llm")
async def bench_llm(prompt: str) -> str:
    """Trivial stand-in for invoke_llm."""
    return prompt


@activity.defn(name="bench_embed")
async def bench_embed(content: str) -> str:
    """Trivial stand-in for generate_embedding."""
    return content


@workflow.defn(name=BASELINE_WORKFLOW)
class BenchBaseline:
    """Three activities in a row, nothing else: what a hand-written workflow would cost."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, str]:
        value = str(request["request_id"])
        for name in BASELINE_ACTIVITIES:
            value = await workflow.execute_activity(
                name, value, result_type=str, start_to_close_timeout=timedelta(seconds=60)
            )
        return {"request_id": value, "state": "completed"}
