"""Redrive: start dead-lettered runs again, trusting Temporal, never the queue.

``starter.py dlq redrive`` is a thin wrapper around `redrive`. Anyone who can write to the queue
can write a message, so a message is only a pointer to a run (workflow id, run id). Redrive acts
only when Temporal confirms, for that exact run (`verify_dead_run`), that it

1. exists, is of this project's workflow type, and is closed;
2. ended in ``dead_letter`` by its own result: closed Completed with a ``PipelineResult``, or
   closed Failed with the ``PipelineResult`` in its failure's details (`final_result`);
3. is still the latest run of its workflow id (checked again right before the start).

The request started again is the run's own (`run_request`): the input of its
WorkflowExecutionStarted event, decoded with the client's data converter in the workflow's
serialization context, so it works with payload encryption on. A run that continued as new
holds a ``ContinuedRun`` whose ``request`` is the chain's original request, carried forward by
the workflow itself; it is taken only when the event says the workflow's own continue-as-new
started that run (not a cron schedule, a retry or a client). The message's copy is never used.

What happens to each message:

====================================================  ================  ==========================
finding                                               action            message
====================================================  ================  ==========================
the body is not a dead-letter message                 skipped           left (visible again)
the run is still running (sent just before it ends)   skipped           left
another redrive holds the message                     skipped           left to that redrive
no such run, not ours, not ended in ``dead_letter``,  refused           left (see below)
continued as new, or its input is not a request
ended in ``dead_letter`` but a newer run exists       already_redriven  deleted
verified; started (or found started by another)       started / ...     deleted after the start
Temporal or SQS failed                                failed            left
====================================================  ================  ==========================

Refused messages are never deleted: redrive deletes only what it verified as handled. A forged
message is evidence of who can write to the queue, and a genuine one whose run is past retention
needs an operator's decision (its body may hold the only copy of the request). They stay in
``dlq list`` and in each redrive's report (exit status 1) until an operator deletes them.

Two operators at once start each dead-lettered run at most once:

- Messages are received with a hold (visibility timeout) and worked on one at a time; each
  message's hold is renewed right before it is worked on, and the holds of those still waiting
  every third of the hold, so a long ``--all`` never lets its messages pass to another redrive.
  A message whose hold cannot be renewed (another consumer received it) is skipped.
- The start cannot duplicate: its request id is derived from the dead run (namespace, workflow
  id, run id), and Temporal answers a repeated request id with the run the first start created,
  even after that run has closed. So two redrives of one dead run (two copies of its message, a
  hold that ran out) get the same new run. ``Client.start_workflow`` draws a random request id
  and does not expose it, so the start is the raw ``StartWorkflowExecution`` call of the public
  ``client.workflow_service``; input, summary and details are encoded with the client's data
  converter in the workflow's context, as the SDK does. Client interceptors do not see this
  call, so a redriven run does not join the operator's trace.
- A dead run that closed Failed is started again with ``ALLOW_DUPLICATE_FAILED_ONLY``, so the
  server itself refuses the start if a later run completed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
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
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.converter import (
    DataConverter,
    WorkflowSerializationContext,
    encode_search_attributes,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.dead_letters import DeadLetter, DeadLetterQueue, DeadLetterQueueError
from workflows import contract
from workflows.continuation import parse_input
from workflows.errors import OrchestratorError
from workflows.payloads import PipelineRequest, PipelineResult, describe_validation_error

# Received messages stay hidden this long from other consumers; renewed while redrive works.
REDRIVE_HOLD = timedelta(minutes=5)
# Namespace of the uuid5 start request ids (fixed: changing it would let an old and a new
# version of the tool start the same dead run twice).
_REDRIVE_REQUESTS = uuid.UUID("5c1f6a52-8f3e-4c1e-9a57-3f0d2b7e91a4")

RedriveAction = Literal["started", "already_redriven", "refused", "skipped", "failed"]
ACTIONS: tuple[RedriveAction, ...] = (
    "started",
    "already_redriven",
    "refused",
    "skipped",
    "failed",
)


class RedriveError(OrchestratorError):
    """Temporal could not answer what redrive needs (e.g. the run's input cannot be decoded)."""


class NotRedrivable(OrchestratorError):
    """The message's run may not be started again; ``action`` says what to do with it."""

    def __init__(self, action: RedriveAction, reason: str) -> None:
        super().__init__(reason)
        self.action = action


@dataclass(frozen=True)
class DeadRun:
    """A run that Temporal confirms ended in ``dead_letter``, with its own request."""

    workflow_id: str
    run_id: str
    request: PipelineRequest
    result: PipelineResult
    # Closed as Temporal Failed (with the result in the failure's details), not Completed.
    closed_failed: bool

    @property
    def failed_state(self) -> str:
        """The state the run gave up in (the source of its last move)."""
        return self.result.history[-1].from_state if self.result.history else "?"


@dataclass(frozen=True)
class RedriveOutcome:
    """What redrive did with one message."""

    message_id: str
    workflow_id: str | None
    action: RedriveAction
    detail: str
    new_run_id: str | None = None


def _converter(client: Client, workflow_id: str) -> DataConverter:
    # What the SDK uses for a workflow's payloads: the codec may bind ciphertexts to it.
    return client.data_converter.with_context(
        WorkflowSerializationContext(namespace=client.namespace, workflow_id=workflow_id)
    )


def final_result(
    status: WorkflowExecutionStatus | None, outcome: Any | BaseException
) -> PipelineResult | None:
    """The ``PipelineResult`` a closed run ended with, in either form it may take.

    ``outcome`` is what ``result(follow_runs=False)`` gave: the value of a Completed run, or the
    exception of a Failed one, whose ``ApplicationError`` details may carry the result (a
    dead-lettered run that closes as a typed failure). Any other ending (terminated, cancelled,
    timed out, continued as new) gives None: a client chooses a termination's details, so they
    prove nothing.
    """
    if status == WorkflowExecutionStatus.COMPLETED and not isinstance(outcome, BaseException):
        candidates: Sequence[Any] = (outcome,)
    elif (
        status == WorkflowExecutionStatus.FAILED
        and isinstance(outcome, WorkflowFailureError)
        and isinstance(outcome.cause, ApplicationError)
    ):
        candidates = outcome.cause.details
    else:
        return None
    for candidate in candidates:
        with contextlib.suppress(ValidationError):
            return PipelineResult.model_validate(candidate)
    return None


async def verify_dead_run(client: Client, workflow_id: str, run_id: str) -> DeadRun:
    """Check against Temporal that this exact run ended in ``dead_letter``; read its request.

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
    if description.run_id != run_id or description.workflow_type != contract.WORKFLOW_TYPE:
        raise NotRedrivable(
            "refused", f"run {run_id} is a {description.workflow_type}, not a pipeline run"
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
    request = await run_request(client, workflow_id, run_id)
    return DeadRun(
        workflow_id=workflow_id,
        run_id=run_id,
        request=request,
        result=result,
        closed_failed=status == WorkflowExecutionStatus.FAILED,
    )


async def run_request(client: Client, workflow_id: str, run_id: str) -> PipelineRequest:
    """The request a run was started with, from its own WorkflowExecutionStarted event.

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
        values = await _converter(client, workflow_id).decode(started.input.payloads)
    except Exception as err:  # the codec raises its own errors: a missing key, a bad payload
        raise RedriveError(
            f"cannot decode the input of run {run_id} of {workflow_id} ({type(err).__name__}); "
            "does this starter have the worker's PAYLOAD_KEYS?"
        ) from None
    if len(values) != 1:
        raise NotRedrivable("refused", f"run {run_id} was started with {len(values)} inputs")
    try:
        request, carried = parse_input(values[0])
    except ValidationError as err:
        raise NotRedrivable(
            "refused", f"run {run_id}'s input is not a request: {describe_validation_error(err)}"
        ) from None
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
    converter = _converter(client, dead.workflow_id)
    summary, details = await converter.encode(
        [
            f"AI pipeline run (review: {dead.request.review}), redriven",
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
        workflow_type=WorkflowType(name=contract.WORKFLOW_TYPE),
        task_queue=TaskQueue(name=task_queue),
        input=Payloads(payloads=await converter.encode([dead.request.model_dump(mode="json")])),
        identity=identity,
        request_id=start_request_id(client.namespace, dead.workflow_id, dead.run_id),
        workflow_id_reuse_policy=reuse,
        workflow_id_conflict_policy=WorkflowIdConflictPolicy.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
        user_metadata=UserMetadata(summary=summary, details=details),
    )
    state = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
    encode_search_attributes(
        TypedSearchAttributes([SearchAttributePair(state, "idle")]), request.search_attributes
    )
    response = await client.workflow_service.start_workflow_execution(request, retry=True)
    return response.run_id


async def _started_by(client: Client, workflow_id: str, run_id: str) -> str:
    """The identity that started a run (its start event's)."""
    events = client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events(
        page_size=1
    )
    first = await anext(aiter(events), None)
    return first.workflow_execution_started_event_attributes.identity if first else ""


async def _latest_run(client: Client, workflow_id: str) -> str | None:
    """The id of the newest run with this workflow id, or None when there is none."""
    try:
        return (await client.get_workflow_handle(workflow_id).describe()).run_id
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


class _Holds:
    """Keeps the chosen messages hidden from other consumers while redrive works through them."""

    def __init__(self, queue: DeadLetterQueue, letters: list[DeadLetter], hold: timedelta) -> None:
        self._queue = queue
        self._pending = {letter.message_id: letter for letter in letters}
        self._hold = hold
        self._renewed_at = time.monotonic()

    async def take(self, letter: DeadLetter) -> bool:
        """Renew ``letter``'s hold for a full period (and the others' when due); False when
        another consumer has it now."""
        waiting = [x for x in self._pending.values() if x.message_id != letter.message_id]
        due = time.monotonic() - self._renewed_at > self._hold.total_seconds() / 3
        lost = await asyncio.to_thread(
            self._queue.hold, [letter, *waiting] if due else [letter], self._hold
        )
        if due:
            self._renewed_at = time.monotonic()
        for message_id in lost - {letter.message_id}:
            self._pending.pop(message_id, None)
        return letter.message_id not in lost

    def done(self, letter: DeadLetter) -> None:
        self._pending.pop(letter.message_id, None)


async def redrive(
    client: Client,
    queue: DeadLetterQueue,
    *,
    task_queue: str,
    select: str | None,
    progress: Callable[[str], None] = lambda _line: None,
    hold: timedelta = REDRIVE_HOLD,
) -> list[RedriveOutcome]:
    """Verify each dead letter against Temporal and start the verified runs again.

    Args:
        client: connected to the namespace the runs live in, with the worker's data converter.
        queue: the dead-letter queue.
        task_queue: where the new runs go (``TEMPORAL_TASK_QUEUE``).
        select: a workflow id (or SQS message id) to redrive only its messages; None for all.
        progress: called with one line per step, for the operator.
        hold: how long received messages stay hidden from other consumers between renewals.

    Raises:
        DeadLetterQueueError: the queue cannot be read, or ``select`` matches no message.
    """
    letters = await asyncio.to_thread(queue.receive_all, hold)
    chosen = [x for x in letters if select is None or select in (x.workflow_id, x.message_id)]
    chosen_ids = {x.message_id for x in chosen}
    await asyncio.to_thread(queue.release, [x for x in letters if x.message_id not in chosen_ids])
    if select is not None and not chosen:
        raise DeadLetterQueueError(f"no dead letter for {select} in the {queue.where}")
    progress(f"redriving {len(chosen)} dead letter(s) from the {queue.where}")
    holds = _Holds(queue, chosen, hold)
    # Tells this redrive's starts from another's in the new run's start event.
    identity = f"{client.identity} redrive {uuid.uuid4().hex[:12]}"
    outcomes = []
    for letter in chosen:
        name = letter.workflow_id or f"message {letter.message_id}"
        try:
            if not await holds.take(letter):
                outcome = RedriveOutcome(
                    letter.message_id, letter.workflow_id, "skipped", "another redrive holds it"
                )
                progress(f"{name}: skipped, another redrive holds message {letter.message_id}")
            else:
                outcome = await _redrive_one(client, queue, letter, task_queue, identity, progress)
        except (OrchestratorError, RPCError) as err:
            # Visible again for the next try; if SQS is down too, the hold runs out by itself.
            with contextlib.suppress(DeadLetterQueueError):
                await asyncio.to_thread(queue.release, [letter])
            outcome = RedriveOutcome(letter.message_id, letter.workflow_id, "failed", str(err))
            progress(f"{name}: not redriven: {err}")
        holds.done(letter)
        outcomes.append(outcome)
    return outcomes


async def _redrive_one(
    client: Client,
    queue: DeadLetterQueue,
    letter: DeadLetter,
    task_queue: str,
    identity: str,
    progress: Callable[[str], None],
) -> RedriveOutcome:
    body = letter.body
    if body is None:
        await asyncio.to_thread(queue.release, [letter])
        progress(f"message {letter.message_id}: skipped, {letter.problem}")
        return RedriveOutcome(letter.message_id, None, "skipped", letter.problem or "")
    wid = body.workflow_id
    try:
        dead = await verify_dead_run(client, wid, body.run_id)
    except NotRedrivable as no:
        await asyncio.to_thread(queue.release, [letter])
        kept = "message left in the queue"
        progress(f"{wid}: {no.action}: {no}; {kept}")
        return RedriveOutcome(letter.message_id, wid, no.action, f"{no}; {kept}")
    latest = await _latest_run(client, wid)
    if latest != dead.run_id:
        return await _delete(queue, letter, f"run {latest} replaced it", progress)
    note = ""
    if _differs(body.request, dead.request):
        note = "; the message's request differs from the run's own, which was started"
        progress(f"{wid}: the message's request differs from the run's own; using the run's own")
    try:
        new_run = await start_again(client, dead, task_queue=task_queue, identity=identity)
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
        why = "another run of this id started meanwhile"
        return await _delete(queue, letter, why, progress)
    if await _started_by(client, wid, new_run) != identity:
        why = f"another redrive started run {new_run} for it"
        return await _delete(queue, letter, why, progress, new_run)
    progress(f"{wid}: started run {new_run} (replaces dead-lettered run {dead.run_id})")
    await asyncio.to_thread(queue.delete, letter)
    progress(f"{wid}: deleted message {letter.message_id}")
    return RedriveOutcome(letter.message_id, wid, "started", f"started{note}", new_run)


def _differs(copy: dict[str, Any], request: PipelineRequest) -> bool:
    """True when the message holds a whole request that is not the run's own (a cut or
    content-free copy is no request and proves nothing)."""
    try:
        return PipelineRequest.model_validate(copy) != request
    except ValidationError:
        return False


async def _delete(
    queue: DeadLetterQueue,
    letter: DeadLetter,
    why: str,
    progress: Callable[[str], None],
    new_run_id: str | None = None,
) -> RedriveOutcome:
    """Delete the message of a dead run that has been redriven already."""
    await asyncio.to_thread(queue.delete, letter)
    progress(f"{letter.workflow_id}: already redriven ({why}); deleted message {letter.message_id}")
    return RedriveOutcome(
        letter.message_id, letter.workflow_id, "already_redriven", why, new_run_id
    )


def summarize(outcomes: Sequence[RedriveOutcome]) -> str:
    """One line: how many runs were started, found already redriven, refused, skipped, failed."""
    counts = dict.fromkeys(ACTIONS, 0)
    for outcome in outcomes:
        counts[outcome.action] += 1
    return (
        f"{counts['started']} started, {counts['already_redriven']} already redriven, "
        f"{counts['refused']} refused, {counts['skipped']} skipped, {counts['failed']} failed"
    )
