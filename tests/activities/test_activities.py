"""The activities against real parts: the LLM simulator over HTTP (in this event loop), Qdrant
(in-memory and embedded) and real files, each run in Temporal's activity test environment.
(Loading from S3: ``test_input_loader_s3.py``.)"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from qdrant_client import AsyncQdrantClient
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from activities.planning import PlanDefaults
from activities.prompt import PromptActivities
from activities.spend import batch_lease
from activities.vectors import VectorActivities, embedded_store, point_id
from aiorch.devstack.llm_simulator import running_simulator
from aiorch.devstack.llm_simulator.replies import REFUSAL_TEXT
from aiorch_runtime.config import Settings
from tests.activities.llm_calls import call
from workflows import errors
from workflows.payloads import EmbeddingInput, PipelineRequest, PromptInput, vector_key

RUN_ID = "0123456789abcdef01234567"


@pytest.fixture(scope="module")
async def llm() -> AsyncIterator[AsyncOpenAI]:
    async with running_simulator() as root:
        client = AsyncOpenAI(base_url=f"{root}/v1", api_key="sim", max_retries=0, timeout=10)
        yield client
        await client.close()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds (checked every 10 ms); fail after ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def beats_until_cancelled(
    run: Callable[[ActivityEnvironment], Awaitable[object]], first_beat: tuple[object, ...]
) -> None:
    """Run a hanging activity (``run`` starts it in the environment it is given), check that it
    heartbeats, first with ``first_beat``, and that a cancel then ends it within 2 s."""
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    task = asyncio.ensure_future(run(env))
    await until(lambda: len(beats) >= 2)
    assert beats[0] == first_beat
    started = asyncio.get_running_loop().time()
    env.cancel()
    with pytest.raises((CancelledError, asyncio.CancelledError)):
        await task
    assert asyncio.get_running_loop().time() - started < 2


async def test_fetch_prompt_resolves_defaults_and_options() -> None:
    """fetch_prompt builds the prompt (with metadata context) and resolves options over config."""
    settings = Settings(review_timeout_s=100, llm_max_attempts=4)
    activity = PromptActivities(PlanDefaults.of(settings), InputLoader())
    request = PipelineRequest.model_validate(
        {
            "request_id": RUN_ID,
            "user_message": "Hi",
            "metadata": {"team": "ops"},
            "options": {"review_timeout_s": 5},
        }
    )
    plan = await ActivityEnvironment().run(activity.fetch_prompt, PromptInput(request=request))
    assert plan.user_prompt.startswith("Hi")
    assert '"team": "ops"' in plan.user_prompt
    assert plan.review_timeout_s == 5
    assert plan.max_attempts == 4
    assert plan.input_ref is None


async def test_file_reference_is_checked_but_not_copied(tmp_path: Path) -> None:
    """A file:// input inside an input root is validated by fetch_prompt yet stays a reference
    in its result."""
    document = tmp_path / "doc.txt"
    document.write_text("A long document " * 1000)
    activity = PromptActivities(PlanDefaults.of(Settings()), InputLoader(file_roots=[tmp_path]))
    request = PipelineRequest(request_id=RUN_ID, user_message=document.as_uri())
    plan = await ActivityEnvironment().run(activity.fetch_prompt, PromptInput(request=request))
    assert plan.input_ref == document.as_uri()
    assert "A long document" not in plan.model_dump_json()


async def test_missing_or_oversized_reference_is_permanent(tmp_path: Path) -> None:
    """A missing file or one over the limit is a non-retryable InputUnavailable error."""
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 2048)
    activity = PromptActivities(
        PlanDefaults.of(Settings()), InputLoader(max_bytes=1024, file_roots=[tmp_path])
    )
    for uri in ((tmp_path / "nope.txt").as_uri(), big.as_uri()):
        request = PipelineRequest(request_id=RUN_ID, user_message=uri)
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(activity.fetch_prompt, PromptInput(request=request))
        assert info.value.type == errors.INPUT_UNAVAILABLE
        assert info.value.non_retryable


async def test_invoke_llm_returns_reply_and_usage(llm: AsyncOpenAI) -> None:
    """A good reply is parsed into content/needs_review with the model and token usage."""
    activity = LlmActivities(llm, InputLoader(), timeout_s=10)
    result = await ActivityEnvironment().run(activity.invoke_llm, call("Say hi [sim:review]"))
    assert "Say hi" in result.content
    assert result.needs_review is True
    assert result.model == "sim-large"
    assert result.usage.total_tokens > 0


@pytest.mark.parametrize(
    ("directive", "error_type", "permanent"),
    [
        ("[sim:status=429:retry_after=2]", errors.LLM_RATE_LIMITED, False),
        ("[sim:status=429:code=insufficient_quota]", errors.LLM_QUOTA_EXHAUSTED, True),
        ("[sim:status=503]", errors.LLM_RETRYABLE, False),
        ("[sim:status=400]", errors.LLM_PERMANENT, True),
        ("[sim:status=401]", errors.LLM_PERMANENT, True),
        ("[sim:malformed]", errors.LLM_MALFORMED_REPLY, False),
        ("[sim:badjson]", errors.LLM_MALFORMED_REPLY, False),
        ("[sim:truncated]", errors.LLM_MALFORMED_REPLY, False),
        ("[sim:refusal]", errors.LLM_REFUSED, True),
        ("[sim:content_filter]", errors.LLM_REFUSED, True),
    ],
)
async def test_invoke_llm_classifies_provider_failures(
    llm: AsyncOpenAI, directive: str, error_type: str, permanent: bool
) -> None:
    """Each failure the provider can produce maps to one stable, correctly retryable type."""
    activity = LlmActivities(llm, InputLoader(), timeout_s=10)
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(activity.invoke_llm, call(f"Q {directive}"))
    assert info.value.type == error_type
    assert info.value.non_retryable is permanent
    if "retry_after=2" in directive:
        assert info.value.next_retry_delay == timedelta(seconds=2)


async def test_a_refusal_is_in_the_details_never_in_the_message(llm: AsyncOpenAI) -> None:
    """The model's refusal is its own text, which may quote the request: the message (what the
    SDK logs in plain text when the activity fails) only counts it and names the command that
    shows it; the details, a payload the codec encrypts, carry it."""
    activity = LlmActivities(llm, InputLoader(), timeout_s=10)
    refused = call("Q [sim:refusal]")
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(activity.invoke_llm, refused)
    assert REFUSAL_TEXT not in str(info.value)
    assert info.value.message == (
        f"the model refused ({len(REFUSAL_TEXT)} characters; "
        f"`starter.py status {refused.workflow_id}` shows the text)"
    )
    assert info.value.details == (REFUSAL_TEXT,)


async def test_fenced_reply_is_unwrapped(llm: AsyncOpenAI) -> None:
    """JSON in one whole Markdown fence is accepted."""
    activity = LlmActivities(llm, InputLoader(), timeout_s=10)
    result = await ActivityEnvironment().run(activity.invoke_llm, call("Fence [sim:fenced]"))
    assert "Fence" in result.content


async def test_hanging_call_heartbeats_and_is_cancellable(llm: AsyncOpenAI) -> None:
    """A hanging LLM call heartbeats at its interval, so a cancel reaches it and ends it
    promptly."""
    activity = LlmActivities(
        llm, InputLoader(), timeout_s=30, heartbeat_every=timedelta(milliseconds=20)
    )
    await beats_until_cancelled(
        lambda env: env.run(activity.invoke_llm, call("Hang [sim:hang]")),
        ("waiting for sim-large",),
    )


async def test_hanging_embeddings_call_heartbeats_and_is_cancellable(llm: AsyncOpenAI) -> None:
    """A hanging embeddings call heartbeats at its interval too, and a cancel ends it."""
    store = AsyncQdrantClient(location=":memory:")
    activity = VectorActivities(
        llm, store, "runs", "sim-embed", heartbeat_every=timedelta(milliseconds=20)
    )
    content = "Hang [sim:hang:path=embeddings]"
    payload = EmbeddingInput(workflow_id="wf-hang", request_id=RUN_ID, content=content)
    await beats_until_cancelled(
        lambda env: env.run(activity.generate_embedding, payload),
        ("waiting for the embeddings call",),
    )
    assert await store.collection_exists("runs") is False
    await store.close()


async def test_embedding_upsert_is_idempotent_and_deletable(llm: AsyncOpenAI) -> None:
    """Running generate_embedding twice leaves one vector; delete_embedding removes it."""
    store = AsyncQdrantClient(location=":memory:")
    activity = VectorActivities(llm, store, "runs", "sim-embed")
    payload = EmbeddingInput(workflow_id="wf-1", request_id=RUN_ID, content="an answer")
    first = await ActivityEnvironment().run(activity.generate_embedding, payload)
    second = await ActivityEnvironment().run(activity.generate_embedding, payload)
    assert first.embedding_id == second.embedding_id == point_id("wf-1")
    assert (await store.count("runs")).count == 1
    assert await ActivityEnvironment().run(activity.delete_embedding, "wf-1") == 1
    assert (await store.count("runs")).count == 0
    assert await ActivityEnvironment().run(activity.delete_embedding, "wf-1") == 0
    await store.close()


async def test_a_run_that_reuses_a_workflow_id_gets_its_own_vector(llm: AsyncOpenAI) -> None:
    """Two run chains of one workflow id (a run started again with its id) write two vectors:
    the second neither overwrites the first nor deletes it on compensation."""
    store = AsyncQdrantClient(location=":memory:")
    activity = VectorActivities(llm, store, "runs", "sim-embed")
    for chain in ("run-a", "run-b"):
        payload = EmbeddingInput(
            workflow_id="wf-1", chain_id=chain, request_id=RUN_ID, content=f"from {chain}"
        )
        await ActivityEnvironment().run(activity.generate_embedding, payload)
    assert (await store.count("runs")).count == 2
    assert await ActivityEnvironment().run(activity.delete_embedding, vector_key("wf-1", "run-b"))
    [left] = (await store.scroll("runs", with_payload=True))[0]
    assert left.payload is not None and left.payload["content"] == "from run-a"
    await store.close()


async def test_closing_the_embedded_store_closes_every_sqlite_connection(
    llm: AsyncOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SQLite connection the embedded store opens while a vector is written is closed by
    its ``close()``: none is left to the garbage collector, which Python 3.13 reports as a
    ResourceWarning. (The first embedded store of a process is the one that would open
    qdrant-client's probe connection, so this test comes before the others that open one.)"""
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def recording_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = connect(*args, **kwargs)
        opened.append(connection)
        return connection

    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    store = embedded_store(tmp_path / "vectors")
    activity = VectorActivities(llm, store, "runs", "sim-embed")
    payload = EmbeddingInput(workflow_id="wf-1", request_id=RUN_ID, content="an answer")
    await ActivityEnvironment().run(activity.generate_embedding, payload)
    await store.close()
    assert opened
    for connection in opened:
        with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
            connection.execute("SELECT 1")


async def test_embedded_store_keeps_vectors_across_reopening(
    llm: AsyncOpenAI, tmp_path: Path
) -> None:
    """A vector written to an embedded (``path=``) store is there after the store reopens."""
    store = embedded_store(tmp_path / "vectors")
    activity = VectorActivities(llm, store, "runs", "sim-embed")
    payload = EmbeddingInput(workflow_id="wf-1", request_id=RUN_ID, content="an answer")
    await ActivityEnvironment().run(activity.generate_embedding, payload)
    await store.close()
    reopened = embedded_store(tmp_path / "vectors")
    assert (await reopened.count("runs")).count == 1
    await reopened.close()


def test_a_batched_calls_reservation_is_held_its_wait_and_two_hours() -> None:
    """A batched call's spend reservation lasts as long as its run waits for the batch's answer
    (``LLM_BATCH_WAIT_S``, carried in the call) plus two hours for its wait in the group and
    its submission (docs/cost.md), so it is not charged in full before the batch can answer."""
    assert batch_lease(call("batched", lane="batch", batch_wait_s=3600)) == timedelta(hours=3)
    assert batch_lease(call("batched", lane="batch")) == timedelta(hours=52)
