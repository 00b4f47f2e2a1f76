"""What `up` shows while the local stack runs: the banner (where each part listens, the
lines for another shell) and a line for each part that exits."""

from __future__ import annotations

import shlex
import time

from rich.console import Console
from rich.text import Text

from aiorch.devstack import notices
from aiorch.devstack.stack import LocalStack
from aiorch_runtime.signals import interrupt_on_stop


def show_banner(stack: LocalStack, console: Console) -> None:
    """What `up` prints once the stack runs: where each part listens (the worker's metrics and
    health endpoints, or why they did not start), the lines for another shell, how to stop."""
    addresses = stack.addresses
    rows = [
        ("Web UI", addresses.ui_url or "(headless)"),
        ("Temporal", addresses.temporal_address),
        ("SQS and S3", addresses.sqs_endpoint_url),
        ("LLM", addresses.openai_base_url),
    ]
    if addresses.capacity_store_url:
        rows.append(("Capacity store", addresses.capacity_store_url))
    rows += [("Logs", str(stack.log_dir)), ("Inputs (file://)", str(addresses.input_dir))]
    rows += restart_rows(stack)
    if pipelines_dir := stack.shell_env().get("PIPELINES_DIR"):
        rows.append(("Pipeline files", pipelines_dir))
    if addresses.inbox_url:
        logins = stack.data_dir / "inbox-logins"
        rows.append(("Review inbox", f"{addresses.inbox_url} (login tokens in {logins})"))
    if addresses.codec_server_url:
        rows.append(
            ("Codec server", f"{addresses.codec_server_url} (token in {stack.codec_token_file})")
        )
    if "ledger" in stack.processes:
        rows.append(("Run ledger", f"{addresses.ledger_url} (aiorch ledger follow; ledger sql)"))
    if "worker" in stack.processes:
        endpoints = stack.worker_endpoints()
        rows += [("Worker metrics", endpoints["metrics"]), ("Worker health", endpoints["health"])]
    console.print("ai-orchestrator local stack", style="bold")
    # One line each, wrapped by the terminal, not cut: addresses and paths are copied whole.
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        style = "bold red" if value.startswith("NOT") else None
        console.print(Text(f"{label:<{width}}{value}", style=style or ""), soft_wrap=True)
    # Plain print: lines to copy and paste, never wrapped or styled.
    print("\n".join(shell_lines(stack)))
    console.print("Press Ctrl-C to stop.", style="bold")


def restart_rows(stack: LocalStack) -> list[tuple[str, str]]:
    """What the stack keeps when it stops and starts again on the same data folder, and what it
    loses: moto serves SQS and S3 from memory, so its dead letters and objects go, and a run kept
    in Temporal would meet its document gone unless the CLI stores documents in the inputs."""
    kept = ["runs (temporal.sqlite)"] if stack.db_file else []
    lost = [] if stack.db_file else ["runs (--ephemeral)"]
    if stack.keep_documents:
        kept.append("the documents the CLI stores (in Inputs)")
        lost.append("dead letters and S3 objects (moto keeps SQS and S3 in memory)")
    else:
        lost.append("the documents the CLI stores and dead letters (moto's S3 and SQS, in memory)")
    kept.append("stored document rows and vectors")
    return [("Kept on restart", ", ".join(kept)), ("Lost on restart", ", ".join(lost))]


def shell_lines(stack: LocalStack) -> list[str]:
    """The lines `up` prints for another shell: ``export`` for each of `LocalStack.shell_env`,
    after an ``unset PAYLOAD_KEYS`` when the keys come as a file (both at once are refused)."""
    env = stack.shell_env()
    unset = ["unset PAYLOAD_KEYS"] if "PAYLOAD_KEYS_FILE" in env else []
    return [*unset, *(f"export {k}={shlex.quote(v)}" for k, v in env.items())]


def watch(stack: LocalStack, console: Console) -> None:
    """Report each part of ``stack`` that exits, once, until interrupted."""
    reported: set[str] = set()
    while True:
        for name, proc in stack.processes.items():
            if name not in reported and not proc.is_running():
                reported.add(name)
                console.print(notices.exited(name, proc.returncode, proc.log_path))
        time.sleep(1.0)


def up(stack: LocalStack, console: Console) -> None:
    """Start ``stack``, show its addresses and report any part that exits, until Ctrl-C or
    SIGTERM; then stop every part.

    Raises:
        LocalStackError: a part could not be started (everything started is stopped again).
    """
    with interrupt_on_stop():
        try:
            with console.status("starting the local stack..."):
                stack.start()
            show_banner(stack, console)
            watch(stack, console)
        except KeyboardInterrupt:
            console.print("stopping...")
        finally:
            stack.stop()
