"""A pipeline written in Python by a platform team, in a package outside this repository,
registered with one line (``PIPELINE_MODULES``) and nothing else: the worker runs it (its own
activity included); ``aiorch start --pipeline NAME --input JSON``, ``status``, ``result``,
``list`` and ``stats`` know it; a run waiting for review is in the review inbox, where a
reviewer sends it back and approves it; and ``aiorch reviews export`` gives the reedit."""

from __future__ import annotations

import asyncio
import json
import re
import textwrap
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle

from aiorch.devstack.stack import LocalStack
from tests.support.builders import new_request_id
from tests.support.live_runs import wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker, starter

pytestmark = pytest.mark.e2e

PACKAGE = "acme_greeter"
# The pipeline's workflow side: a graph with the engine's review sub-graph, one handler that
# calls the package's own activity, its request, state and result; and its registration.
PIPELINE_MODULE = '''
"""Greetings a person checks before they go out."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pydantic import Field
from temporalio import workflow

import workflows.engine.reviews as reviews
from workflows.engine.graph import (
    IDLE, Event, Graph, StateInfo, Status, Transition, cancel_edges, review_edges, review_states
)
from workflows.engine.pipeline import Context, Pipeline, RequestShape, ReviewSubject
from workflows.payloads import (
    RequestBase, ReviewContent, ReviewSection, RunCore, RunPolicy, RunResult
)


class Step(StrEnum):
    GREET = "greet"


class GreetRequest(RequestBase):
    name: str = Field(min_length=1, max_length=40)


class GreetState(RunCore[RunPolicy]):
    greeting: str | None = None


class GreetResult(RunResult):
    greeting: str | None = None


GRAPH = Graph.of(
    "AcmeGreeter",
    {Step.GREET: StateInfo(Status.PROCESSING, 50, "writing a greeting"), **review_states(50)},
    (Transition(IDLE, Event.START, Step.GREET), Transition(Step.GREET, "greeted", "await_review")),
    review_edges(approve="completed", reedit=Step.GREET),
    cancel_edges([IDLE, Step.GREET, "await_review", "escalate"]),
)


async def greet(ctx: Context[GreetRequest, GreetState]) -> None:
    ctx.run.plan = RunPolicy(review_timeout_s=600, escalation_timeout_s=600, llm_max_attempts=1)
    ctx.run.greeting = await workflow.execute_activity(
        "compose_greeting",
        args=[ctx.request.name, len(ctx.run.feedback)],
        start_to_close_timeout=timedelta(seconds=30),
        result_type=str,
    )
    reviews.enter(ctx, "greeted", detail="a greeting to check")


PIPELINE = Pipeline(
    name="greeter",
    graph=GRAPH,
    request=GreetRequest,
    state=GreetState,
    handlers={Step.GREET: greet},
    result_model=GreetResult,
    result=lambda ctx: GreetResult(
        request_id=ctx.request.request_id,
        state=ctx.run.state,
        history=ctx.run.history,
        greeting=ctx.run.greeting,
    ),
    review_view=lambda ctx: ReviewContent(
        title=ctx.request.name,
        sections=[ReviewSection(title="Greeting", text=ctx.run.greeting or "")],
    ),
    subject=lambda ctx: ReviewSubject(text=ctx.run.greeting),
    shape=RequestShape(message_field="name"),
    activities="acme_greeter.activities:activities",
)
'''
# The worker side: the activity and its factory over the worker's shared clients.
ACTIVITIES_MODULE = '''
"""The greeter's activity."""

from __future__ import annotations

from typing import Any

from temporalio import activity

from activities.wiring import Clients


@activity.defn(name="compose_greeting")
async def compose_greeting(name: str, exclamations: int) -> str:
    return f"Hello, {name}" + "!" * exclamations


def activities(clients: Clients) -> list[Any]:
    return [compose_greeting]
'''


@pytest.fixture(scope="module")
def registration(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The package, written outside the repository, and the one line that registers it (with
    the path that makes it importable, as its installation would)."""
    root = tmp_path_factory.mktemp("site")
    package = root / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PIPELINE_MODULE), encoding="utf-8")
    (package / "activities.py").write_text(textwrap.dedent(ACTIVITIES_MODULE), encoding="utf-8")
    return {"PIPELINE_MODULES": PACKAGE, "PYTHONPATH": str(root)}


@pytest.fixture(scope="module")
def greeter_stack(
    tmp_path_factory: pytest.TempPathFactory, registration: dict[str, str]
) -> Iterator[LocalStack]:
    """A stack of its own whose worker and inbox have the registration."""
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {**E2E_WORKER_ENV, **registration},
        with_inbox=True,
        inbox_reviewers=("alice",),
    )


def field_of(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no {name} field on the page"
    return found.group(1)


async def in_round(handle: WorkflowHandle[Any, Any], review_round: int) -> None:
    """Until the run waits for review in ``review_round``."""
    for _ in range(300):
        status = await wait_for_state(handle, "await_review")
        if status.review_round == review_round:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never waited in round {review_round}")


def log_in(inbox: httpx.Client, token: str) -> None:
    form = {"token": token, "csrf_token": field_of(inbox.get("/login").text, "csrf_token")}
    assert inbox.post("/login", data=form).status_code == 303


def review_in_inbox(inbox: httpx.Client, workflow_id: str, **decision: str) -> None:
    """Open the run from the inbox's list and send ``decision`` with the page's form."""
    assert workflow_id in inbox.get("/").text
    page = inbox.get(f"/runs/{workflow_id}").text
    hidden = ("csrf_token", "review_round", "run_id", "chain_id", "digest")
    form = {name: field_of(page, name) for name in hidden}
    sent = inbox.post(f"/runs/{workflow_id}/review", data={**form, **decision})
    assert sent.status_code == 303, sent.text


async def test_a_pipeline_package_runs_everywhere_with_one_registration_line(
    greeter_stack: LocalStack, registration: dict[str, str]
) -> None:
    """Started by the CLI with --input, the greeter's run calls its own activity and waits in
    the inbox; the inbox's reedit runs the handler again with the feedback and its approval
    completes the run; status, list and stats show it under its name, and the export has the
    reedit with its feedback and the greeting before and after."""
    stack = greeter_stack
    cli = {**registration, **stack.addresses.env()}
    workflow_id = new_request_id()
    started = starter(
        stack, "start", "--pipeline", "greeter", "--input", '{"name": "Ada"}', "--id",
        workflow_id, env=cli,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert f"started {workflow_id}" in started.stdout

    client = await connect(stack)
    handle = client.get_workflow_handle(workflow_id)
    await in_round(handle, 1)
    status = starter(stack, "status", workflow_id, "--json", env=cli)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "await_review"

    with httpx.Client(base_url=stack.addresses.inbox_url or "", follow_redirects=False) as inbox:
        log_in(inbox, stack.inbox_token("alice"))
        review_in_inbox(inbox, workflow_id, decision="reedit", feedback="warmer, please")
        await in_round(handle, 2)
        review_in_inbox(inbox, workflow_id, decision="approve")
    result = starter(stack, "result", workflow_id, "--wait", env=cli)
    assert result.returncode == 0, result.stderr
    ended = json.loads(result.stdout)
    assert (ended["state"], ended["greeting"]) == ("completed", "Hello, Ada!")

    listed = starter(stack, "list", "--pipeline", "greeter", "--json", env=cli)
    assert listed.returncode == 0, listed.stderr
    assert [run["workflow_id"] for run in json.loads(listed.stdout)] == [workflow_id]
    stats = starter(stack, "stats", "--json", env=cli)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["pipelines"]["greeter"]["completed"]["closed"] == 1
    exported = starter(
        stack, "reviews", "export", "--since", "1d", "--pipeline", "greeter", env=cli
    )
    assert exported.returncode == 0, exported.stderr
    [example] = [json.loads(line) for line in exported.stdout.splitlines()]
    assert (example["workflow_id"], example["pipeline"], example["kind"]) == (
        workflow_id,
        "greeter",
        "reedit",
    )
    assert (example["feedback"], example["reviewer"]) == ("warmer, please", "alice")
    assert (example["before"], example["after"]) == ("Hello, Ada", "Hello, Ada!")
    assert example["input"]["name"] == "Ada"
