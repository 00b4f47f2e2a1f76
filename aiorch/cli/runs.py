"""Commands on one run at a time: start, status, history, result, cancel. ``start`` builds
any registered pipeline's request through ``aiorch.cli.requests``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import WorkflowAlreadyStartedError

from aiorch.cli import choices
from aiorch.cli.listing import list_runs
from aiorch.cli.output import (
    CliError,
    RunDidNotComplete,
    err_console,
    one_line_errors,
    out,
    plain,
    print_json,
)
from aiorch.cli.requests import Content, build_request, new_request_id, request_fields
from aiorch.cli.session import about_run, fetch_status, run_async
from aiorch.cli.views import print_history, print_status, status_document
from aiorch.ops import pipelines, visibility
from aiorch.ops.results import NoResult, error_details, run_result
from aiorch.ops.retries import retrying
from aiorch.ops.signing import requester_key_from_settings
from aiorch_runtime.config import Settings, load_settings
from aiorch_runtime.links import inbox_start_line, web_ui_run_url
from workflows.engine.graph import COMPLETED
from workflows.payloads import (
    Lane,
    RequestBase,
    ReviewMode,
    RunResult,
)


def result_reason(result: RunResult) -> str:
    """Why a run ended where it did: the detail of its last history entry."""
    last = result.history[-1] if result.history else None
    return (last.detail if last and last.detail else None) or "see its history"


async def show_final_result(client: Client, workflow_id: str) -> None:
    """Print the finished run's result as JSON (waiting for it to finish).

    Raises:
        RunDidNotComplete: it ended failed, dead_letter or cancelled (after its result, if it
            has one, is printed).
    """
    try:
        result = await run_result(client, workflow_id)
    except NoResult as error:
        raise RunDidNotComplete(str(error)) from None
    print_json(result.model_dump_json())
    if result.state != COMPLETED:
        raise RunDidNotComplete(
            f"run {workflow_id} ended in {result.state}: {result_reason(result)}"
        )


async def start_run(
    client: Client,
    settings: Settings,
    request: RequestBase,
    pipeline: str = pipelines.DEFAULT_PIPELINE,
) -> str:
    """Start a run of ``pipeline``; the same request_id twice is refused by the server, never
    run twice.

    Raises:
        CliError: a run with this id was started before.
    """
    try:
        return await visibility.start_run(
            client,
            request,
            task_queue=settings.temporal_task_queue,
            pipeline=pipelines.named(pipeline),
            priority=visibility.task_priority(request, settings),
        )
    except WorkflowAlreadyStartedError:
        raise CliError(
            f"request {request.request_id} was already started; it runs once. "
            f"See `starter.py status {request.request_id}`."
        ) from None


@one_line_errors
def start(
    message: Annotated[
        str | None,
        typer.Argument(
            help="The user message, or file:///path, s3://b/k; to a pipeline that stores "
            "files (documents), a local file (stored, as with --file) or a reference"
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="a document (text; a PDF too for a pipeline that stores files), stored in S3 "
            "or CLAIM_CHECK_DIR: only its reference is sent",
        ),
    ] = None,
    pipeline: Annotated[
        str, typer.Option(callback=choices.pipeline, help="the pipeline to run")
    ] = pipelines.DEFAULT_PIPELINE,
    schema: Annotated[
        str | None,
        typer.Option(help="its pipeline's schema (documents: the extraction schema, invoice)"),
    ] = None,
    data_input: Annotated[
        str | None,
        typer.Option(
            "--input",
            help="the request's own fields, a JSON object (a pipeline file's run: its input)",
        ),
    ] = None,
    request_id: Annotated[str | None, typer.Option("--id", help="24 lowercase hex chars")] = None,
    review: Annotated[ReviewMode, typer.Option(help="when a human reviews")] = "auto",
    metadata: Annotated[str | None, typer.Option(help="JSON object passed as context")] = None,
    review_timeout: Annotated[
        float | None, typer.Option(help="seconds (at most REVIEW_TIMEOUT_S)")
    ] = None,
    escalation_timeout: Annotated[
        float | None, typer.Option(help="seconds (at most ESCALATION_TIMEOUT_S)")
    ] = None,
    max_attempts: Annotated[
        int | None, typer.Option(help="LLM attempts before DLQ (at most LLM_MAX_ATTEMPTS)")
    ] = None,
    allowed_reviewer: Annotated[
        list[str] | None,
        typer.Option(help="who may review this run (repeat it); default ALLOWED_REVIEWERS"),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(help="whose daily budget the run spends: one in TENANT_BUDGETS_USD"),
    ] = None,
    max_cost: Annotated[
        float | None, typer.Option(help="this run's cost ceiling in USD (below RUN_BUDGET_USD)")
    ] = None,
    lane: Annotated[
        Lane | None,
        typer.Option(help="sync, or batch: the provider's batch API where LLM_BATCH allows it"),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=5,
            help="1 (most urgent) to 5: served first within its tenant's share of a model; "
            "never more urgent than TENANT_MAX_PRIORITY allows the tenant",
        ),
    ] = None,
    batch_eligible: Annotated[
        bool,
        typer.Option(
            "--batch-eligible",
            help="a model call that would queue longer than SPILL_OVER_WAIT_S goes through "
            "the batch lane instead, where SPILL_OVER is on",
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(help="wait for the result and print it; exit status 3 if it did not complete"),
    ] = False,
    print_only: Annotated[
        bool,
        typer.Option(
            "--print",
            help="print the start's input as JSON (signed with REQUESTER_KEY when set), for the "
            "Temporal CLI or another client to start with its request_id as the workflow id, "
            "instead of starting it",
        ),
    ] = False,
) -> None:
    """Start a pipeline run and print its id and Web UI link (on stderr with --wait).

    A document given with --file (or as a path, to a pipeline that stores files), or a message
    above CLAIM_CHECK_THRESHOLD_BYTES, is stored (claim check) and only its reference enters
    the run's history.
    """
    settings = load_settings()
    content = Content(message, file, schema, data_input)
    options = {
        "review_timeout_s": review_timeout,
        "escalation_timeout_s": escalation_timeout,
        "llm_max_attempts": max_attempts,
        "allowed_reviewers": allowed_reviewer or None,
        "max_cost_usd": max_cost,
        "lane": lane,
        "priority": priority,
        "batch_eligible": batch_eligible or None,
    }
    request_id = request_id or new_request_id()
    fields, stored = request_fields(pipelines.named(pipeline), content, settings, request_id)
    request = build_request(
        fields, request_id, review, metadata, options, tenant, pipeline=pipeline
    )
    # With --print or --wait, stdout is for the JSON alone; what happens on the way goes to stderr.
    progress = err_console if print_only or wait else out
    if stored:
        progress.print(plain(stored))
    request = signed(request, settings, pipeline)
    if print_only:
        typer.echo(request.model_dump_json(exclude_none=True))
        return

    async def start_and_report(client: Client, settings: Settings) -> None:
        workflow_id = await start_run(client, settings, request, pipeline)
        progress.print(plain(f"started {workflow_id}"))
        progress.print(plain(f"web ui: {web_ui_run_url(settings, workflow_id)}"))
        if inbox := inbox_start_line(settings, workflow_id):
            progress.print(plain(inbox))
        if wait:
            await show_final_result(client, workflow_id)

    run_async(start_and_report)


def signed(request: RequestBase, settings: Settings, pipeline: str) -> RequestBase:
    """``request`` with a start claim when ``REQUESTER_KEY`` is set: it vouches for this
    request, as a run of this pipeline in this namespace, and the workers take requester and
    tenant from it."""
    starts = requester_key_from_settings(settings)
    if starts is None:
        return request
    return starts.sign_start(
        request,
        workflow_type=pipelines.named(pipeline).workflow_type,
        namespace=settings.temporal_namespace,
        now=datetime.now(UTC),
        ttl=timedelta(seconds=settings.review_token_ttl_s),
    )


JsonOption = Annotated[bool, typer.Option("--json", help="print JSON, for scripts")]


@one_line_errors
def status(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    as_json: JsonOption = False,
) -> None:
    """Show where a run is: state, status, progress, attempts, model, its last error in full
    (with the details its failure carries, such as a model's refusal), the reviews and budget
    decisions it refused and why, its cost and its Web UI link."""

    async def show_status(client: Client, settings: Settings) -> None:
        current = await fetch_status(client, workflow_id)
        details = await error_details(client, workflow_id) if current.last_error else []
        print_status(
            status_document(
                workflow_id,
                current,
                error_details=details,
                web_ui=web_ui_run_url(settings, workflow_id),
            ),
            as_json=as_json,
        )

    run_async(show_status)


@one_line_errors
def history(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    as_json: JsonOption = False,
) -> None:
    """Show every state change of a run: a table, or one line per change where the table
    would not fit the terminal."""

    async def show_history(client: Client, settings: Settings) -> None:
        print_history(workflow_id, await fetch_status(client, workflow_id), as_json=as_json)

    run_async(show_history)


@one_line_errors
def result(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    wait: Annotated[bool, typer.Option(help="wait for a run that is still going")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON (what it prints anyway; as every read command)")
    ] = False,
) -> None:
    """Print a finished run's result as JSON: completed, failed or dead_letter alike (a run
    that ended failed or dead_letter carries it in its failure; the exit status is then 3)."""

    async def show_result(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(workflow_id)
        with about_run(workflow_id):
            description = await retrying(handle.describe)
        if description.status == WorkflowExecutionStatus.RUNNING and not wait:
            state = visibility.state_of(description) or "running"
            raise CliError(f"run {workflow_id} has not finished ({state}); add --wait to wait")
        await show_final_result(client, workflow_id)

    run_async(show_result)


@one_line_errors
def cancel(workflow_id: Annotated[str, typer.Argument(help="the run's id")]) -> None:
    """Cancel a run; its compensation (deleting stored vectors) runs before it ends."""

    async def request_cancel(client: Client, settings: Settings) -> None:
        with about_run(workflow_id):
            await client.get_workflow_handle(workflow_id).cancel()
        out.print(plain(f"cancellation requested for {workflow_id}"))

    run_async(request_cancel)


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    app.command()(start)
    app.command()(status)
    app.command()(history)
    app.command("list")(list_runs)
    app.command()(result)
    app.command()(cancel)
