"""Revocation that reaches waiting runs: every open run of every pipeline is told (the
``revoke`` signal) to refuse the reviewer keys and reviewers an operator revoked.

A run judges reviews against the keys and reviewers its plan was made with; removing a key
from ``REVIEW_PUBLIC_KEYS`` (or a name from ``ALLOWED_REVIEWERS``) changes the plans of new
runs only. This module carries the revocation to the runs already open: one signal per open
run, at revocation time, and nothing on any other run's path.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import visibility
from workflows import contract
from workflows.payloads import Revocation


@dataclass(frozen=True)
class RevocationOutcome:
    """How many open runs were told, and how many had closed by the time they were."""

    told: int
    closed: int


async def revoke_in_open_runs(
    client: Client, revocation: Revocation, *, concurrency: int = 32
) -> RevocationOutcome:
    """Send ``revocation`` to every open run of every pipeline.

    Raises:
        temporalio.service.RPCError: Temporal failed (other than a run that closed meanwhile).
    """
    query = visibility.runs_query(visibility.OPEN)
    ids = [execution.id async for execution in client.list_workflows(query)]
    gate = asyncio.Semaphore(concurrency)

    async def tell(workflow_id: str) -> bool:
        async with gate:
            try:
                await client.get_workflow_handle(workflow_id).signal(
                    contract.SIGNAL_REVOKE, revocation
                )
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
                raise
            return True

    told = await asyncio.gather(*(tell(workflow_id) for workflow_id in ids))
    return RevocationOutcome(told=sum(told), closed=len(told) - sum(told))
