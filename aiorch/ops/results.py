"""A finished run's result, whichever way it closed.

A run that ends ``completed`` returns its ``PipelineResult``; one that ends ``failed`` or
``dead_letter`` closes as a failed Temporal run whose ``RunFailed`` error carries the same
``PipelineResult`` in its details (so the Web UI's failure views and ``ExecutionStatus='Failed'``
see it). The CLI, redrive and stats read both forms through this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from workflows import errors
from workflows.errors import OrchestratorError
from workflows.payloads import PipelineResult


class NoResult(OrchestratorError):
    """The run ended without a result (cancelled, terminated, timed out): the message says how."""


def result_in(details: Sequence[Any]) -> PipelineResult | None:
    """The ``PipelineResult`` among a failure's details, if one is there."""
    for candidate in details:
        with contextlib.suppress(ValidationError):
            return PipelineResult.model_validate(candidate)
    return None


def result_of_failure(error: WorkflowFailureError) -> PipelineResult | None:
    """The result a failed run carries: only a ``RunFailed`` error of the workflow has one."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == errors.RUN_FAILED:
        return result_in(cause.details)
    return None


async def finished(handle: WorkflowHandle[Any, Any]) -> PipelineResult:
    """Wait for the run behind ``handle`` and return its result, completed or failed.

    Raises:
        NoResult: it ended without one (cancelled, terminated, timed out).
        temporalio.service.RPCError: no such run, or the server is unreachable.
    """
    try:
        value = await handle.result()
    except WorkflowFailureError as error:
        found = result_of_failure(error)
        if found is None:
            raise NoResult(f"run {handle.id} ended without a result: {error.cause}") from None
        return found
    return value if isinstance(value, PipelineResult) else PipelineResult.model_validate(value)


async def run_result(client: Client, workflow_id: str, run_id: str | None = None) -> PipelineResult:
    """`finished` for the run (the latest of its id unless ``run_id``)."""
    return await finished(client.get_workflow_handle(workflow_id, run_id=run_id))
