"""What Temporal says about a dead-lettered run, and starting it again at most once.

`aiorch.ops.redrive` trusts a dead-letter message only as a pointer to a run; this module asks
Temporal about that exact run (`verify_dead_run`). It must exist, be of one of this project's
pipelines (its workflow type) on the worker's task queue (a look-alike on another one is
refused) and be closed, and its own result must say ``dead_letter``: a run
closed Completed with its ``RunResult``, or closed Failed with the result in its failure's details
(`final_result` reads both forms). The request to start again is the run's own (`run_request`):
the input of its WorkflowExecutionStarted event, decoded with the client's data converter in the
workflow's serialization context, so it works with payload encryption on. A run that continued
as new holds a ``ContinuedRun`` whose ``request`` is the chain's original request, carried
forward by the workflow itself; it is taken only when the event says the workflow's own
continue-as-new started that run (not a cron schedule, a retry or a client).

`start_again` cannot start one dead run twice: its request id is derived from the dead run
(namespace, workflow id, run id), and Temporal answers a repeated request id with the run the
first start created, even after that run has closed. ``Client.start_workflow`` draws a random
request id and does not expose it, so the start is the raw ``StartWorkflowExecution`` call of
the public ``client.workflow_service``; input, summary and details are encoded with the client's
data converter in the workflow's context, as the SDK does. Client interceptors do not see this
call, so a redriven run does not join the operator's trace. A dead run that closed Failed is
started again with ``ALLOW_DUPLICATE_FAILED_ONLY``, so the server itself refuses the start if a
later run completed meanwhile.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from temporalio.api.common.v1 import Payloads, WorkflowType
from temporalio.api.enums.v1 import (
    ContinueAsNewInitiator,
    EventType,
    WorkflowIdConflictPolicy,
    WorkflowIdReusePolicy,
)
from temporalio.api.sdk.v1 import UserMetadata
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import StartWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.converter import encode_search_attributes
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import pipelines
from aiorch.ops.results import result_in, result_of_failure, run_converter
from aiorch.ops.visibility import initial_search_attributes
from workflows import errors
from workflows.engine.continuation import parse_input
from workflows.engine.pipeline import Pipeline
from workflows.errors import OrchestratorError
from workflows.payloads import RequestBase, RunResult, describe_validation_error

# Namespace of the uuid5 start request ids (fixed: changing it would let an old and a new
# version of the tool start the same dead run twice).
_REDRIVE_REQUESTS = uuid.UUID("5c1f6a52-8f3e-4c1e-9a57-3f0d2b7e91a4")

Verdict = Literal["refused", "skipped"]


class RedriveError(OrchestratorError):
    """Temporal could not answer what redrive needs (e.g. the run's input cannot be decoded)."""


class NotRedrivable(OrchestratorError):
    """The run may not be started again: ``refused`` for good, or ``skipped`` for now."""

    def __init__(self, action: Verdict, reason: str) -> None:
        super().__init__(reason)
        self.action = action


@dataclass(frozen=True)
class DeadRun:
    """A run that Temporal confirms ended in ``dead_letter``, with its own request."""

    workflow_id: str
    run_id: str
    pipeline: Pipeline[Any, Any]
    request: RequestBase
    result: RunResult
    # Closed as Temporal Failed (with the result in the failure's details), not Completed.
    closed_failed: bool

    @property
    def failed_state(self) -> str:
        """The state the run gave up in (the source of its last move)."""
        return self.result.history[-1].from_state if self.result.history else "?"


def final_result(
    status: WorkflowExecutionStatus | None, outcome: Any | BaseException
) -> RunResult | None:
    """The ``RunResult`` a closed run ended with, in either form it may take.

    ``outcome`` is what ``result(follow_runs=False)`` gave: the value of a Completed run, or the
    exception of a Failed one, whose ``ApplicationError`` details may carry the result (a
    dead-lettered run that closes as a typed failure). Any other ending (terminated, cancelled,
    timed out, continued as new) gives None: a client chooses a termination's details, so they
    prove nothing.
    """
    if status == WorkflowExecutionStatus.COMPLETED and not isinstance(outcome, BaseException):
        return result_in((outcome,))
    if status == WorkflowExecutionStatus.FAILED and isinstance(outcome, WorkflowFailureError):
        return result_of_failure(outcome)
    return None


async def verify_dead_run(
    client: Client, workflow_id: str, run_id: str, *, task_queue: str
) -> DeadRun:
    """Check against Temporal that this exact run, a pipeline's run on ``task_queue`` (the
    worker's), ended in ``dead_letter``; read its request.

    Does not check that it is still the latest run (the caller does, right before starting).

    Raises:
        NotRedrivable: the run may not be redriven (action ``refused`` or ``skipped``).
        RedriveError: its result or input cannot be decoded (e.g. no key for it).
        RPCError: Temporal failed.
    """
    if not run_id:
        raise NotRedrivable("refused", f"the message names no run of {workflow_id}")
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise NotRedrivable(
                "refused",
                f"no run {run_id} of {workflow_id} (never existed, or past retention)",
            ) from None
        raise
    pipeline = pipelines.of_type(description.workflow_type)
    if description.run_id != run_id or pipeline is None:
        raise NotRedrivable(
            "refused", f"run {run_id} is a {description.workflow_type}, not a pipeline run"
        )
    if description.task_queue != task_queue:
        # A look-alike: a pipeline's type name on a worker of someone else's.
        raise NotRedrivable(
            "refused",
            f"run {run_id} ran on task queue {description.task_queue[:80]!r}, "
            f"not the worker's ({task_queue})",
        )
    status = description.status
    if status == WorkflowExecutionStatus.RUNNING:
        raise NotRedrivable("skipped", f"run {run_id} is still running")
    if status not in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED):
        # Terminated, cancelled, timed out, or continued as new: no dead letter came from it.
        ended = status.name.lower() if status else "unknown"
        raise NotRedrivable("refused", f"run {run_id} closed {ended}, not in dead_letter")
    outcome: Any | BaseException
    try:
        outcome = await handle.result(follow_runs=False)
    except WorkflowFailureError as err:
        outcome = err
    except RPCError:
        raise
    except Exception as err:  # the codec raises its own errors: a missing key, a bad payload
        raise RedriveError(
            f"cannot decode the result of run {run_id} of {workflow_id} "
            f"({type(err).__name__}); does this starter have the worker's PAYLOAD_KEYS?"
        ) from None
    result = final_result(status, outcome)
    if result is None or result.state != "dead_letter":
        ended = f"ended in {result.state}" if result else f"closed {status.name.lower()}"
        raise NotRedrivable("refused", f"run {run_id} {ended}, not in dead_letter")
    request = await run_request(client, workflow_id, run_id, pipeline)
    return DeadRun(
        workflow_id=workflow_id,
        run_id=run_id,
        pipeline=pipeline,
        request=request,
        result=result,
        closed_failed=status == WorkflowExecutionStatus.FAILED,
    )


async def run_request(
    client: Client, workflow_id: str, run_id: str, pipeline: Pipeline[Any, Any]
) -> RequestBase:
    """The request a run of ``pipeline`` was started with, from its own
    WorkflowExecutionStarted event.

    A continued run's input (``ContinuedRun``) yields the chain's original request, but only
    when the event shows the workflow's own continue-as-new started it.

    Raises:
        NotRedrivable: the input is no request of this workflow id (``refused``).
        RedriveError: the history or its input cannot be read.
    """
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    events = handle.fetch_history_events(page_size=1)
    first = await anext(aiter(events), None)
    if first is None or first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise RedriveError(f"run {run_id} of {workflow_id} has no start event")
    started = first.workflow_execution_started_event_attributes
    try:
        values = await run_converter(client, workflow_id).decode(started.input.payloads)
    except Exception as err:  # the codec raises its own errors: a missing key, a bad payload
        raise RedriveError(
            f"cannot decode the input of run {run_id} of {workflow_id} ({type(err).__name__}); "
            "does this starter have the worker's PAYLOAD_KEYS?"
        ) from None
    if len(values) != 1:
        raise NotRedrivable("refused", f"run {run_id} was started with {len(values)} inputs")
    try:
        request, carried = parse_input(
            values[0], pipeline.graph, pipeline.request, pipeline.continued
        )
    except ValidationError as err:
        raise NotRedrivable(
            "refused", f"run {run_id}'s input is not a request: {describe_validation_error(err)}"
        ) from None
    except errors.InvalidRequest as err:
        raise NotRedrivable("refused", f"run {run_id}'s input is not a request: {err}") from None
    if carried is not None and not (
        started.initiator == ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW
        and started.continued_execution_run_id
        and not started.cron_schedule
    ):
        raise NotRedrivable(
            "refused", f"run {run_id} carries state that its own continue-as-new did not give it"
        )
    if request.request_id != workflow_id:
        raise NotRedrivable(
            "refused", f"run {run_id}'s request {request.request_id} is not its workflow id"
        )
    return request


def start_request_id(namespace: str, workflow_id: str, dead_run_id: str) -> str:
    """The start request id of the one redrive of ``dead_run_id``: the same for every operator."""
    return str(uuid.uuid5(_REDRIVE_REQUESTS, f"{namespace}/{workflow_id}/{dead_run_id}"))


async def start_again(client: Client, dead: DeadRun, *, task_queue: str, identity: str) -> str:
    """Start ``dead``'s request as a new run of its workflow id; returns the new run's id.

    Idempotent per dead run (see the module doc): a repeated call, by anyone, returns the run
    the first call started.

    Raises:
        RPCError: ``ALREADY_EXISTS`` when another run is open (or, for a dead run that closed
            Failed, a later one completed); any other server error.
    """
    converter = run_converter(client, dead.workflow_id)
    summary, details = await converter.encode(
        [
            f"{dead.pipeline.name} pipeline run (review: {dead.request.review}), redriven",
            f"redrive of run {dead.run_id}, dead-lettered in {dead.failed_state}",
        ]
    )
    reuse = (
        WorkflowIdReusePolicy.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
        if dead.closed_failed
        # The contract starts an id once (REJECT_DUPLICATE); a redrive deliberately starts it
        # again, only after the dead-lettered run has closed.
        else WorkflowIdReusePolicy.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
    )
    request = StartWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_id=dead.workflow_id,
        workflow_type=WorkflowType(name=dead.pipeline.workflow_type),
        task_queue=TaskQueue(name=task_queue),
        input=Payloads(payloads=await converter.encode([dead.request.model_dump(mode="json")])),
        identity=identity,
        request_id=start_request_id(client.namespace, dead.workflow_id, dead.run_id),
        workflow_id_reuse_policy=reuse,
        workflow_id_conflict_policy=WorkflowIdConflictPolicy.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
        user_metadata=UserMetadata(summary=summary, details=details),
    )
    encode_search_attributes(
        initial_search_attributes(dead.pipeline, dead.request), request.search_attributes
    )
    response = await client.workflow_service.start_workflow_execution(request, retry=True)
    return response.run_id


async def started_by(client: Client, workflow_id: str, run_id: str) -> str:
    """The identity that started a run (its start event's)."""
    events = client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events(
        page_size=1
    )
    first = await anext(aiter(events), None)
    return first.workflow_execution_started_event_attributes.identity if first else ""


async def latest_run(client: Client, workflow_id: str) -> str | None:
    """The id of the newest run with this workflow id, or None when there is none."""
    try:
        return (await client.get_workflow_handle(workflow_id).describe()).run_id
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
