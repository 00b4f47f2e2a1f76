"""Who may run a batch group: the ``LlmBatch`` run the lane itself started for it.

A group's workflow id is predictable (``LlmBatch:SCOPE:N``), and anyone who may start workflows
on the task queue can start that id first, with a schedule of their own in its input (a poll
interval of 0, a negative delay, a thousand rounds). So the group's schedule is never taken on
the input's word:

- when a group opens, the store gives it a random owner token, and the lane starts its
  workflow with the token in its memo; a lane that finds the id held by a run without it
  closes the group and retries the call in the next one (`HeldByAnother`);
- ``submit_batch`` and ``collect_batch`` serve only the run under the group's id whose memo
  holds the group's token (`check_group`), so a pre-started run never submits, polls or
  collects, whatever its input says;
- the number of rounds is the worker's (``ROUNDS``): a round past it is refused, and the last
  one fails what is still unfinished whatever the workflow asked.

The delay and poll interval of the lane's own runs come from the worker's settings
(``LLM_BATCH_DELAY_S``, ``LLM_BATCH_POLL_S``), written into the input by the lane.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Final

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStoreError
from workflows import contract, errors
from workflows.payloads import BatchGroup, BatchRound

# The memo key of a group workflow's owner token.
OWNER_MEMO: Final = "aiorch_batch_owner"
# Batches a group gets (an expired batch's unfinished calls go into the next).
ROUNDS: Final = 3


class HeldByAnother(Exception):
    """A group's workflow id is held by a run the lane did not start."""


def group_workflow_id(scope: str, group: int) -> str:
    """The id of the ``LlmBatch`` workflow of ``scope``'s group ``group``."""
    return f"{contract.WORKFLOW_TYPE_LLM_BATCH}:{scope}:{group}"


def new_owner() -> str:
    """A fresh owner token for a group that may open."""
    return secrets.token_hex(16)


async def memo_owner(temporal: Client, workflow_id: str, run_id: str | None = None) -> str:
    """The owner token in the memo of the run ``workflow_id`` (its latest without ``run_id``).

    Raises:
        temporalio.service.RPCError: Temporal did not answer.
    """
    described = await temporal.get_workflow_handle(workflow_id, run_id=run_id).describe()
    owner = await described.memo_value(OWNER_MEMO, "")
    return owner if isinstance(owner, str) else ""


async def start_group(
    temporal: Client, group: BatchGroup, owner: str, task_queue: str, *, full: bool
) -> None:
    """Start the group's workflow with its ``owner`` token in its memo, or signal it that the
    group is full (signal-with-start); one that already ran to its end (its group was
    submitted) is left alone.

    Raises:
        HeldByAnother: the id is held by a run without the group's token: one started by
            someone else, maybe with a schedule of their own.
        temporalio.service.RPCError: Temporal did not answer.
    """
    workflow_id = group_workflow_id(group.scope, group.group)
    # A run under the id that has ended is ours once it submitted the group, or another's.
    with contextlib.suppress(WorkflowAlreadyStartedError):
        await temporal.start_workflow(
            contract.WORKFLOW_TYPE_LLM_BATCH,
            group,
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            start_signal=contract.SIGNAL_BATCH_FULL if full else None,
            static_summary=f"batch group {group.group} of {group.model}",
            memo={OWNER_MEMO: owner} if owner else None,
        )
    if owner and await memo_owner(temporal, workflow_id) != owner:
        raise HeldByAnother(workflow_id)


def is_last(batch: BatchRound) -> bool:
    """Whether ``batch`` is its group's last round, by the workflow's word or the worker's."""
    return batch.last or batch.round >= ROUNDS - 1


async def check_group(temporal: Client, store: BatchStore, batch: BatchRound) -> None:
    """Refuse anyone but the group's own run: the run under the group's id that carries its
    owner token (a group opened before tokens existed: the id alone), within ``ROUNDS``.

    Raises:
        ApplicationError: ``UnknownCaller`` (permanent) for any other run or a round too many;
            ``LlmRetryable`` when the store or Temporal cannot answer.
    """
    info = activity.info()
    caller = info.workflow_id
    if caller != group_workflow_id(batch.scope, batch.group):
        raise _refused(batch, f"not {caller!r}")
    if batch.round >= ROUNDS:
        raise _refused(batch, f"and has {ROUNDS} rounds, not {batch.round + 1}")
    try:
        opened, owner = await store.owner_of(batch.scope, batch.group)
        if not opened:
            raise _refused(batch, "and it was never opened")
        if owner and await memo_owner(temporal, caller, info.workflow_run_id) != owner:
            raise _refused(batch, "not a run started under its id by someone else")
    except (CapacityStoreError, RPCError) as err:
        raise ApplicationError(
            f"the owner of group {batch.group} cannot be checked now ({err})",
            type=errors.LLM_RETRYABLE,
        ) from None


def _refused(batch: BatchRound, why: str) -> ApplicationError:
    return ApplicationError(
        f"group {batch.group} of {batch.model} belongs to the run the batch lane started, {why}",
        type=errors.UNKNOWN_CALLER,
        non_retryable=True,
    )
