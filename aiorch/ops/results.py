"""A finished run's result, whichever way it closed.

A run that ends ``completed`` returns its pipeline's result (a ``RunResult``); one that ends
``failed`` or ``dead_letter`` closes as a failed Temporal run whose ``RunFailed`` error carries
the same result in its details (so the Web UI's failure views and ``ExecutionStatus='Failed'``
see it). The CLI, redrive and stats read both forms through this module, each as the result of
the run's own pipeline (its fields kept).

What a run's error message only points at, such as a model's refusal (its text is kept out of
messages, which the worker logs), is in the details of its failed activity: `error_details`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from pydantic import ValidationError
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.converter import DataConverter, WorkflowSerializationContext
from temporalio.exceptions import ApplicationError

from aiorch.ops import pipelines
from aiorch.ops.retries import retrying
from workflows import errors
from workflows.errors import OrchestratorError
from workflows.payloads import RunResult

R = TypeVar("R")


class NoResult(OrchestratorError):
    """The run ended without a result (cancelled, terminated, timed out): the message says how."""


def result_in(details: Sequence[Any], model: type[RunResult] = RunResult) -> RunResult | None:
    """The result (a ``model``) among a failure's details, if one is there."""
    for candidate in details:
        with contextlib.suppress(ValidationError):
            return model.model_validate(candidate)
    return None


def result_of_failure(
    error: WorkflowFailureError, model: type[RunResult] = RunResult
) -> RunResult | None:
    """The result a failed run carries: only a ``RunFailed`` error of the workflow has one."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == errors.RUN_FAILED:
        return result_in(cause.details, model)
    return None


async def finished(handle: WorkflowHandle[Any, R]) -> R:
    """Wait for the run behind ``handle`` and return its result, completed or failed: its
    pipeline's result model (what the handle's type says the run returns).

    Raises:
        NoResult: it ended without one (cancelled, terminated, timed out).
        temporalio.service.RPCError: no such run, or the server is unreachable.
    """
    model = await result_model(handle)
    try:
        value = await handle.result()
    except WorkflowFailureError as error:
        found = result_of_failure(error, model)
        if found is None:
            raise NoResult(f"run {handle.id} ended without a result: {error.cause}") from None
        return cast(R, found)
    return cast(R, value if isinstance(value, model) else model.model_validate(value))


async def result_model(handle: WorkflowHandle[Any, Any]) -> type[RunResult]:
    """The result model of the run's pipeline (the generic ``RunResult`` for a workflow type
    no pipeline has)."""
    pipeline = pipelines.of_type((await handle.describe()).workflow_type)
    return pipeline.result_model if pipeline is not None else RunResult


def run_converter(client: Client, workflow_id: str) -> DataConverter:
    """What the SDK uses for the payloads of run ``workflow_id``: the codec may bind
    ciphertexts to it, so reading one from history needs this converter."""
    return client.data_converter.with_context(
        WorkflowSerializationContext(namespace=client.namespace, workflow_id=workflow_id)
    )


async def error_details(client: Client, workflow_id: str) -> list[Any]:
    """The details of the run's last failed activity, decoded (a model's refusal: its text);
    empty when no activity failed or its failure carries none.

    Raises:
        temporalio.service.RPCError: no such run, or the server is unreachable.
    """

    async def last_failure() -> Failure | None:
        found = None
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
            if event.HasField("activity_task_failed_event_attributes"):
                found = event.activity_task_failed_event_attributes.failure
        return found

    failure = await retrying(last_failure)
    if failure is None:
        return []
    error = await run_converter(client, workflow_id).decode_failure(failure)
    return list(error.details) if isinstance(error, ApplicationError) else []


async def run_result(client: Client, workflow_id: str, run_id: str | None = None) -> RunResult:
    """`finished` for the run (the latest of its id unless ``run_id``)."""
    handle: WorkflowHandle[Any, RunResult] = client.get_workflow_handle(workflow_id, run_id=run_id)
    return await finished(handle)
