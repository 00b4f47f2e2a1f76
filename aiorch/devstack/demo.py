"""``make demo``: the embedded stack, live, walking both pipelines' main paths.

Starts the Temporal dev server (Web UI on :8233), SQS, the LLM simulator and a worker; starts
one run per scenario (the LLM pipeline's, then the document pipeline's: invoices whose fields
the simulator reads off the text); plays the reviewer for the runs that wait for one; shows a
live table of states until every run has ended; checks each ended where it should; then keeps
the stack (and the Web UI) up until Ctrl-C. With ``--exit`` (or when stdin is not a terminal) it
stops at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from aiorch.cli.output import fits_terminal
from aiorch.devstack.processes import port_or_free
from aiorch.devstack.stack import LocalStack, StackAddresses
from aiorch.ops import pipelines, reviews
from aiorch.ops.signing import SigningKey
from aiorch.ops.visibility import start_run
from aiorch_runtime.config import (
    DEFAULT_HEALTH_PORT,
    DEFAULT_LLM_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_SQS_PORT,
    load_settings,
)
from aiorch_runtime.signals import interrupt_on_stop
from aiorch_runtime.temporal import AiOrchestratorPlugin
from workflows import contract
from workflows.documents.contract import PIPELINE_DOCUMENTS
from workflows.documents.graph import DocState
from workflows.llm.graph import State
from workflows.payloads import RequestBase, ReviewDecision, ReviewMode, RunStatus

POLL_S = 0.4
DEMO_TIMEOUT_S = 180.0
# The shipped pipelines the scenarios walk, by their registered names.
LLM, DOCUMENTS = contract.PIPELINE_LLM, PIPELINE_DOCUMENTS

# The fields of an invoice that adds up (the lines, 13.50 + 5.00, plus tax 3.70 make 22.20),
# and the invoice as printed: the simulator reads "Label: value" and "Line: ..." lines.
INVOICE: dict[str, Any] = {
    "vendor": "Acme Supplies Ltd",
    "invoice_number": "INV-2026-0042",
    "issue_date": "2026-11-02",
    "due_date": "2026-12-02",
    "currency": "EUR",
    "line_items": [
        {"description": "Widgets", "quantity": "3", "unit_price": "4.50", "amount": "13.50"},
        {"description": "Shipping", "quantity": "1", "unit_price": "5.00", "amount": "5.00"},
    ],
    "tax": "3.70",
    "total": "22.20",
}


def printed(invoice: dict[str, Any]) -> str:
    """``invoice`` as the text of a document."""
    lines = [
        f"INVOICE {invoice['invoice_number']}",
        f"Vendor: {invoice['vendor']}",
        f"Invoice number: {invoice['invoice_number']}",
        f"Issue date: {invoice['issue_date']}",
        f"Due date: {invoice['due_date']}",
        f"Currency: {invoice['currency']}",
        *(
            f"Line: {item['description']} | {item['quantity']} | {item['unit_price']} | "
            f"{item['amount']}"
            for item in invoice["line_items"]
        ),
        f"Tax: {invoice['tax']}",
        f"Total: {invoice['total']}",
    ]
    return "\n".join(lines)


@dataclass
class Scenario:
    """One demo run: its pipeline, what it asks (the LLM pipeline's message, the document
    pipeline's document), how the reviewer answers, where it must end."""

    name: str
    message: str
    expected: str
    pipeline: str = LLM
    review: ReviewMode = "auto"
    decisions: list[ReviewDecision] = field(default_factory=list)
    max_attempts: int | None = None
    workflow_id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    status: RunStatus | None = None

    def request(self) -> RequestBase:
        """The run's request, as its pipeline's contract has it."""
        pipeline = pipelines.named(self.pipeline)
        options = {"llm_max_attempts": self.max_attempts} if self.max_attempts else {}
        request: RequestBase = pipeline.request.model_validate(
            {
                "request_id": self.workflow_id,
                pipeline.shape.message_field or "input": self.message,
                "review": self.review,
                "metadata": {"demo": self.name},
                "options": options,
            }
        )
        return request


def scenarios() -> list[Scenario]:
    approve = ReviewDecision(decision="approve", reviewer="demo-reviewer")
    wrong_total = {**INVOICE, "invoice_number": "INV-2026-0043", "total": "25.00"}
    return [
        Scenario("auto", "Explain durable execution in one paragraph.", State.COMPLETED),
        Scenario(
            "review, approve",
            "Draft a reply to an unhappy customer. [sim:review]",
            State.COMPLETED,
            decisions=[approve],
        ),
        Scenario(
            "reedit, approve",
            "Summarise our refund policy for the website.",
            State.COMPLETED,
            review="always",
            decisions=[
                ReviewDecision(
                    decision="reedit", reviewer="demo-reviewer", feedback="Mention the 30 days."
                ),
                approve,
            ],
        ),
        Scenario(
            "review, reject",
            "Write a press release announcing record profits.",
            State.FAILED,
            review="always",
            decisions=[
                ReviewDecision(decision="reject", reviewer="demo-legal", feedback="Not approved.")
            ],
        ),
        Scenario(
            "429 x2, retry",
            "Translate 'hello' to French. [sim:status=429:times=2:retry_after=1]",
            State.COMPLETED,
        ),
        Scenario(
            "503, dead letter",
            "Classify this ticket. [sim:status=503]",
            State.DEAD_LETTER,
            max_attempts=3,
        ),
        # Valid fields are still the model's reading: a person approves them (the default
        # DOCUMENT_REVIEW_MIN), then they are stored.
        Scenario(
            "invoice, approved",
            printed(INVOICE),
            DocState.COMPLETED,
            pipeline=DOCUMENTS,
            decisions=[approve],
        ),
        # The total does not add up: the run waits for review with the problem; the reviewer
        # approves with the total corrected, which is validated again, then stored.
        Scenario(
            "wrong total, corrected",
            printed(wrong_total),
            DocState.COMPLETED,
            pipeline=DOCUMENTS,
            decisions=[
                ReviewDecision(
                    decision="approve",
                    reviewer="demo-reviewer",
                    fields={**wrong_total, "total": INVOICE["total"]},
                )
            ],
        ),
    ]


async def start_runs(client: Client, runs: list[Scenario]) -> None:
    for run in runs:
        await start_run(
            client,
            run.request(),
            task_queue=contract.DEFAULT_TASK_QUEUE,
            pipeline=pipelines.named(run.pipeline),
            summary=f"demo: {run.name}",
        )


async def advance(client: Client, run: Scenario, key: SigningKey) -> None:
    """Refresh the run's status and play the reviewer when it waits for one (signing each
    decision with the stack's key, as the review inbox signs for the reviewer it knows)."""
    handle: WorkflowHandle[object, object] = client.get_workflow_handle(run.workflow_id)
    run.status = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
    if run.status.state in pipelines.review_states() and run.decisions:
        decision = run.decisions.pop(0).model_copy(update={"review_round": run.status.review_round})
        outcome = await reviews.submit_review(
            client, run.workflow_id, decision, signer=key.signer()
        )
        run.status = outcome.status


def render(runs: list[Scenario], elapsed: float, console: Console) -> Table:
    """The runs as a table that fits ``console``: boxed, with progress bars and run ids, or
    in a narrow terminal without them, so no state or model name is cut."""
    table = _runs_table(runs, elapsed, compact=False)
    return table if fits_terminal(table, console) else _runs_table(runs, elapsed, compact=True)


def _runs_table(runs: list[Scenario], elapsed: float, *, compact: bool) -> Table:
    title = f"ai-orchestrator demo ({elapsed:4.1f}s)"
    table = Table(title=title, box=None, pad_edge=False) if compact else Table(title=title)
    columns = ("pipeline", "scenario", "state", "progress", "attempts", "model")
    for column in columns if compact else ("pipeline", "scenario", "run", *columns[2:]):
        table.add_column(column, overflow="fold")
    for run in runs:
        s = run.status
        progress = s.progress if s else 0
        cells = [
            run.pipeline,
            run.name,
            s.state if s else "starting",
            f"{progress}%" if compact else ProgressBar(total=100, completed=progress, width=10),
            str(s.attempts) if s else "",
            s.model or "" if s else "",
        ]
        table.add_row(*(cells if compact else [*cells[:2], run.workflow_id[:8], *cells[2:]]))
    return table


async def drive(stack: LocalStack, console: Console) -> bool:
    # The worker's converter: with PAYLOAD_KEYS in the environment, the demo runs encrypted.
    plugin = AiOrchestratorPlugin(load_settings())
    client = await Client.connect(stack.addresses.temporal_address, plugins=[plugin])
    runs = scenarios()
    await start_runs(client, runs)
    started = time.monotonic()
    with Live(render(runs, 0, console), console=console, refresh_per_second=8) as live:
        while time.monotonic() - started < DEMO_TIMEOUT_S:
            for run in runs:
                if run.status is None or run.status.state not in pipelines.terminal_states():
                    try:
                        await advance(client, run, stack.reviewer_key)
                    except RPCError as error:
                        console.print(f"[yellow]{run.name}: {error.message}[/yellow]")
            live.update(render(runs, time.monotonic() - started, console))
            if all(r.status and r.status.state in pipelines.terminal_states() for r in runs):
                break
            await asyncio.sleep(POLL_S)
    console.print()
    ok = True
    for run in runs:
        final = run.status.state if run.status else "unknown"
        good = final == run.expected
        ok &= good
        mark = "[green]ok[/green]" if good else f"[red]expected {run.expected}[/red]"
        console.print(f"  {run.pipeline:<9} {run.name:<22} {final:<12} {mark}")
    return ok


def closing_lines(addresses: StackAddresses, *, stopping: str | None) -> list[str]:
    """What the demo says at its end: where to look while the stack stays up; when it stops
    (``stopping``: why), that it stops and how to keep one up (its links would lead nowhere),
    and where the rows it stored stay."""
    rows = f"Rows:    the invoices' fields in {addresses.document_store_url}"
    if stopping is not None:
        return [f"Stack stopped ({stopping}); `make dev` keeps one up.", rows]
    return [
        f"Web UI:  {addresses.ui_url}/namespaces/default/workflows",
        f"CLI:     temporal workflow list --address {addresses.temporal_address}",
        f"Shell:   export TEMPORAL_ADDRESS={addresses.temporal_address} "
        f"OPENAI_BASE_URL={addresses.openai_base_url}; python starter.py list",
        rows,
    ]


def run_demo(data_dir: Path, *, stay_up: bool) -> bool:
    """Start the stack in ``data_dir``, walk the scenarios, report where each run ended, and
    (with ``stay_up``) keep the stack up until Ctrl-C or SIGTERM.

    Returns:
        Whether every run ended where its scenario expects.

    Raises:
        LocalStackError: a part of the stack could not be started.
    """
    console = Console()
    stack = LocalStack(
        data_dir,
        temporal_port=port_or_free(7233),
        ui_port=port_or_free(8233),
        sqs_port=port_or_free(DEFAULT_SQS_PORT),
        llm_port=port_or_free(DEFAULT_LLM_PORT),
        persist=True,
        keep_documents=True,
        with_worker=True,
        # Short backoffs so the retry and dead-letter paths play out in seconds.
        worker_env={
            "LLM_BACKOFF_INITIAL_S": "0.5",
            "LLM_BACKOFF_MAX_S": "2",
            "METRICS_PORT": str(port_or_free(DEFAULT_METRICS_PORT)),
            "HEALTH_PORT": str(port_or_free(DEFAULT_HEALTH_PORT)),
        },
    )
    with interrupt_on_stop():
        try:
            with console.status(
                "starting Temporal (Web UI), SQS, the LLM simulator and a worker..."
            ):
                addresses = stack.start()
            ok = asyncio.run(drive(stack, console))
            if not ok:
                console.print(f"[red]some runs did not end where expected; see {stack.log_dir}[/]")
                stopping: str | None = "a run did not end where expected"
            elif not stay_up:
                stopping = "--exit"
            else:
                stopping = None if sys.stdin.isatty() else "stdin is not a terminal"
            console.print()
            # Soft-wrapped: a line to paste, which the terminal wraps, never broken in two.
            for line in closing_lines(addresses, stopping=stopping):
                console.print(line, highlight=False, soft_wrap=True, markup=False)
            if stopping is not None:
                return ok
            console.print(
                "The stack stays up for exploring. Press Ctrl-C to stop it.", style="bold"
            )
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            console.print("stopping...")
            return True
        finally:
            stack.stop()
