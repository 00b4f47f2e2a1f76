"""The operator's command line, fed text an attacker wrote: a workflow id, an operator reason, a
search attribute value and a dead-letter message, each holding Rich markup (``[/]``, ``[bold
red]``) and terminal escape sequences (ESC, BEL, a C1 CSI). The attacker holds a Temporal client
and the queue; the operator runs `aiorch` (in this process, Typer's runner) against the real
stack. Every command prints the text literally, without a control byte, and never crashes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import boto3
import pytest
from temporalio.client import WorkflowFailureError
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.builders import new_request_id
from tests.support.live_runs import request, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker
from workflows import contract

pytestmark = pytest.mark.e2e

MARKUP = "[/][bold red]x"
# ESC sequences (colour, clear screen, a window title ended by BEL) and a C1 CSI.
ESCAPES = "\x1b[31m\x1b[2J\x1b]0;pwned\x07\x9b2J"
# A run's id must be its request id (hex), so a run under this id fails at once: what it
# leaves (its id in lists and histories) is still the attacker's text; escapes come through an
# operator's reason on a run that did start.
EVIL_ID = f"run-{MARKUP}-end"
EVIL_REASON = f"{MARKUP} reason {ESCAPES} done"
CONTROL_BYTES = ("\x1b", "\x07", "\x9b")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from stack_with_worker(tmp_path_factory.mktemp("terminal-output"), E2E_WORKER_ENV)


@dataclass(frozen=True)
class Planted:
    """What the attacker left for the operator to look at."""

    dead_run: str  # ended dead_letter by an operator signal carrying the reason
    evil_run: str  # failed at once under an id made of markup
    forged_id: str  # the workflow id of a dead letter no run sent


async def plant(stack: LocalStack) -> Planted:
    client = await connect(stack)
    dead_request = request("Look at me", review="always")
    dead = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        dead_request,
        id=dead_request["request_id"],
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    evil = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        request("Review me", review="always"),
        id=EVIL_ID,
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    await wait_for_state(dead, "await_review")
    await dead.signal(contract.SIGNAL_EXPIRE_REVIEW, {"reason": EVIL_REASON})
    await wait_for_state(dead, "escalate")
    await dead.signal(contract.SIGNAL_DEAD_LETTER, {"reason": EVIL_REASON})
    assert (await finished(dead)).state == "dead_letter"
    with pytest.raises(WorkflowFailureError):
        await evil.result()
    stray_id, forged_id = f"stray-{MARKUP}-{ESCAPES}", f"forged-{MARKUP}-{ESCAPES}"
    # On the worker's task queue (the tools list no other), but due only tomorrow: no worker
    # has picked it up, so its AiState is still the attacker's text.
    await client.start_workflow(
        contract.WORKFLOW_TYPE,
        request("never picked up", request_id=new_request_id()),
        id=stray_id,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        start_delay=timedelta(days=1),
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(contract.AI_STATE, f"{MARKUP}{ESCAPES}")]
        ),
    )
    sqs = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=stack.addresses.sqs_endpoint_url)
    queue_url = sqs.get_queue_url(QueueName="ai-orchestrator-dlq")["QueueUrl"]
    forged = {
        "workflow_id": forged_id,
        "run_id": "r",
        "request": {},
        "failed_state": f"{MARKUP}{ESCAPES}",
        "attempts": 1,
        "last_error": EVIL_REASON,
    }
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(forged))
    return Planted(dead_run=dead.id, evil_run=evil.id, forged_id=forged_id)


@pytest.fixture(scope="module")
def planted(stack: LocalStack) -> Planted:
    return asyncio.run(plant(stack))


def operator(stack: LocalStack, *args: str, exit_code: int = 0) -> str:
    """``aiorch ARGS`` in this process, as the operator runs it against the stack: its output
    (stdout and stderr), after checking it ended with ``exit_code`` (no crash)."""
    env = {**stack.addresses.env(), "COLUMNS": "1000", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    done = CliRunner().invoke(build_app(), list(args), env=env)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert done.exit_code == exit_code, done.output
    return done.output


def assert_shown_literally(output: str, *texts: str) -> None:
    for byte in CONTROL_BYTES:
        assert byte not in output, f"{byte!r} reached the terminal"
    for text in texts:
        assert text in output, f"{text!r} is not shown as it is"


# What the operator sees of the attacker's text: markup as characters, escapes without ESC,
# BEL and CSI (the printable rest of each sequence stays, which shows something was there).
SHOWN_ESCAPES = "[31m[2J]0;pwned2J"
SHOWN_REASON = f"{MARKUP} reason {SHOWN_ESCAPES} done"
STRAY = f"stray-{MARKUP}-{SHOWN_ESCAPES}"
FORGED = f"forged-{MARKUP}-{SHOWN_ESCAPES}"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["history", "{dead}"], [SHOWN_REASON]),
        (["history", "{evil}"], [f"{EVIL_ID}: failed"]),
        (["status", "{dead}"], [f"dead-lettered by operator: {SHOWN_REASON}"]),
        (["list"], [EVIL_ID, STRAY, f"{MARKUP}{SHOWN_ESCAPES}"]),
        (["stats"], ["dead_letter", "(no AiState)"]),
        (["stuck", "--older-than", "0s"], [STRAY, f"{MARKUP}{SHOWN_ESCAPES}"]),
        (["dlq", "list"], [FORGED, SHOWN_REASON]),
    ],
)
def test_attacker_text_is_shown_as_text_without_control_bytes(
    stack: LocalStack, planted: Planted, command: list[str], shown: list[str]
) -> None:
    """history, status, list, stats, stuck and dlq list each show the workflow ids, reasons,
    states and queue messages an attacker wrote as the characters they are made of (markup
    included) and without a control byte; none crashes on ``[/]``."""
    parts = (part.format(dead=planted.dead_run, evil=planted.evil_run) for part in command)
    output = operator(stack, *parts)
    assert_shown_literally(output, *shown)


def test_result_json_keeps_the_data_and_escapes_every_control_character(
    stack: LocalStack, planted: Planted
) -> None:
    """`result` prints the run's result as JSON that parses back to exactly what the run holds
    (the reason with its escape sequences), every control character written as a \\u escape
    and markup left as text; the line saying it ended dead_letter has no control byte
    either."""
    output = operator(stack, "result", planted.dead_run, exit_code=3)
    document, error_line = output.rsplit("\n}\n", 1)
    assert_shown_literally(output, MARKUP, "\\u001b[31m", "\\u009b2J")
    assert error_line.startswith(f"error: run {planted.dead_run} ended in dead_letter: ")
    details = [entry["detail"] for entry in json.loads(document + "\n}")["history"]]
    assert details[-1] == f"dead-lettered by operator: {EVIL_REASON}"


def test_a_review_outcome_names_the_run_as_text(stack: LocalStack, planted: Planted) -> None:
    """`review` on the run whose id is markup (it failed at once) refuses, naming the run as
    one literal line (it used to crash on ``[/]``)."""
    env = {**stack.addresses.env(), "COLUMNS": "1000", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    args = ["review", planted.evil_run, "approve", "--reviewer", "alice"]
    done = CliRunner().invoke(build_app(), args, env=env)
    assert done.exit_code != 0 and isinstance(done.exception, SystemExit), done.output
    assert_shown_literally(done.output, planted.evil_run)
    assert len(done.output.strip().splitlines()) == 1, done.output


def test_a_refused_redrive_names_the_forged_run_as_text(
    stack: LocalStack, planted: Planted
) -> None:
    """`dlq redrive` of the forged message (a run that never existed) refuses it and says so
    naming its workflow id literally, without the escapes it holds."""
    env = {**stack.addresses.env(), "COLUMNS": "1000", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    done = CliRunner().invoke(build_app(), ["dlq", "redrive", planted.forged_id], env=env)
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    assert_shown_literally(done.output, f"{FORGED}: refused")
