"""Runs that go straight through: fetch -> LLM -> embed -> completed."""

from __future__ import annotations

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import HAPPY_PATH, path
from tests.support.scripted_activities import PRIMARY_MODEL, Reply


async def test_run_without_review_completes_with_embedding(orch: Orchestration) -> None:
    """review=never walks idle -> fetch_prompt -> invoke_llm -> generate_embedding -> completed,
    passing the request to fetch_prompt, the plan to invoke_llm and the reply to the embedding."""
    orch.fakes.llm_script = [Reply(content="all systems nominal", needs_review=True)]
    handle = await orch.start(review="never", user_message="How are the systems?")

    result = await finished(handle)

    assert result.state == "completed"
    assert result.request_id == handle.id
    assert result.content == "all systems nominal"
    assert result.model == PRIMARY_MODEL
    assert result.embedding_id == f"vec-{handle.id}"
    assert path(result.history) == HAPPY_PATH
    await orch.check_finished(handle, result)
    status = await orch.status(handle)
    assert (status.status, status.attempts, status.model) == ("Completed", 1, PRIMARY_MODEL)

    fakes = orch.fakes
    assert [p.request.request_id for p in fakes.prompt_inputs] == [handle.id]
    assert fakes.prompt_inputs[0].request.user_message == "How are the systems?"
    [call] = fakes.llm_calls
    assert (call.workflow_id, call.model, call.attempt) == (handle.id, PRIMARY_MODEL, 1)
    assert call.user_prompt == "How are the systems?"
    assert (call.feedback, call.corrective) == ([], False)
    [embedding] = fakes.embedding_calls
    assert (embedding.workflow_id, embedding.request_id) == (handle.id, handle.id)
    assert embedding.content == "all systems nominal"
    assert fakes.dead_letters == [] and fakes.deleted == []
