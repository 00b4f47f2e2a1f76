"""A workflow that runs one activity by name, in a module of its own: the sandbox imports a
workflow's module afresh for every run, so it imports workflow code only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

# Short and even, so a test sees a few attempts (and the last failure kept) within a second.
RETRY_INTERVAL = timedelta(milliseconds=200)


@workflow.defn(name="RunsOneActivity")
class RunsOneActivity:
    """Runs ``activity`` with ``arg`` up to ``attempts`` times (0: until it succeeds)."""

    @workflow.run
    async def run(self, activity: str, arg: Any, attempts: int) -> Any:
        return await workflow.execute_activity(
            activity,
            arg,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                initial_interval=RETRY_INTERVAL,
                backoff_coefficient=1.0,
                maximum_attempts=attempts,
            ),
        )
