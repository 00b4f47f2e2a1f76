"""End-to-end fixtures: the real dev server, SQS, LLM simulator and worker processes.

One stack serves the whole session (starting it takes about a second); tests that break things on
purpose (killing the worker, restarting the server) take a private stack of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.signing import SigningKey
from tests.support.live_stack import connect, stack_with_worker
from tests.support.simulator import Simulator


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


@pytest.fixture(scope="session")
def simulator(stack: LocalStack) -> Simulator:
    return Simulator(stack.addresses.openai_base_url)
