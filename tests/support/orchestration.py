"""One workflow test's orchestration: the real ``EngineWorkflow`` on the shared time-skipping
server (``tests.support.time_skipping``), a worker on a task queue of the test's own running the
scripted activities (``tests.support.scripted_activities``), and the runs the test started,
with the queries and checks a test drives them by. The search attributes ``AiState`` and
``AiStateSince`` must publish the run's last transition (``Orchestration.check_history``).
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.pipelines import PipelineActivities
from activities.planning import PlanDefaults
from aiorch.ops.pipelines import reserved_names
from aiorch_runtime.config import Settings
from aiorch_runtime.pipeline_files import PipelineFolder
from tests.support.builders import new_request_id
from tests.support.run_history import assert_follows_graph, transitions
from tests.support.scripted_activities import (
    FALLBACK_MODEL,
    PRIMARY_MODEL,
    FakeActivities,
    FakeDocumentActivities,
    HeldLineage,
    Reply,
)
from tests.support.time_skipping import (
    POLL_INTERVAL_S,
    TASK_PROGRESS_TIMEOUT_S,
    assert_time_skips,
    skip_time,
)
from workflows import contract
from workflows.documents.contract import PIPELINE_DOCUMENTS
from workflows.engine.graph import TERMINAL_STATES
from workflows.llm.graph import State
from workflows.orchestrator import DATA_PIPELINES, SHIPPED, EngineWorkflow
from workflows.payloads import HistoryEntry, PipelineResult, RunStatus

AI_STATE = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
AI_STATE_SINCE = SearchAttributeKey.for_datetime(contract.SEARCH_ATTRIBUTE_STATE_SINCE)
HEARTBEAT_THROTTLE = timedelta(milliseconds=50)


VALID_REQUEST: Any = object()
"""Default of ``Orchestration.start(raw=...)``: build a valid request from the arguments."""


def pipeline_settings(**overrides: Any) -> Settings:
    """The worker settings ``plan_pipeline`` plans pipeline files' runs with in these tests:
    the fakes' models and the timings the other runs get."""
    values: dict[str, Any] = {
        "llm_model": PRIMARY_MODEL,
        "llm_fallback_model": FALLBACK_MODEL,
        "llm_fallback_after": 2,
        "llm_timeout_s": 30.0,
        "llm_max_attempts": 3,
        "llm_backoff_initial_s": 1.0,
        "llm_backoff_max_s": 8.0,
        "review_timeout_s": 600.0,
        "escalation_timeout_s": 1200.0,
        "review_min": "auto",
        **overrides,
    }
    return Settings(**values)


def data_plans(folder: Path, **settings: Any) -> PipelineActivities:
    """The real ``plan_pipeline`` over the pipeline files in ``folder`` (a request may ask for
    the batch lane)."""
    catalog = DATA_PIPELINES.catalog
    # The batch lane needs a capacity store in the settings; planning never connects to it.
    batch = {"llm_batch": "allowed", "capacity_store_url": "redis://127.0.0.1:1/0"}
    return PipelineActivities(
        PlanDefaults.of(pipeline_settings(**{**batch, **settings})),
        PipelineFolder(folder, catalog, reserved_names(SHIPPED)),
        catalog,
        [p.workflow_type for p in SHIPPED],
    )


# Each shipped pipeline's scripted activities, by its short name; the engine's come from
# `FakeActivities.engine_activities`. A pipeline without an entry fails every workflow test.
PIPELINE_FAKES: Mapping[str, Callable[[Orchestration], Sequence[Any]]] = {
    contract.PIPELINE_LLM: lambda orch: orch.fakes.llm_activities,
    PIPELINE_DOCUMENTS: lambda orch: orch.documents.activities,
}


def scripted_activities(orch: Orchestration) -> list[Any]:
    """The engine's scripted activities, then every shipped pipeline's (`PIPELINE_FAKES`)."""
    return [
        *orch.fakes.engine_activities,
        *(activity for pipeline in SHIPPED for activity in PIPELINE_FAKES[pipeline.name](orch)),
    ]


@dataclass
class Orchestration:
    """One test's worker, fakes and runs on the shared time-skipping server; ``pipelines``:
    the folder of pipeline files its real ``plan_pipeline`` reads."""

    env: WorkflowEnvironment
    task_queue: str
    fakes: FakeActivities
    lineage: HeldLineage
    pipelines: Path
    documents: FakeDocumentActivities = field(default_factory=FakeDocumentActivities)
    handles: list[WorkflowHandle[Any, Any]] = field(default_factory=list)

    @property
    def client(self) -> Client:
        return self.env.client

    async def start(
        self,
        *,
        review: str = "never",
        user_message: str = "Summarise the incident report.",
        options: dict[str, Any] | None = None,
        raw: Any = VALID_REQUEST,
        workflow_id: str | None = None,
        initial_ai_state: str | None = None,
        task_timeout: timedelta | None = None,
    ) -> WorkflowHandle[Any, PipelineResult]:
        """Start a run; ``raw`` sends that input verbatim instead of a valid request;
        ``initial_ai_state`` sets AiState at start, as the project's starters do;
        ``task_timeout``: its workflow task timeout (the server's default: 10 s)."""
        request_id = new_request_id()
        payload: Any = raw
        if raw is VALID_REQUEST:
            payload = {"request_id": request_id, "user_message": user_message, "review": review}
            if options is not None:
                payload["options"] = options
        handle: WorkflowHandle[Any, PipelineResult] = await self.client.start_workflow(
            contract.WORKFLOW_TYPE,
            payload,
            id=workflow_id or request_id,
            task_queue=self.task_queue,
            result_type=PipelineResult,
            task_timeout=task_timeout,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(AI_STATE, initial_ai_state)] if initial_ai_state else []
            ),
        )
        self.handles.append(handle)
        return handle

    async def status(self, handle: WorkflowHandle[Any, Any]) -> RunStatus:
        """The ``status`` query's answer."""
        status: RunStatus = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
        return status

    async def wait_for_state(
        self, handle: WorkflowHandle[Any, Any], state: State | str
    ) -> RunStatus:
        """Poll ``status`` until the run is in ``state``: waits for task progress, not timers.

        Time on the test server stays locked meanwhile, so no timer fires while polling.
        """
        wanted = str(state)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TASK_PROGRESS_TIMEOUT_S
        status: RunStatus | None = None
        while loop.time() < deadline:
            status = await self.status(handle)
            if status.state == wanted:
                return status
            if status.state in TERMINAL_STATES:
                break
            await asyncio.sleep(POLL_INTERVAL_S)
        raise AssertionError(f"run never reached {wanted!r}; last status: {status}")

    async def awaiting_review(
        self, *replies: Reply, **start: Any
    ) -> WorkflowHandle[Any, PipelineResult]:
        """A run (review ``auto``, ``start``'s other options) whose LLM answers with ``replies``
        (by default one that needs review): it waits in await_review now."""
        self.fakes.llm_script = list(replies or [Reply(needs_review=True)])
        handle = await self.start(review="auto", **start)
        await self.wait_for_state(handle, "await_review")
        return handle

    async def escalated(
        self, review_timeout_s: int, reply: Reply | None = None
    ) -> WorkflowHandle[Any, PipelineResult]:
        """A run whose LLM ``reply`` (by default one that needs review) went unreviewed for
        ``review_timeout_s``, crossed in skipped time: it is in escalate now."""
        handle = await self.awaiting_review(
            reply or Reply(needs_review=True), options={"review_timeout_s": review_timeout_s}
        )
        await skip_time(self.env, timedelta(seconds=review_timeout_s + 1))
        await self.wait_for_state(handle, "escalate")
        return handle

    async def ai_state(self, handle: WorkflowHandle[Any, Any]) -> tuple[str | None, Any]:
        """The ``AiState`` and ``AiStateSince`` search attributes as the server holds them."""
        attributes = (await handle.describe()).typed_search_attributes
        return attributes.get(AI_STATE), attributes.get(AI_STATE_SINCE)

    async def check_history(
        self, handle: WorkflowHandle[Any, Any], history: Sequence[HistoryEntry]
    ) -> None:
        """History follows the graph and the search attributes publish its last state."""
        assert_follows_graph(history)
        last = transitions(history)[-1]
        state, since = await self.ai_state(handle)
        assert (state, since) == (last.to_state, last.at)

    async def check_finished(
        self, handle: WorkflowHandle[Any, PipelineResult], result: PipelineResult
    ) -> None:
        """A finished run: result, ``status`` query and search attributes all agree."""
        await self.check_history(handle, result.history)
        assert result.state == transitions(result.history)[-1].to_state
        status = await self.status(handle)
        assert status.state == result.state
        assert status.history == result.history
        assert status.progress == 100

    async def terminate_open_runs(self) -> None:
        for handle in self.handles:
            description = await handle.describe()
            if description.status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate(reason="test teardown")


@asynccontextmanager
async def running_orchestration(
    env: WorkflowEnvironment, *, check_time_skips: bool = True
) -> AsyncIterator[Orchestration]:
    """A worker on a fresh task queue with fresh fakes and an empty pipeline folder; open
    runs are terminated afterwards."""
    task_queue = f"wf-{uuid.uuid4()}"
    with tempfile.TemporaryDirectory(prefix="pipelines-") as folder:
        async with _orchestration(env, task_queue, Path(folder), check_time_skips) as running:
            yield running


@asynccontextmanager
async def _orchestration(
    env: WorkflowEnvironment, task_queue: str, folder: Path, check_time_skips: bool
) -> AsyncIterator[Orchestration]:
    orchestration = Orchestration(
        env=env,
        task_queue=task_queue,
        fakes=FakeActivities(),
        lineage=HeldLineage(env.client, task_queue),
        pipelines=folder,
    )
    async with Worker(
        env.client,
        task_queue=orchestration.task_queue,
        workflows=[EngineWorkflow],
        # The real lineage check: it only asks the server, which the test server answers; the
        # real plan of pipeline files: it only reads the test's folder.
        activities=[
            *scripted_activities(orchestration),
            orchestration.lineage.verify_continuation,
            data_plans(folder).plan_pipeline,
        ],
        # Heartbeat at once, so a cancel reaches a held fake activity in milliseconds.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    ):
        try:
            yield orchestration
        finally:
            await orchestration.fakes.release_gates()
            await orchestration.terminate_open_runs()
            if check_time_skips:
                await assert_time_skips(env)
