"""Temporal as the witness of a run's lineage: ``verify_continuation``.

A continued run resumes from the state its input carries, and any client can start a run with
an input of that shape. Temporal's own records say whether a run really came from this
workflow's continue-as-new: the run it claims to continue must be a run of the same pipeline
(workflow type) on this worker's task queue, whose history closed with
``WorkflowExecutionContinuedAsNew`` into exactly this run. Only this project's workers poll that
task queue, so only the engine's own code issued that command, with its own state: a run that
passes carries state this workflow wrote. (Temporal records the end of a cron run or a retried
run as continued-as-new too, but with another initiator; a workflow of another type, or one
that borrows the type's name on a task queue of its own, fails the type or task-queue check.)

Runs as a local activity of the continued run, once, before it installs the carried state.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.api.enums.v1 import ContinueAsNewInitiator, EventType
from temporalio.client import Client, WorkflowHistoryEventFilterType
from temporalio.service import RPCError, RPCStatusCode

from workflows import contract
from workflows.payloads import ContinuationCheck, ContinuationVerdict

_NOT_THE_WORKFLOW = frozenset(
    {
        ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_RETRY,
        ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_CRON_SCHEDULE,
    }
)


def refused(reason: str) -> ContinuationVerdict:
    return ContinuationVerdict(accepted=False, reason=reason)


class LineageActivities:
    """``verify_continuation``, with the worker's Temporal client and task queue injected."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    @activity.defn(name=contract.ACTIVITY_VERIFY_CONTINUATION)
    async def verify_continuation(self, check: ContinuationCheck) -> ContinuationVerdict:
        """Whether ``check.previous_run_id`` continued as new into ``check.run_id``.

        Transient server errors are raised (the workflow's retry policy retries them); every
        other answer is a verdict.
        """
        if not check.previous_run_id:
            return refused("the run continues no earlier run")
        handle = self._client.get_workflow_handle(check.workflow_id, run_id=check.previous_run_id)
        try:
            description = await handle.describe()
            close = None
            async for event in handle.fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            ):
                close = event
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return refused("the run it claims to continue does not exist")
            raise
        if description.workflow_type != activity.info().workflow_type:
            return refused(
                f"it continues a run of another workflow type ({description.workflow_type})"
            )
        if description.task_queue != self._task_queue:
            return refused(
                f"it continues a run on another task queue ({description.task_queue[:80]})"
            )
        if (
            close is None
            or close.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        ):
            return refused("the run it claims to continue did not continue as new")
        attributes = close.workflow_execution_continued_as_new_event_attributes
        # A cron run's or a retried run's end may be recorded as continued-as-new too, with
        # its initiator; the workflow's own command leaves it unset or says WORKFLOW.
        if attributes.initiator in _NOT_THE_WORKFLOW:
            return refused("the run it claims to continue was a cron run or a retry")
        if attributes.new_execution_run_id != check.run_id:
            return refused("the run it claims to continue continued into another run")
        return ContinuationVerdict(accepted=True)
