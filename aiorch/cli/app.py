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
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar
from urllib.parse import quote

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import claim_check, codec_server, dead_letters, operations, reviews
from aiorch.ops.results import run_result
from aiorch.ops.signing import SigningKey, signing_key_from_settings
from aiorch.runtime.config import Settings, load_settings
from aiorch.runtime.telemetry import tracing
from aiorch.runtime.temporal import connect
from workflows import contract
from workflows.errors import OrchestratorError
from workflows.graph import State, first_shown_state, to_dot, to_mermaid
from workflows.payloads import (
    ALL_MODELS,
    PipelineRequest,
    PipelineResult,
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
# One error line stays one line (no wrapping at the terminal's width), so it can be grepped.
err_console = Console(stderr=True, soft_wrap=True)

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
    settings = load_settings()

    async def main() -> T:
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

    # With OTEL_EXPORTER_OTLP_ENDPOINT set, the start call opens the run's trace.
    with tracing(settings, "starter"):
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
            # The state the run will first rest in, set at start (free): its first task need
            # not publish it (a billable upsert).
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(
                        contract.AI_STATE,
                        first_shown_state(by_reference=request.is_reference).value,
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
    message: Annotated[
        str | None, typer.Argument(help="The user message, or file:///path, s3://b/k")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="a text document; stored in S3, only its reference is sent"),
    ] = None,
    request_id: Annotated[str | None, typer.Option("--id", help="24 lowercase hex chars")] = None,
    review: Annotated[ReviewMode, typer.Option(help="when a human reviews")] = ReviewMode.AUTO,
    metadata: Annotated[str | None, typer.Option(help="JSON object passed as context")] = None,
    review_timeout: Annotated[float | None, typer.Option(help="seconds")] = None,
    escalation_timeout: Annotated[float | None, typer.Option(help="seconds")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="LLM attempts before DLQ")] = None,
    allowed_reviewer: Annotated[
        list[str] | None,
        typer.Option(help="who may review this run (repeat it); default ALLOWED_REVIEWERS"),
    ] = None,
    wait: Annotated[bool, typer.Option(help="wait for the result and print it")] = False,
) -> None:
    """Start a pipeline run and print its id and Web UI link.

    A document given with --file, or a message above CLAIM_CHECK_THRESHOLD_BYTES, is stored
    (claim check) and only its reference enters the run's history.
    """
    request_id = request_id or new_request_id()
    user_message, stored = claim_check.resolve_message(load_settings(), request_id, message, file)
    request = build_request(
        user_message,
        request_id,
        review.value,
        metadata,
        {
            "review_timeout_s": review_timeout,
            "escalation_timeout_s": escalation_timeout,
            "llm_max_attempts": max_attempts,
            "allowed_reviewers": allowed_reviewer or None,
        },
    )
    if stored:
        out.print(stored, highlight=False)

    async def go(client: Client, settings: Settings) -> None:
        workflow_id = await start_run(client, settings, request)
        out.print(f"started {workflow_id}")
        out.print(f"web ui: {ui_link(settings, workflow_id)}", highlight=False)
        if wait:
            result = await run_result(client, workflow_id)
            out.print_json(result.model_dump_json())
            if result.state != State.COMPLETED.value:
                raise CliError(
                    f"run {workflow_id} ended in {result.state}: {result_reason(result)}"
                )

    run_async(go)


@app.command()
@one_line_errors
def review(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    decision: Annotated[DecisionName, typer.Argument()],
    feedback: Annotated[str | None, typer.Option(help="what to change (reedit)")] = None,
    reviewer: Annotated[
        str | None, typer.Option(help="who decides (default: the signing key's id, else cli)")
    ] = None,
    review_round: Annotated[
        int | None,
        typer.Option("--round", min=1, help="the round you reviewed (status shows it)"),
    ] = None,
) -> None:
    """Approve, send back (reedit) or reject a run that awaits review.

    Applied once however often it is sent: the same reviewer's decision on the same round
    returns the first result, and a decision for a round that is over is refused. With
    REVIEWER_KEY (or REVIEWER_KEY_FILE) the decision is signed for that round.
    """
    settings = load_settings()
    key = signing_key_from_settings(settings)
    try:
        payload = ReviewDecision(
            decision=decision.value,
            reviewer=reviewer or (key.key_id if key else "cli"),
            feedback=feedback,
            review_round=review_round,
        )
    except ValidationError as error:
        raise CliError(f"invalid review: {describe_validation_error(error)}") from None

    async def go(client: Client, settings: Settings) -> None:
        try:
            outcome = await reviews.submit_review(
                client, workflow_id, payload, signer=review_signer(settings, key)
            )
        except WorkflowUpdateFailedError as error:
            raise CliError(f"review refused for {workflow_id}: {refusal_text(error)}") from None
        except RPCError as error:
            raise CliError(describe_rpc_error(workflow_id, error)) from None
        out.print(outcome.describe(workflow_id))

    run_async(go)


@app.command("review-all")
@one_line_errors
def review_all(
    decision: Annotated[DecisionName, typer.Argument()],
    state: Annotated[State, typer.Option(help="review every open run in this state")] = (
        State.AWAIT_REVIEW
    ),
    feedback: Annotated[str | None, typer.Option(help="what to change (reedit)")] = None,
    reviewer: Annotated[
        str | None, typer.Option(help="who decides (default: the signing key's id, else cli)")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="updates in flight")] = 32,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many runs")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
) -> None:
    """Approve (or reedit/reject) every run waiting in a review state, with a progress bar.

    Each run's decision names the round that run is in (read first), so it is applied once to
    that round; "applied" counts only runs that recorded it. With REVIEWER_KEY (or
    REVIEWER_KEY_FILE) each decision is signed for its run and round.
    """
    from aiorch.ops import batch  # the batch machinery loads only for this command

    if state not in batch.REVIEWABLE_STATES:
        raise CliError(f"runs in {state.value} take no review; use await_review or escalate")
    settings = load_settings()
    key = signing_key_from_settings(settings)
    try:
        payload = ReviewDecision(
            decision=decision.value,
            reviewer=reviewer or (key.key_id if key else "cli"),
            feedback=feedback,
        )
    except ValidationError as error:
        raise CliError(f"invalid review: {describe_validation_error(error)}") from None

    async def go(client: Client, settings: Settings) -> None:
        ids = await batch.waiting_runs(client, state, limit)
        if not ids:
            out.print(f"no open run is in {state.value}")
            return
        if not yes and not typer.confirm(f"{decision.value} {len(ids)} run(s) in {state.value}?"):
            raise typer.Exit(1)
        done = await batch.review_all_with_progress(
            client,
            ids,
            payload,
            concurrency=concurrency,
            console=err_console,
            signer=review_signer(settings, key),
        )
        out.print(
            f"{decision.value}: {done.applied} applied, {len(done.refused)} refused, "
            f"{len(done.errors)} failed of {done.found} in {done.seconds:.1f}s "
            f"({done.per_second:.0f}/s)"
        )
        for workflow_id, reason in [*done.refused.items(), *done.errors.items()][:20]:
            out.print(f"  {workflow_id}: {reason}")
        if done.errors:
            raise CliError(f"{len(done.errors)} review(s) failed; run the command again")

    run_async(go)


def result_reason(result: PipelineResult) -> str:
    """Why a run ended where it did: the detail of its last history entry."""
    last = result.history[-1] if result.history else None
    return (last.detail if last and last.detail else None) or "see its history"


def review_signer(settings: Settings, key: SigningKey | None) -> reviews.Signer | None:
    """Signs each decision for its run and round with ``key`` (None: reviews go unsigned)."""
    return key.signer(timedelta(seconds=settings.review_token_ttl_s)) if key else None


def refusal_text(error: WorkflowUpdateFailedError) -> str:
    """The run's reason for refusing an update, without the Python type it was raised as."""
    cause = error.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or error)


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
        keys = ("state", "status", "progress", "attempts", "review_round", "model", "last_error")
        for key in keys:
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


dlq_app = typer.Typer(
    help="Dead-lettered runs: list them from the SQS queue, start them again (redrive).",
    no_args_is_help=True,
)
app.add_typer(dlq_app, name="dlq")


@dlq_app.command("list")
@one_line_errors
def dlq_list(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Show dead-lettered runs (id, failed state, attempts, last error, age); consumes nothing."""
    queue = dead_letters.DeadLetterQueue.from_settings(load_settings())
    letters = queue.peek()
    now = datetime.now(UTC)
    if as_json:
        typer.echo(dead_letters.to_json(letters, now))
        return
    table = Table()
    table.add_column("workflow id", no_wrap=True)
    for column in ("failed state", "attempts", "last error", "age"):
        table.add_column(column)
    for letter in letters:
        body = letter.body
        table.add_row(
            body.workflow_id if body else f"(message {letter.message_id})",
            body.failed_state if body else "?",
            str(body.attempts) if body else "?",
            escape((body.last_error or "") if body else (letter.problem or ""))[:160],
            dead_letters.format_age(letter.age(now)),
        )
    out.print(table)
    out.print(f"{len(letters)} dead letter(s) in the {queue.where}")


@dlq_app.command("redrive")
@one_line_errors
def dlq_redrive(
    workflow_id: Annotated[str | None, typer.Argument(help="the dead-lettered run's id")] = None,
    redrive_all: Annotated[bool, typer.Option("--all", help="every message in the queue")] = False,
) -> None:
    """Start dead-lettered runs again (fresh attempt budget); delete each message after.

    Each message is checked against Temporal first: only a run that really ended in dead_letter,
    and is still the latest of its id, is started again, with its own request from its history.
    Anything else is refused and left in the queue; the exit status is then 1.
    """
    if (workflow_id is None) == (not redrive_all):
        raise CliError("name one run id to redrive, or pass --all (not both)")
    from aiorch.ops import redrive  # loads only for this command

    async def go(client: Client, settings: Settings) -> list[redrive.RedriveOutcome]:
        return await redrive.redrive(
            client,
            dead_letters.DeadLetterQueue.from_settings(settings),
            task_queue=settings.temporal_task_queue,
            select=workflow_id,
            progress=lambda line: out.print(escape(line)),
        )

    outcomes = run_async(go)
    out.print(redrive.summarize(outcomes))
    if any(outcome.action in ("failed", "refused") for outcome in outcomes):
        raise typer.Exit(1)


@app.command("codec-server")
@one_line_errors
def codec_server_command(
    host: Annotated[str | None, typer.Option(help="default: CODEC_SERVER_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="default: CODEC_SERVER_PORT")] = None,
) -> None:
    """Serve /encode and /decode for the Web UI and CLI (needs PAYLOAD_KEYS, CODEC_SERVER_TOKEN)."""
    try:
        asyncio.run(codec_server.serve(load_settings(), host, port))
    except OSError as error:
        raise CliError(f"codec server cannot listen: {error.strerror or error}") from None


def _seconds(value: operations.DurationSummary) -> float | None:
    return None if value.mean is None else round(value.mean.total_seconds(), 3)


def _mean_text(value: operations.DurationSummary, what: str) -> str:
    if value.mean is None:
        return f"n/a (no {what})"
    return f"{operations.format_duration(value.mean)} (over {value.samples} {what})"


@app.command()
@one_line_errors
def stats(
    sample: Annotated[int, typer.Option(min=1, help="recent finished runs to average")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Runs by state (from visibility), outcome counts, average processing time and approval
    delay (over the most recent finished runs)."""
    result = run_async(lambda client, _: operations.collect_stats(client, sample=sample))
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "total": result.total,
                    "states": {
                        c.state: {"open": c.open, "closed": c.closed} for c in result.states
                    },
                    "processing_s": {k: _seconds(v) for k, v in result.processing.items()},
                    "approval_delay_s": _seconds(result.approval_delay),
                    "approvals": result.approval_delay.samples,
                    "runs_sampled": result.runs_sampled,
                }
            )
        )
        return
    table = Table(title=f"{result.total} run(s) by state")
    for column in ("state", "open", "closed", "total"):
        table.add_column(column, justify="left" if column == "state" else "right")
    for row in result.states:
        table.add_row(row.state, str(row.open), str(row.closed), str(row.total))
    if result.without_state:
        table.add_row("(no AiState)", "", "", str(result.without_state))
    out.print(table)
    outcomes = ("completed", "failed", "dead_letter", "cancelled")
    out.print("  ".join(f"{name}: {result.count(name)}" for name in outcomes))
    overall = result.processing.get("all", operations.DurationSummary(None, 0))
    out.print(f"average processing time: {_mean_text(overall, 'finished runs')}")
    out.print(f"average approval delay: {_mean_text(result.approval_delay, 'approvals')}")


@app.command()
@one_line_errors
def stuck(
    older_than: Annotated[str, typer.Option(help="e.g. 90s, 15m, 1h30m, 2d")] = "1h",
    state: Annotated[State | None, typer.Option(help="only runs in this state")] = None,
    action: Annotated[
        operations.StuckAction, typer.Option(help="what to do with them")
    ] = operations.StuckAction.NONE,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask to confirm")] = False,
    reason: Annotated[str | None, typer.Option(help="recorded in each run's history")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many runs")] = 10_000,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Runs that have sat in one state longer than --older-than, and a bulk action on them:
    timeout (end the review wait now), dead-letter (via escalate), or cancel."""
    try:
        threshold = operations.parse_duration(older_than)
    except ValueError as error:
        raise CliError(f"--older-than: {error}") from None

    async def go(client: Client, settings: Settings) -> None:
        now = datetime.now(UTC)
        runs = await operations.find_stuck(client, threshold, state=state, now=now, limit=limit)
        targets = [run for run in runs if operations.applies(action, run)]
        if as_json:
            listed = [
                {"workflow_id": r.workflow_id, "state": r.state, "since": r.since.isoformat()}
                for r in runs
            ]
            out.print_json(json.dumps({"runs": listed, "targets": len(targets)}))
        else:
            table = Table(title=f"{len(runs)} run(s) in one state longer than {older_than}")
            for column in ("workflow id", "state", "since (UTC)", "for"):
                table.add_column(column)
            for run in runs:
                since = run.since.strftime("%Y-%m-%d %H:%M:%S")
                age = operations.format_duration(run.age(now))
                table.add_row(run.workflow_id, run.state or "?", since, age)
            out.print(table)
        if action is operations.StuckAction.NONE or not runs:
            return
        if len(targets) < len(runs):
            out.print(f"{len(runs) - len(targets)} run(s) not in a state `{action}` acts on")
        if not targets:
            return
        if not yes:
            typer.confirm(f"{action} {len(targets)} run(s)?", abort=True)
        with Progress(console=out) as progress:
            task = progress.add_task(f"{action}", total=len(targets))
            report = await operations.apply_action(
                client,
                targets,
                action,
                reason=reason,
                on_progress=lambda _: progress.advance(task),
            )
        out.print(f"{action}: {len(report.done)} done, {len(report.failed)} failed")
        for workflow_id, problem in sorted(report.failed.items()):
            out.print(f"  {workflow_id}: {problem}")
        if report.failed:
            raise typer.Exit(1)

    run_async(go)
