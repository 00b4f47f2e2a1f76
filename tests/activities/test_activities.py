"""The activities against real parts: the LLM simulator over HTTP, Qdrant (in-memory client),
moto's S3 over HTTP, and real files, each run in Temporal's activity test environment."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
from openai import AsyncOpenAI
from qdrant_client import AsyncQdrantClient
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.llm import LlmActivities
from activities.prompt import SYSTEM_PROMPT, InputLoader, PromptActivities
from activities.vectors import VectorActivities, point_id
from aiorch.devstack.llm_simulator import running_simulator
from aiorch.devstack.stack import free_port, start_sqs_server
from aiorch.runtime.config import Settings
from workflows import errors
from workflows.payloads import EmbeddingInput, LlmCallInput, PipelineRequest, PromptInput

RUN_ID = "0123456789abcdef01234567"


@pytest.fixture(scope="module")
async def llm() -> AsyncIterator[AsyncOpenAI]:
    async with running_simulator() as root:
        client = AsyncOpenAI(base_url=f"{root}/v1", api_key="sim", max_retries=0, timeout=10)
        yield client
        await client.close()


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    port = free_port()
    with start_sqs_server(port=port, log_dir=tmp_path_factory.mktemp("moto")):
        yield boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def call(message: str, **fields: object) -> LlmCallInput:
    values: dict[str, object] = {
        "workflow_id": f"w-{abs(hash(message))}",
        "system_prompt": SYSTEM_PROMPT,
        "user_prompt": message,
        "model": "sim-large",
        "attempt": 1,
    }
    values.update(fields)
    return LlmCallInput.model_validate(values)


async def test_fetch_prompt_resolves_defaults_and_options() -> None:
    """fetch_prompt builds the prompt (with metadata context) and resolves options over config."""
    settings = Settings(review_timeout_s=100, llm_max_attempts=4)
    activity = PromptActivities(settings, InputLoader())
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
    assert plan.llm_max_attempts == 4
    assert plan.input_ref is None


async def test_file_reference_is_checked_but_not_copied(tmp_path: Path) -> None:
    """A file:// input inside an input root is validated by fetch_prompt yet stays a reference
    in its result."""
    document = tmp_path / "doc.txt"
    document.write_text("A long document " * 1000)
    activity = PromptActivities(Settings(), InputLoader(file_roots=[tmp_path]))
    request = PipelineRequest(request_id=RUN_ID, user_message=document.as_uri())
    plan = await ActivityEnvironment().run(activity.fetch_prompt, PromptInput(request=request))
    assert plan.input_ref == document.as_uri()
    assert "A long document" not in plan.model_dump_json()


async def test_missing_or_oversized_reference_is_permanent(tmp_path: Path) -> None:
    """A missing file or one over the limit is a non-retryable InputUnavailable error."""
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 2048)
    activity = PromptActivities(Settings(), InputLoader(max_bytes=1024, file_roots=[tmp_path]))
    for uri in ((tmp_path / "nope.txt").as_uri(), big.as_uri()):
        request = PipelineRequest(request_id=RUN_ID, user_message=uri)
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(activity.fetch_prompt, PromptInput(request=request))
        assert info.value.type == errors.INPUT_UNAVAILABLE
        assert info.value.non_retryable


async def test_s3_reference_is_loaded_through_boto3(s3: object) -> None:
    """An s3:// input in an allowed bucket is read from the S3 endpoint (moto over HTTP)."""
    client = s3
    client.create_bucket(Bucket="inputs")  # type: ignore[attr-defined]
    client.put_object(Bucket="inputs", Key="q.txt", Body=b"From S3")  # type: ignore[attr-defined]
    loader = InputLoader(s3=client, s3_prefixes=["inputs"])  # type: ignore[arg-type]
    assert await loader.load("s3://inputs/q.txt") == "From S3"
    with pytest.raises(ApplicationError) as info:
        await loader.load("s3://inputs/missing.txt")
    assert info.value.type == errors.INPUT_UNAVAILABLE


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


async def test_fenced_reply_is_unwrapped(llm: AsyncOpenAI) -> None:
    """JSON in one whole Markdown fence is accepted."""
    activity = LlmActivities(llm, InputLoader(), timeout_s=10)
    result = await ActivityEnvironment().run(activity.invoke_llm, call("Fence [sim:fenced]"))
    assert "Fence" in result.content


async def test_hanging_call_heartbeats_and_is_cancellable(llm: AsyncOpenAI) -> None:
    """A hanging LLM call heartbeats, so a cancel reaches it and ends it promptly."""
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    activity = LlmActivities(llm, InputLoader(), timeout_s=30)
    task = asyncio.ensure_future(env.run(activity.invoke_llm, call("Hang [sim:hang]")))
    await asyncio.sleep(4.5)
    assert beats, "no heartbeat while waiting"
    started = asyncio.get_running_loop().time()
    env.cancel()
    with pytest.raises((CancelledError, asyncio.CancelledError)):
        await task
    assert asyncio.get_running_loop().time() - started < 2


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


async def test_embedded_store_commits_in_wal_mode(llm: AsyncOpenAI, tmp_path: Path) -> None:
    """An embedded store's collection file is switched to WAL (no fsync per upsert on the
    worker's event loop), and a vector written that way is there after reopening the store."""
    store = AsyncQdrantClient(path=str(tmp_path / "vectors"))
    activity = VectorActivities(llm, store, "runs", "sim-embed")
    payload = EmbeddingInput(workflow_id="wf-1", request_id=RUN_ID, content="an answer")
    await ActivityEnvironment().run(activity.generate_embedding, payload)
    await store.close()
    [collection_file] = (tmp_path / "vectors").rglob("storage.sqlite")
    with closing(sqlite3.connect(collection_file)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reopened = AsyncQdrantClient(path=str(tmp_path / "vectors"))
    assert (await reopened.count("runs")).count == 1
    await reopened.close()
