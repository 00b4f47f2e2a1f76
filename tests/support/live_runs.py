"""Runs on a live stack, driven as a client does: a request, a start on the worker's default
task queue, the ``status`` query and waits for a state, over the real server."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.support.builders import new_request_id
from workflows import contract
from workflows.payloads import RunStatus


def request(message: str, **fields: Any) -> dict[str, Any]:
    """A request to the LLM pipeline asking ``message``, with a fresh request id unless
    ``fields`` name one; ``fields`` are sent as they are."""
    return {
        "request_id": fields.pop("request_id", new_request_id()),
        "user_message": message,
        **fields,
    }


async def start(client: Client, payload: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    """Start the LLM pipeline on ``payload``, its request id as the workflow id, on the task
    queue the stack's worker polls."""
    return await client.start_workflow(
        contract.WORKFLOW_TYPE,
        payload,
        id=payload["request_id"],
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )


async def llm_call_key(handle: WorkflowHandle[Any, Any], attempt: int) -> str:
    """The ``Idempotency-Key`` of the run's LLM call ``attempt``: the workflow id and the run
    chain (its first run id), so a new run under the same id never shares a key."""
    described = await handle.describe()
    chain = described.raw_description.workflow_execution_info.first_run_id
    return f"{handle.id}/{chain}:invoke_llm:{attempt}"


async def status_of(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    result: RunStatus = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
    return result


async def wait_for_state(
    handle: WorkflowHandle[Any, Any], state: str, timeout: float = 30.0
) -> RunStatus:
    """Poll the status query until the run is in ``state``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        current = await status_of(handle)
        if current.state == state:
            return current
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{handle.id} stuck in {current.state}, expected {state}")
        await asyncio.sleep(0.1)


async def visible_state(
    client: Client, workflow_id: str, state: str, timeout: float = 10.0
) -> bool:
    """True once visibility finds the run with ``AiState = state`` (visibility may lag)."""
    query = f"WorkflowId = '{workflow_id}' AND {contract.SEARCH_ATTRIBUTE_STATE} = '{state}'"
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if [w async for w in client.list_workflows(query)]:
            return True
        await asyncio.sleep(0.2)
    return False
