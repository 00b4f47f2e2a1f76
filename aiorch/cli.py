"""The ``starter.py`` command line: start runs, review them, inspect them, draw the graph.

Every failure a user can cause or meet (bad input, unknown run, server down, a review the run
does not accept) ends in one clear line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, Any, ParamSpec, TypeVar
from urllib.parse import quote

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.config import Settings, load_settings
from aiorch.temporal import connect
from workflows import contract
from workflows.errors import OrchestratorError
from workflows.graph import State, to_dot, to_mermaid
from workflows.payloads import (
    ALL_MODELS,
    PipelineRequest,
    ReviewDecision,
    RunStatus,
    describe_validation_error,
)

app = typer.Typer(
    help="ai-orchestrator: start, review and inspect durable LLM pipeline runs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
out = Console(soft_wrap=True, highlight=False)
err_console = Console(stderr=True)

P = ParamSpec("P")
T = TypeVar("T")


class CliError(OrchestratorError):
    """A problem the user can fix; printed as one line."""


class GraphFormat(StrEnum):
    DOT = "dot"
    MERMAID = "mermaid"


class ReviewMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class DecisionName(StrEnum):
    APPROVE = "approve"
    REEDIT = "reedit"
    REJECT = "reject"


def one_line_errors(func: Callable[P, T]) -> Callable[P, T]:
    """Turn expected failures into one line on stderr and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return func(*args, **kwargs)
        except (OrchestratorError, RPCError) as error:
            err_console.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper


def run_async(coro_fn: Callable[[Client, Settings], Awaitable[T]]) -> T:
    async def main() -> T:
        settings = load_settings()
        try:
            client = await connect(settings)
        except RuntimeError as error:
            if "connect" not in str(error).lower():
                raise
            raise CliError(
                f"cannot reach Temporal at {settings.temporal_address}; is it running? "
                "Start the local stack with `make dev`, or set TEMPORAL_ADDRESS."
            ) from None
        return await coro_fn(client, settings)

    return asyncio.run(main())


def ui_link(settings: Settings, workflow_id: str) -> str:
    namespace = quote(settings.temporal_namespace, safe="")
    return f"{settings.temporal_ui_url}/namespaces/{namespace}/workflows/{quote(workflow_id)}"


def new_request_id() -> str:
    return uuid.uuid4().hex[:24]


def build_request(
    message: str,
    request_id: str | None,
    review: str,
    metadata: str | None,
    options: dict[str, Any],
) -> PipelineRequest:
    try:
        meta = json.loads(metadata) if metadata else {}
    except json.JSONDecodeError as error:
        raise CliError(f"--metadata is not valid JSON: {error}") from None
    raw = {
        "request_id": request_id or new_request_id(),
        "user_message": message,
        "review": review,
        "metadata": meta,
        "options": {k: v for k, v in options.items() if v is not None},
    }
    try:
        return PipelineRequest.model_validate(raw)
    except ValidationError as error:
        raise CliError(f"invalid request: {describe_validation_error(error)}") from None


async def start_run(client: Client, settings: Settings, request: PipelineRequest) -> str:
    """Start a run; the same request_id twice is refused by the server, never run twice."""
    try:
        handle = await client.start_workflow(
            contract.WORKFLOW_TYPE,
            request.model_dump(mode="json"),
            id=request.request_id,
            task_queue=settings.temporal_task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(
                        SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE), "idle"
                    )
                ]
            ),
            static_summary=f"AI pipeline run (review: {request.review})",
            static_details=f"request {request.request_id}: {request.user_message[:200]}",
        )
    except WorkflowAlreadyStartedError:
        raise CliError(
            f"request {request.request_id} was already started; it runs once. "
            f"See `starter.py status {request.request_id}`."
        ) from None
    return handle.id


@app.command()
@one_line_errors
def start(
    message: Annotated[str, typer.Argument(help="The user message, or file:///path, s3://b/k")],
    request_id: Annotated[str | None, typer.Option("--id", help="24 lowercase hex chars")] = None,
    review: Annotated[ReviewMode, typer.Option(help="when a human reviews")] = ReviewMode.AUTO,
    metadata: Annotated[str | None, typer.Option(help="JSON object passed as context")] = None,
    review_timeout: Annotated[float | None, typer.Option(help="seconds")] = None,
    escalation_timeout: Annotated[float | None, typer.Option(help="seconds")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="LLM attempts before DLQ")] = None,
    wait: Annotated[bool, typer.Option(help="wait for the result and print it")] = False,
) -> None:
    """Start a pipeline run and print its id and Web UI link."""
    request = build_request(
        message,
        request_id,
        review.value,
        metadata,
        {
            "review_timeout_s": review_timeout,
            "escalation_timeout_s": escalation_timeout,
            "llm_max_attempts": max_attempts,
        },
    )

    async def go(client: Client, settings: Settings) -> None:
        workflow_id = await start_run(client, settings, request)
        out.print(f"started {workflow_id}")
        out.print(f"web ui: {ui_link(settings, workflow_id)}", highlight=False)
        if wait:
            try:
                result = await client.get_workflow_handle(workflow_id).result()
            except WorkflowFailureError as error:
                raise CliError(f"run failed: {error.cause}") from None
            out.print_json(json.dumps(result, default=str))

    run_async(go)


@app.command()
@one_line_errors
def review(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    decision: Annotated[DecisionName, typer.Argument()],
    feedback: Annotated[str | None, typer.Option(help="what to change (reedit)")] = None,
    reviewer: Annotated[str, typer.Option(help="who decides")] = "cli",
) -> None:
    """Approve, send back (reedit) or reject a run that awaits review."""
    try:
        payload = ReviewDecision(decision=decision.value, reviewer=reviewer, feedback=feedback)
    except ValidationError as error:
        raise CliError(f"invalid review: {describe_validation_error(error)}") from None

    async def go(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(workflow_id)
        try:
            status = await handle.execute_update(
                contract.UPDATE_SUBMIT_REVIEW, payload, result_type=RunStatus
            )
        except WorkflowUpdateFailedError as error:
            raise CliError(f"review refused for {workflow_id}: {error.cause}") from None
        except RPCError as error:
            raise CliError(describe_rpc_error(workflow_id, error)) from None
        out.print(f"{workflow_id}: {decision.value} accepted; now {status.state} ({status.status})")

    run_async(go)


def describe_rpc_error(workflow_id: str, error: RPCError) -> str:
    if error.status == RPCStatusCode.NOT_FOUND:
        return f"no open run with id {workflow_id} (it may have finished or never started)"
    return f"{workflow_id}: {error.message}"


async def fetch_status(client: Client, workflow_id: str) -> RunStatus:
    try:
        status: RunStatus = await client.get_workflow_handle(workflow_id).query(
            contract.QUERY_STATUS, result_type=RunStatus
        )
        return status
    except RPCError as error:
        raise CliError(describe_rpc_error(workflow_id, error)) from None


@app.command()
@one_line_errors
def status(workflow_id: Annotated[str, typer.Argument(help="the run's id")]) -> None:
    """Show where a run is: state, status, progress, attempts, model, last error."""

    async def go(client: Client, settings: Settings) -> None:
        current = await fetch_status(client, workflow_id)
        table = Table(show_header=False, box=None)
        for key in ("state", "status", "progress", "attempts", "model", "last_error"):
            value = getattr(current, key)
            table.add_row(key, f"{value}%" if key == "progress" else str(value))
        table.add_row("web ui", ui_link(settings, workflow_id))
        out.print(table)

    run_async(go)


@app.command()
@one_line_errors
def history(workflow_id: Annotated[str, typer.Argument(help="the run's id")]) -> None:
    """Show every state change of a run as a table."""

    async def go(client: Client, settings: Settings) -> None:
        current = await fetch_status(client, workflow_id)
        table = Table(title=f"{workflow_id}: {current.state}")
        for column in ("at (UTC)", "from", "to", "event", "attempt", "detail"):
            table.add_column(column)
        for entry in current.history:
            table.add_row(
                entry.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                entry.from_state,
                entry.to_state,
                entry.event,
                str(entry.attempt),
                entry.detail or "",
            )
        out.print(table)

    run_async(go)


def list_query(state: State | None) -> str:
    query = f"WorkflowType = '{contract.WORKFLOW_TYPE}'"
    if state is not None:
        query += f" AND {contract.SEARCH_ATTRIBUTE_STATE} = '{state.value}'"
    return query


@app.command("list")
@one_line_errors
def list_runs(
    state: Annotated[State | None, typer.Option(help="only runs in this state")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 50,
) -> None:
    """List runs with their state (from visibility, so no worker is needed)."""

    async def go(client: Client, settings: Settings) -> None:
        table = Table()
        for column in ("workflow id", "state", "temporal status", "started (UTC)"):
            table.add_column(column)
        key = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
        count = 0
        async for execution in client.list_workflows(list_query(state), limit=limit):
            status_name = (
                execution.status.name if execution.status else WorkflowExecutionStatus.RUNNING.name
            )
            table.add_row(
                execution.id,
                execution.typed_search_attributes.get(key) or "?",
                status_name,
                execution.start_time.strftime("%Y-%m-%d %H:%M:%S"),
            )
            count += 1
        out.print(table)
        out.print(f"{count} run(s)")

    run_async(go)


@app.command()
@one_line_errors
def cancel(workflow_id: Annotated[str, typer.Argument(help="the run's id")]) -> None:
    """Cancel a run; its compensation (deleting stored vectors) runs before it ends."""

    async def go(client: Client, settings: Settings) -> None:
        try:
            await client.get_workflow_handle(workflow_id).cancel()
        except RPCError as error:
            raise CliError(describe_rpc_error(workflow_id, error)) from None
        out.print(f"cancellation requested for {workflow_id}")

    run_async(go)


@app.command()
def graph(
    fmt: Annotated[GraphFormat, typer.Option("--format", help="output format")] = GraphFormat.DOT,
) -> None:
    """Print the state graph as Graphviz DOT or Mermaid (generated from workflows/graph.py)."""
    typer.echo(to_dot() if fmt is GraphFormat.DOT else to_mermaid(), nl=False)


@app.command()
def schema(
    name: Annotated[str | None, typer.Argument(help="a payload model; all when omitted")] = None,
) -> None:
    """Print the JSON schema of the contract's payloads."""
    models = {model.__name__: model for model in ALL_MODELS}
    if name is not None and name not in models:
        err_console.print(f"[red]error:[/red] unknown payload {name!r}; one of {', '.join(models)}")
        raise typer.Exit(1)
    chosen = [models[name]] if name else list(models.values())
    typer.echo(json.dumps({m.__name__: m.model_json_schema() for m in chosen}, indent=2))
