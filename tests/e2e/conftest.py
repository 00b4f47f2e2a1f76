"""End-to-end fixtures: the real dev server, SQS, LLM simulator and worker processes.

One stack serves the whole session (starting it takes about a second); tests that break things on
purpose (killing the worker, restarting the server) take a private stack of their own.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops.signing import SigningKey
from tests.live import connect, stack_with_worker
from workflows import contract
from workflows.payloads import RunStatus


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from stack_with_worker(tmp_path_factory.mktemp("stack"))


@pytest.fixture
def private_stack(tmp_path: Path) -> Iterator[LocalStack]:
    yield from stack_with_worker(tmp_path / "stack")


@pytest.fixture(scope="session")
def reviewer_key(stack: LocalStack) -> SigningKey:
    """The stack's identity-provider key: signs reviews for any reviewer."""
    return stack.reviewer_key


@pytest.fixture(scope="session")
async def client(stack: LocalStack) -> Client:
    return await connect(stack)


class Simulator:
    """Reads the LLM simulator's request log over HTTP."""

    def __init__(self, base_url: str) -> None:
        self.root = base_url.removesuffix("/v1")

    def requests(self, run_id: str | None = None) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.root}/_sim/requests", timeout=10) as response:
            log: list[dict[str, Any]] = json.load(response)
        return [r for r in log if run_id is None or r.get("run_id") == run_id]

    def chat_requests(self, run_id: str) -> list[dict[str, Any]]:
        return [r for r in self.requests(run_id) if r["path"] == "chat"]

    def batches(self) -> dict[str, Any]:
        """The batch API's state: its settings, ``submissions`` and every batch."""
        with urllib.request.urlopen(f"{self.root}/_sim/batches", timeout=10) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def set_batches(self, **settings: Any) -> None:
        """The settings of the batches created from now on (completion_s, expire_after,
        create_delay_ms)."""
        self.send("PUT", "/_sim/batches", settings)

    def set_fault(self, fault: dict[str, Any]) -> None:
        self.send("POST", "/_sim/faults", fault)

    def clear_faults(self) -> None:
        self.send("DELETE", "/_sim/faults", None)

    def send(self, method: str, path: str, body: dict[str, Any] | None) -> None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.root}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass


@pytest.fixture(scope="session")
def simulator(stack: LocalStack) -> Simulator:
    return Simulator(stack.addresses.openai_base_url)


def new_id() -> str:
    return uuid.uuid4().hex[:24]


def request(message: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": fields.pop("request_id", new_id()), "user_message": message, **fields}


async def start(client: Client, payload: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        contract.WORKFLOW_TYPE,
        payload,
        id=payload["request_id"],
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )


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
