"""Continue-as-new: when it is due, what a run may start with, and how feedback stays bounded."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import workflows.llm.pipeline as llm
from tests.support.builders import history_entry, prompt_plan
from workflows.engine.continuation import (
    CONTINUE_AT_BYTES,
    CONTINUE_AT_EVENTS,
    bounded_feedback,
    carried_problem,
    carries_state,
    id_problem,
    is_due,
    parse_input,
    start_problem,
)
from workflows.errors import InvalidRequest
from workflows.llm.graph import GRAPH, State
from workflows.payloads import PipelineRequest, RunState, printable

REQUEST = {"request_id": "a" * 24, "user_message": "hello"}


def parse(raw: object) -> tuple[object, RunState | None]:
    """``parse_input`` as the engine calls it for the LLM pipeline."""
    request, state = parse_input(raw, GRAPH, PipelineRequest, llm.PIPELINE.continued)
    assert state is None or isinstance(state, RunState)
    return request, state


def carried(state: State = State.INVOKE_LLM, **fields: object) -> dict[str, object]:
    run = RunState(state=state, plan=prompt_plan(), review_round=4, **fields)
    return {"request": REQUEST, "carried": run.model_dump(mode="json")}


def test_due_after_the_round_budget_history_budget_or_server_suggestion() -> None:
    """Due after rounds_per_run reedits in this run, once the run's history passes its byte or
    event budget, or at once when the server suggests it; otherwise not."""
    small = {"history_bytes": 1000, "history_events": 100}
    assert not is_due(rounds_this_run=49, rounds_per_run=50, suggested=False, **small)
    assert is_due(rounds_this_run=50, rounds_per_run=50, suggested=False, **small)
    assert is_due(rounds_this_run=1, rounds_per_run=50, suggested=True, **small)
    assert is_due(
        rounds_this_run=1, rounds_per_run=50, suggested=False, history_bytes=CONTINUE_AT_BYTES
    )
    assert is_due(
        rounds_this_run=1, rounds_per_run=50, suggested=False, history_events=CONTINUE_AT_EVENTS
    )


def test_feedback_window_keeps_the_newest() -> None:
    """Reviewer feedback sent to the LLM is bounded; the oldest goes first."""
    feedback = [f"{n:04d}" + "y" * 996 for n in range(100)]
    kept = bounded_feedback(feedback, max_bytes=10_000)
    assert kept == feedback[-10:]


def test_plain_request_is_not_a_continuation() -> None:
    """A client's request is validated as a request, with no carried state."""
    request, state = parse(REQUEST)
    assert request == PipelineRequest.model_validate(REQUEST) and state is None
    with pytest.raises(ValidationError):
        parse("not even a dict")


def test_continued_input_yields_request_and_whole_state() -> None:
    """A continued run's input yields the original request and the whole carried state."""
    entry = history_entry("await_review", "invoke_llm", "reedit")
    raw = carried(history=[entry], feedback=["shorter"])
    request, state = parse(raw)
    assert isinstance(request, PipelineRequest)
    assert request.request_id == REQUEST["request_id"]
    assert state is not None
    assert (state.state, state.review_round, state.feedback) == (State.INVOKE_LLM, 4, ["shorter"])
    assert state.history == [entry]
    again = llm.PIPELINE.continued(request=request, carried=state).model_dump(mode="json")
    assert again["carried"] == raw["carried"]


@pytest.mark.parametrize(
    "raw",
    [
        {"request": REQUEST, "carried": {"state": "invoke_llm"}},
        {
            "request": REQUEST,
            "carried": {"state": "no_such_state", "plan": prompt_plan().model_dump()},
        },
        carried(State.COMPLETED),
        carried(State.GENERATE_EMBEDDING),
        {**carried(), "extra": 1},
    ],
    ids=["no-plan", "unknown-state", "terminal-state", "not-a-resume-point", "extra-field"],
)
def test_malformed_continuation_is_refused(raw: object) -> None:
    """Something that claims to carry state but is malformed, names a state that does not
    exist, or one a run never continues in, is refused as a whole (a validation error or an
    InvalidRequest naming the problem), never half-read."""
    with pytest.raises((ValidationError, InvalidRequest)):
        parse(raw)


def start(**overrides: object) -> str | None:
    fields: dict[str, object] = {
        "pipeline": "AiOrchestrator",
        "carried": False,
        "continued_run_id": None,
        "cron_schedule": None,
        "has_retry_policy": False,
        "attempt": 1,
    }
    fields.update(overrides)
    return start_problem(**fields)  # type: ignore[arg-type]


def test_plain_start_and_own_continuation_are_admitted() -> None:
    """A plain start, and carried state on a run that continues an earlier one (the lineage
    activity then checks that earlier run really continued as new into it)."""
    assert start() is None
    assert start(carried=True, continued_run_id="previous") is None


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"carried": True}, "only from the workflow's own continue-as-new"),
        ({"cron_schedule": "* * * * *"}, "no cron schedule"),
        ({"carried": True, "continued_run_id": "r", "cron_schedule": "@every 1m"}, "cron"),
        ({"has_retry_policy": True}, "no workflow retry policy"),
        ({"carried": True, "continued_run_id": "r", "attempt": 2}, "retry policy"),
    ],
)
def test_client_chosen_continuations_are_refused(overrides: dict[str, object], words: str) -> None:
    """Carried state on a plain start, any cron start, any start with a workflow retry policy
    (Temporal marks cron runs and retries as continuations too) is refused with the reason."""
    problem = start(**overrides)
    assert problem is not None and words in problem


def test_history_is_bounded_at_append_and_counts_what_it_drops() -> None:
    """However many entries a run records, it keeps the newest within HISTORY_MAX_BYTES, in
    order, and counts the dropped ones: status, result and carried state stay small."""
    from workflows.engine.record import HISTORY_MAX_BYTES, append

    run = RunState(state=State.AWAIT_REVIEW)
    entries = [
        history_entry("await_review", "invoke_llm", "reedit", detail=f"{n}") for n in range(5000)
    ]
    for entry in entries:
        append(run, entry)
    kept = len(run.history)
    assert run.history == entries[-kept:]
    assert run.history_dropped == 5000 - kept > 0
    assert run.history_bytes == sum(len(e.model_dump_json()) + 1 for e in run.history)
    assert run.history_bytes <= HISTORY_MAX_BYTES


def test_due_only_at_each_budget_itself() -> None:
    """One byte or one event short of its budget, a run is not due; at the budget it is."""
    assert not is_due(
        rounds_this_run=0,
        rounds_per_run=50,
        suggested=False,
        history_bytes=CONTINUE_AT_BYTES - 1,
        history_events=CONTINUE_AT_EVENTS - 1,
    )
    assert not is_due(rounds_this_run=0, rounds_per_run=1, suggested=False)


def test_feedback_stops_at_the_first_item_that_does_not_fit_counting_bytes() -> None:
    """Feedback is kept newest first up to the window, counted in UTF-8 bytes (``é`` is two),
    and stops at the first item that does not fit: an older short item is not kept past a
    long one, so what the LLM sees is always the newest run of feedback."""
    assert bounded_feedback(["a", "b" * 20, "c"], max_bytes=5) == ["c"]
    assert bounded_feedback(["old", "éé", "new"], max_bytes=7) == ["éé", "new"]
    assert bounded_feedback(["old", "ééé", "new"], max_bytes=7) == ["new"]
    assert bounded_feedback([], max_bytes=7) == []


def test_a_continued_state_is_refused_naming_why() -> None:
    """A carried state outside the graph's resume points is named (made printable), and one
    without its plan is refused as such; a resume point with a plan is taken."""
    outside = RunState(state="gen\nerate", plan=prompt_plan())
    assert carried_problem(outside, GRAPH) == (
        "carried: a continued run cannot resume in 'gen\\nerate'"
    )
    planless = RunState(state=State.AWAIT_REVIEW)
    assert carried_problem(planless, GRAPH) == "carried: a continued run must carry its plan"
    assert carried_problem(RunState(state=State.ESCALATE, plan=prompt_plan()), GRAPH) is None
    with pytest.raises(InvalidRequest, match="must carry its plan"):
        parse({"request": REQUEST, "carried": planless.model_dump(mode="json")})


def test_only_a_dict_with_carried_state_is_a_continued_runs_input() -> None:
    """A start input carries state only when it is an object with ``carried``; a text naming
    it, or an object without it, does not."""
    assert carries_state({"carried": None})
    assert not carries_state({"request": REQUEST})
    assert not carries_state("carried")


def test_each_refused_start_says_why_in_one_line() -> None:
    """What a client chose wrongly is named with the pipeline and the way out: a cron
    schedule, a workflow retry policy (or a retried attempt), carried state on a plain start."""
    assert start(cron_schedule="@daily") == (
        "AiOrchestrator runs take no cron schedule (a request runs once; start runs from a "
        "Temporal Schedule instead)"
    )
    assert start(attempt=2) == (
        "AiOrchestrator runs take no workflow retry policy (the state graph owns retries)"
    )
    assert start(carried=True) == (
        "carried state is accepted only from the workflow's own continue-as-new"
    )
    assert start(cron_schedule="") is None


def test_a_run_runs_only_under_its_request_id() -> None:
    """The workflow id must be the request id; another is named, made printable and cut."""
    other = "x\n" + "y" * 200
    assert id_problem("a" * 24, "a" * 24) is None
    assert id_problem(other, "a" * 24) == (
        f"invalid request: the workflow id must be the request id ({'a' * 24}), not "
        f"{printable(other, 80)!r}"
    )
