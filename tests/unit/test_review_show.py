"""What `review show` prints of a run (`aiorch.cli.review_show`), from the ``review_view``
answer the inbox's run page shows: an LLM run's request and reply, earlier feedback, the round,
who may decide under a policy and the time left, as text and as JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from aiorch.cli.review_show import print_view, show_document
from aiorch.ops.review_views import RunView, earlier_feedback
from workflows.payloads import HistoryEntry, ReviewProgress, ReviewSection, ReviewView

NOW = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


def llm_run(*, waiting: bool = True) -> RunView:
    """An LLM run in its second round: sent back once with feedback, under a policy."""
    reedit = HistoryEntry(
        from_state="await_review",
        to_state="invoke_llm",
        event="reedit",
        at=NOW - timedelta(hours=1),
        reviewer="ann",
        feedback="Shorter, and cite the policy.",
        review_round=1,
    )
    view = ReviewView(
        title="Summarise our refund policy",
        sections=[
            ReviewSection(title="Request", text="Summarise our refund policy", key="request"),
            ReviewSection(title="Reply", text="Refunds within 30 days [policy 4.2].", key="reply"),
        ],
        pipeline="AiOrchestrator",
        state="await_review" if waiting else "completed",
        status="WaitingForInput" if waiting else "Completed",
        review_round=2,
        waiting=waiting,
        deadline=NOW + timedelta(hours=3, minutes=5),
        requested_by="rita",
        allowed_reviewers=["alice", "bob"],
        model="sim-large",
        history=[reedit],
        review=ReviewProgress(
            policy="two-of-finance",
            stage=0,
            stages=2,
            group="finance",
            approvals=["alice"],
            approvals_needed=2,
        ),
    )
    return RunView("r-1", "run-9", view, earlier_feedback(view.history))


def test_an_llm_run_shows_what_the_inbox_page_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """The text names the round, the time left and when it escalates, who may decide (not the
    requester), the policy's tally, the request and the reply, the earlier feedback with its
    round and reviewer, and how to decide; no fields table and no correction line for a run
    that takes no corrected fields."""
    print_view(llm_run(), NOW)
    shown = capsys.readouterr().out
    lines = shown.splitlines()
    assert lines[0] == "Run r-1"
    assert ["review", "round", "2"] in [line.split() for line in lines]
    assert "3 h 5 min (until 2026-12-05 13:05:00 UTC; then it escalates)" in shown
    assert "alice, bob, except rita (who requested it)" in shown
    assert "policy two-of-finance, stage 1 of 2 (group finance): 1 of 2 approvals: alice" in shown
    assert "Reply\nRefunds within 30 days [policy 4.2].\n" in shown
    assert "- round 1, ann, 2026-12-05 09:00:00 UTC: Shorter, and cite the policy." in shown
    assert (
        lines[-1] == "Decide round 2: aiorch review r-1 approve | reedit --feedback TEXT | reject"
    )
    assert "Fields" not in shown and "correct --set" not in shown


def test_a_run_that_waits_no_more_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """A run that no longer waits shows what it has, no time left, and that it does not wait."""
    print_view(llm_run(waiting=False), NOW)
    shown = capsys.readouterr().out
    assert "time left" not in shown and "Decide" not in shown
    assert shown.splitlines()[-1] == "This run is not waiting for a review (it is completed)."


def test_the_json_is_the_review_view_with_the_run_s_ids_and_time_left() -> None:
    """`--json` holds the run's review_view as the query answered it, with its workflow and
    run id, whether the wait is the escalation, the time left and the earlier feedback."""
    run = llm_run()
    document = json.loads(json.dumps(show_document(run, NOW)))
    assert document["workflow_id"] == "r-1" and document["run_id"] == "run-9"
    assert document["sections"][1] == {
        "title": "Reply",
        "text": "Refunds within 30 days [policy 4.2].",
        "key": "reply",
    }
    assert (document["review_round"], document["waiting"], document["escalated"]) == (
        2,
        True,
        False,
    )
    assert document["time_left"] == "3 h 5 min"
    assert document["allowed_reviewers"] == ["alice", "bob"]
    assert [entry["feedback"] for entry in document["earlier_feedback"]] == [
        "Shorter, and cite the policy."
    ]
    assert document["fields"] is None and document["problems"] == []


def test_what_the_run_shows_prints_as_its_characters(capsys: pytest.CaptureFixture[str]) -> None:
    """Text the model, the request or the pipeline wrote (a title, a reply, a field, a
    problem) prints without the control characters a terminal acts on, and markup in it is
    printed, not read."""
    run = llm_run()
    evil = "\x1b]0;pwned\x07[bold red]x[/]\x1b[2J"
    view = run.view.model_copy(
        update={
            "sections": [ReviewSection(title=f"Reply {evil}", text=f"answer {evil}")],
            "fields": {f"total{evil}": f"1{evil}"},
            "problems": [f"total: wrong {evil}"],
            "corrections": True,
        }
    )
    print_view(RunView(run.workflow_id, run.run_id, view, run.feedback), NOW)
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x07" not in shown
    assert "answer ]0;pwned[bold red]x[/][2J" in shown
