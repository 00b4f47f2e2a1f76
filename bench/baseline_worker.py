"""The baseline's worker: ``python -m bench.baseline_worker``.

It reads the same environment as ``worker.py``, takes the same tuning and runs its workflow on
the same runner (the SDK's sandbox with the workflow's own module passed through, as ours passes
the ``workflows`` package), so the only difference from our worker is what the workflow and its
activities do. The bench runs it as a process of its own, so its CPU and memory are measured on
their own.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from aiorch.worker.options import tuning_options
from aiorch_runtime.config import Settings, load_settings
from aiorch_runtime.signals import stop_event
from aiorch_runtime.telemetry import worker_runtime
from aiorch_runtime.temporal import connect
from bench import baseline
from bench.baseline import BASELINE_TASK_QUEUE, BenchBaseline, bench_embed, bench_fetch, bench_llm

READY_LINE = "baseline worker started"


def build_baseline_worker(client: Client, settings: Settings) -> Worker:
    """A worker for the baseline with the same tuning as ``worker.py``."""
    return Worker(
        client,
        task_queue=BASELINE_TASK_QUEUE,
        workflows=[BenchBaseline],
        activities=[bench_fetch, bench_llm, bench_embed],
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(baseline.__name__)
        ),
        **tuning_options(settings),
    )


async def _serve(settings: Settings) -> None:
    # The same client and metrics runtime as worker.py, so both pay the same telemetry cost.
    client = await connect(settings, runtime=worker_runtime(settings))
    stop = stop_event()
    async with build_baseline_worker(client, settings):
        print(f"{READY_LINE}: task queue {BASELINE_TASK_QUEUE!r}", flush=True)
        await stop.wait()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_serve(load_settings()))


if __name__ == "__main__":
    main()
