"""Deployment acceptance fixtures: the real dev server, SQS and LLM simulator of the local stack
(``aiorch.devstack.stack.LocalStack``, without its worker); the tests start worker and starter
processes on it the way a deployment runs them (``tests.deploy.processes``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiorch.devstack.stack import LocalStack


@pytest.fixture(scope="module")
def bare_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Dev server, SQS and simulator; the tests start their own workers."""
    with LocalStack(tmp_path_factory.mktemp("deploy-stack"), with_worker=False) as running:
        (running.data_dir / "home").mkdir(exist_ok=True)
        yield running
