"""Workflow layer fixtures: the real ``AiOrchestrator`` on Temporal's time-skipping test server,
every activity a scripted double (the harness is ``tests.support.orchestration``; how the
server behaves, which it relies on, is in ``tests.support.time_skipping``).

* ``env``: one time-skipping server for the session, with the project's data converter.
* ``orch``: per test, a fresh task queue, fresh scripted activities and a running worker; open
  runs are terminated at teardown so no test leaves work behind for the shared server.
* ``private_orch``: the same on a server of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from tests.support.orchestration import Orchestration, running_orchestration
from tests.support.time_skipping import time_skipping_server


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping server for the whole layer."""
    async with time_skipping_server() as environment:
        yield environment


@pytest_asyncio.fixture
async def orch(env: WorkflowEnvironment) -> AsyncIterator[Orchestration]:
    """This test's worker, fakes and runs on the shared server."""
    async with running_orchestration(env) as orchestration:
        yield orchestration


@pytest_asyncio.fixture
async def private_orch() -> AsyncIterator[Orchestration]:
    """Like ``orch`` but on a server of its own, for a test that closes a run while one of its
    activities is still in flight (TRY_CANCEL). The test server does not skip time while an
    activity is outstanding, and an activity orphaned by a closed run stays outstanding until
    its own timeout, so on the shared server it would freeze time for the tests that follow."""
    async with (
        time_skipping_server() as environment,
        running_orchestration(environment, check_time_skips=False) as orchestration,
    ):
        yield orchestration
