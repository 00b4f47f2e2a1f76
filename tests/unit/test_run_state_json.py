"""The run's state and plan, declared by concern, keep the JSON they had as one flat list, and
the retry bound reads plans recorded under its old name."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter

from workflows.payloads import ContinuedRun, LlmCallResult, PipelineRequest, PromptPlan, RunState
from workflows.payloads.run_policy import RunPolicy

# The JSON of `populated()` as the code wrote it before its fields were grouped by concern,
# with the fields added since at the place the code writes them (the plan's `assignment`).
FLAT = Path(__file__).parent / "data" / "run_state_flat.json"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def populated() -> RunState:
    """A run's state with every field of the engine's set, and a plan with many set."""
    plan = PromptPlan(
        review_timeout_s=60,
        escalation_timeout_s=30,
        llm_max_attempts=4,
        model="m",
        user_prompt="u",
        system_prompt="s",
        requested_by="bob",
        allowed_reviewers=["a"],
        tenant="t",
        budget_usd=1.5,
        notify=True,
        capture_content=True,
        review_policy="p",
        batch_wait_s=5,
    )
    return RunState(
        state="await_review",
        attempts=2,
        model="m",
        last_error="e",
        review_round=3,
        reviews_refused=1,
        last_refusal="no",
        cost_usd=0.25,
        budget_decisions_refused=1,
        batch_id="b",
        state_since=AT,
        started_at=AT,
        history_bytes=10,
        consecutive_failures=1,
        retry_after_s=2.0,
        feedback=["f"],
        review_deadline=AT,
        round_started_at=AT,
        plan=plan,
        forced_timeout="x",
        dead_letter_requested="y",
        capacity_wait_s=1.0,
        budget_deadline=AT,
        budget_approved=True,
        corrective_next=True,
        corrected={"a": 1},
        revoked_keys=["k"],
        revoked_reviewers=["r"],
        corrections_dropped=2,
        batch_item="i",
        batch_result=LlmCallResult(model="m", content="c"),
        reply=LlmCallResult(model="m", content="r"),
        embedding_id="e1",
    )


def test_grouped_state_writes_the_flat_json_byte_for_byte() -> None:
    """A populated run state (its plan included) serialises to exactly the JSON the flat
    declaration wrote, key order included, through model_dump_json and through the Temporal
    converter the worker uses."""
    expected = FLAT.read_text(encoding="utf-8")
    run = populated()
    assert run.model_dump_json() == expected
    payload = PydanticJSONPlainPayloadConverter().to_payload(run)
    assert payload is not None and payload.data.decode("utf-8") == expected


def test_the_flat_json_decodes_to_the_same_state() -> None:
    """State carried by a run started before the grouping (the flat JSON) decodes whole."""
    decoded = RunState.model_validate_json(FLAT.read_text(encoding="utf-8"))
    assert decoded == populated()
    assert decoded.plan is not None and decoded.plan.max_attempts == 4


def test_the_retry_bound_reads_either_name_and_writes_the_old_one() -> None:
    """A plan recorded with ``llm_max_attempts`` and one written with ``max_attempts`` both
    give ``max_attempts``; either keyword builds one; it is written as ``llm_max_attempts``, so
    a worker of the previous version reads a plan this one wrote."""
    base = {"review_timeout_s": 60, "escalation_timeout_s": 30}
    old = RunPolicy.model_validate_json(json.dumps({**base, "llm_max_attempts": 3}))
    new = RunPolicy.model_validate({**base, "max_attempts": 3})
    assert old.max_attempts == new.max_attempts == 3
    assert (
        RunPolicy(review_timeout_s=1, escalation_timeout_s=1, llm_max_attempts=2).max_attempts == 2
    )
    written = json.loads(new.model_dump_json())
    assert written["llm_max_attempts"] == 3 and "max_attempts" not in written
    assert new.model_dump()["llm_max_attempts"] == 3


def test_a_run_continued_across_the_rename_keeps_its_bound() -> None:
    """State carried from a run planned before the rename continues as new with the same
    bound: decoded, carried again, decoded again."""
    flat = json.loads(FLAT.read_text(encoding="utf-8"))
    request = PipelineRequest(request_id="0123456789abcdef01234567", user_message="hi")
    carried = ContinuedRun[PipelineRequest, RunState].model_validate(
        {"request": request.model_dump(mode="json"), "carried": flat}
    )
    again = ContinuedRun[PipelineRequest, RunState].model_validate_json(carried.model_dump_json())
    assert again.carried.plan is not None and again.carried.plan.max_attempts == 4
