"""Who may call the worker's activities: only runs of its own pipelines on its own task queue.

Temporal lets any workflow in the namespace schedule an activity on any task queue, under any
workflow type name: a workflow on a worker of someone else's, named ``AiOrchestrator``, could
have ours write or delete another run's vector, or bill a model call to another tenant. So
every regular activity first asks Temporal about the run that scheduled it
(``activity.info()`` names it): that run must be of a pipeline's workflow type and run on this
worker's task queue, which only this project's workers poll. The answer is kept per run (a
run's type and task queue never change), so a run costs one describe per worker.

Local activities are left alone: they run inside the workflow task of a run this worker
itself is executing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final, Protocol

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from workflows import errors

# Runs whose answer is kept; past this, the oldest are asked again when they call again.
KNOWN_RUNS: Final = 10_000


class WorkflowTypes(Protocol):
    """The workflow types whose runs may call the worker's activities."""

    async def has(self, workflow_type: str) -> bool:
        """Whether ``workflow_type`` is one of them (it may read the worker's pipeline folder).

        Raises:
            aiorch_runtime.errors.ConfigError: the folder could not be read just now.
        """
        ...


class CallerCheck(Interceptor):
    """Refuses a regular activity scheduled by a run that is not one of this worker's own."""

    def __init__(self, client: Client, task_queue: str, workflow_types: WorkflowTypes) -> None:
        # Asked on each new run, not copied: a pipeline file added to the worker's folder
        # becomes one of its pipelines.
        self._client = client
        self._task_queue = task_queue
        self._types = workflow_types
        self._known: OrderedDict[tuple[str, str], str | None] = OrderedDict()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Checked(next, self)

    async def problem(self, info: activity.Info) -> str | None:
        """Why the run that scheduled this activity may not call it, or None when it may.

        Raises:
            temporalio.service.RPCError: Temporal did not answer (the attempt is retried).
            aiorch_runtime.errors.ConfigError: the worker's pipeline folder could not be read
                just now (the attempt is retried).
        """
        key = (info.workflow_id or "", info.workflow_run_id or "")
        if key in self._known:
            self._known.move_to_end(key)
            return self._known[key]
        found = await self._ask(*key)
        self._known[key] = found
        while len(self._known) > KNOWN_RUNS:
            self._known.popitem(last=False)
        return found

    async def _ask(self, workflow_id: str, run_id: str) -> str | None:
        try:
            caller = await self._client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return "no such run"
            raise
        if not await self._types.has(caller.workflow_type):
            return f"a {caller.workflow_type} run is no pipeline of this worker's"
        if caller.task_queue != self._task_queue:
            return f"a run on task queue {caller.task_queue!r}, not this worker's"
        return None


class _Checked(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, check: CallerCheck) -> None:
        super().__init__(next)
        self._check = check

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if not info.is_local:
            problem = await self._check.problem(info)
            if problem is not None:
                raise ApplicationError(
                    f"{info.activity_type} refused: it was scheduled by {problem}",
                    type=errors.UNKNOWN_CALLER,
                    non_retryable=True,
                )
        return await self.next.execute_activity(input)
