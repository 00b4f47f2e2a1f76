"""Each security module attacks a stack of its own (a dev server and a worker process), its
worker set up as the module's ``worker_env`` fixture says: what one attack leaves behind (a
refused review, a forged message, a poisoned key) never meets another module's checks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return E2E_WORKER_ENV


@pytest.fixture(scope="module")
def stack_options() -> dict[str, Any]:
    """The module's other LocalStack options (e.g. ``with_capacity_store``)."""
    return {}


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    worker_env: dict[str, str],
    stack_options: dict[str, Any],
) -> Iterator[LocalStack]:
    yield from stack_with_worker(
        tmp_path_factory.mktemp(request.path.stem), worker_env, **stack_options
    )


@pytest.fixture(scope="module")
async def client(stack: LocalStack) -> Client:
    """A client with namespace access and the default converter: what an attacker holds."""
    return await connect(stack)
