"""The dev stack's command line, ``python -m aiorch.devstack``: one Typer app of its own,
because nothing in the product may import the dev stack.

==============  =======================================================================
command         what it does
==============  =======================================================================
``up``          run the embedded stack (``make dev``; ``--inbox`` adds the review inbox)
``demo``        run the stack and walk the pipeline's main paths live (``make demo``)
``simulator``   serve the OpenAI-compatible LLM simulator until SIGTERM
``docs``        regenerate the diagrams, schemas and configuration reference (``make graph``)
==============  =======================================================================
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from aiorch.cli.output import cli_app, print_error
from aiorch.devstack import docs, llm_simulator
from aiorch.devstack.banner import up
from aiorch.devstack.demo import run_demo
from aiorch.devstack.processes import LocalStackError
from aiorch.devstack.stack import LocalStack
from aiorch_runtime.config import (
    DEFAULT_CODEC_PORT,
    DEFAULT_HEALTH_PORT,
    DEFAULT_INBOX_PORT,
    DEFAULT_LLM_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_SQS_PORT,
)

app = cli_app(
    "ai-orchestrator's local dev stack: run it, demo it, serve the LLM simulator.", epilog=None
)


def _fail(error: LocalStackError) -> typer.Exit:
    print_error(str(error))
    return typer.Exit(1)


@app.command("up")
def up_command(
    data_dir: Annotated[Path, typer.Option(help="state, logs and keys")] = Path(".data"),
    temporal_port: Annotated[int, typer.Option()] = 7233,
    ui_port: Annotated[int, typer.Option()] = 8233,
    headless: Annotated[bool, typer.Option("--headless", help="no Web UI")] = False,
    sqs_port: Annotated[int, typer.Option()] = DEFAULT_SQS_PORT,
    llm_port: Annotated[int, typer.Option()] = DEFAULT_LLM_PORT,
    codec_port: Annotated[int, typer.Option(help="when PAYLOAD_KEYS is set")] = DEFAULT_CODEC_PORT,
    ephemeral: Annotated[
        bool,
        typer.Option(
            "--ephemeral", help="keep Temporal state in memory, and documents in S3 (in memory)"
        ),
    ] = False,
    no_worker: Annotated[bool, typer.Option("--no-worker", help="start the servers only")] = False,
    no_ledger: Annotated[
        bool, typer.Option("--no-ledger", help="do not run `aiorch ledger follow`")
    ] = False,
    inbox: Annotated[bool, typer.Option("--inbox", help="also serve the review inbox")] = False,
    inbox_port: Annotated[int, typer.Option()] = DEFAULT_INBOX_PORT,
    capacity_store: Annotated[
        bool,
        typer.Option(
            "--capacity-store", help="also run Redis for shared rate limits and tenant budgets"
        ),
    ] = False,
    metrics_port: Annotated[
        int, typer.Option(help="the worker's Prometheus /metrics (0: off)")
    ] = DEFAULT_METRICS_PORT,
    health_port: Annotated[
        int, typer.Option(help="the worker's /healthz and /readyz (0: off)")
    ] = DEFAULT_HEALTH_PORT,
) -> None:
    """Start the local stack and keep it up until Ctrl-C or SIGTERM."""
    stack = LocalStack(
        data_dir,
        temporal_port=temporal_port,
        ui_port=None if headless else ui_port,
        sqs_port=sqs_port,
        llm_port=llm_port,
        codec_port=codec_port,
        persist=not ephemeral,
        keep_documents=not ephemeral,
        with_worker=not no_worker,
        with_ledger=not no_worker and not no_ledger,
        with_inbox=inbox,
        inbox_port=inbox_port,
        with_capacity_store=capacity_store,
        worker_env={"METRICS_PORT": str(metrics_port), "HEALTH_PORT": str(health_port)},
    )
    try:
        up(stack, Console())
    except LocalStackError as error:
        raise _fail(error) from None


@app.command()
def demo(
    data_dir: Annotated[Path, typer.Option(help="state, logs and keys")] = Path(".data/demo"),
    exit_after: Annotated[
        bool, typer.Option("--exit", help="stop the stack when the demo ends")
    ] = False,
) -> None:
    """Start the stack, walk the main paths live, then keep the Web UI up until Ctrl-C."""
    try:
        ok = run_demo(data_dir, stay_up=not exit_after)
    except LocalStackError as error:
        raise _fail(error) from None
    if not ok:
        raise typer.Exit(1)


@app.command()
def simulator(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="0 picks a free port")] = DEFAULT_LLM_PORT,
    embedding_dim: Annotated[int, typer.Option(min=1, max=8192)] = 64,
    rpm: Annotated[
        int | None, typer.Option(min=1, help="requests per minute per model (shared limit)")
    ] = None,
    tpm: Annotated[
        int | None, typer.Option(min=1, help="tokens per minute per model (shared limit)")
    ] = None,
) -> None:
    """Serve the OpenAI-compatible LLM simulator (with fault injection) until SIGTERM.

    Its fault directives and control endpoints: docs/simulator.md; --rpm/--tpm turn on the
    provider-style rate limits (headers and 429s), also set at run time through
    /_sim/ratelimits.
    """
    asyncio.run(llm_simulator.serve(host, port, embedding_dim, rpm=rpm, tpm=tpm))


@app.command("docs")
def docs_command() -> None:
    """Rewrite the generated docs (diagrams, schemas, configuration reference) from the code."""
    for written in docs.write_documents():
        typer.echo(f"wrote {written.relative_to(docs.ROOT)}")
