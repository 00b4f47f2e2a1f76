"""A command's session with Temporal: the settings, a connected client, the run's trace, and
what the command says about a run it cannot reach."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from aiorch.cli.output import CliError
from aiorch.ops import closed_runs
from aiorch.ops.retries import retrying
from aiorch_runtime.config import Settings, load_settings
from aiorch_runtime.telemetry import tracing
from aiorch_runtime.temporal import connect
from workflows import contract
from workflows.payloads import RunStatus

T = TypeVar("T")


async def connected(settings: Settings) -> Client:
    """A client for the configured server (the envconfig profile and ``TEMPORAL_*``).

    Raises:
        TemporalUnreachable: no working connection (one line: where, why, what to set).
    """
    return await connect(settings)


def run_async(command: Callable[[Client, Settings], Awaitable[T]]) -> T:
    """Load the settings, connect, and run ``command(client, settings)`` to completion."""
    settings = load_settings()

    async def main() -> T:
        return await command(await connected(settings), settings)

    # With OTEL_EXPORTER_OTLP_ENDPOINT set, the start call opens the run's trace.
    with tracing(settings, "starter"):
        return asyncio.run(main())


def describe_rpc_error(workflow_id: str, error: RPCError) -> str:
    """One line for a server error about one run."""
    if error.status == RPCStatusCode.NOT_FOUND:
        return f"no open run with id {workflow_id} (it may have finished or never started)"
    return f"{workflow_id}: {error.message}"


@contextlib.contextmanager
def about_run(workflow_id: str) -> Iterator[None]:
    """Calls to the server about one run: a server error becomes the command's one line.

    Raises:
        CliError: the server refused (``describe_rpc_error``).
    """
    try:
        yield
    except RPCError as error:
        raise CliError(describe_rpc_error(workflow_id, error)) from None


async def fetch_status(client: Client, workflow_id: str) -> RunStatus:
    """The run's ``status`` query; for a run that closed short of an end state, with the end
    Temporal recorded (`closed_runs.as_closed`).

    Raises:
        CliError: no such run, or the server refused.
    """
    with about_run(workflow_id):
        status: RunStatus = await retrying(
            lambda: client.get_workflow_handle(workflow_id).query(
                contract.QUERY_STATUS, result_type=RunStatus
            )
        )
        return await closed_runs.as_closed(client, workflow_id, status)
