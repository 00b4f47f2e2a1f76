"""What the engine and the inbox keep stays bounded: a run's corrections (each text or set of
fields past 16 KiB left out, the oldest dropped past 128 KiB, a reedit answered once) and the
inbox's drafts of unsent decisions (an hour, 256 at most, given back once, for their run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aiorch.ops.inbox.drafts import Drafts
from tests.support.builders import AT, prompt_plan
from workflows.engine.record import (
    CORRECTIONS_MAX_BYTES,
    MAX_CORRECTION_BYTES,
    add_correction,
    complete_reedits,
)
from workflows.payloads import Correction, RunState


def reedit(before: str, review_round: int = 1) -> Correction:
    return Correction(
        kind="reedit",
        reviewer="ann",
        review_round=review_round,
        at=AT,
        pipeline="llm",
        pipeline_version="v1",
        feedback="shorter",
        before=before,
    )


def run() -> RunState:
    return RunState(state="await_review", plan=prompt_plan())


def test_a_reedit_is_answered_once_by_the_next_result() -> None:
    """The next result answers every open reedit; a later one changes nothing."""
    state = run()
    add_correction(state, reedit("v1"))
    complete_reedits(state, "v2")
    complete_reedits(state, "v3")
    [kept] = state.corrections
    assert (kept.before, kept.after, kept.answered) == ("v1", "v2", True)


def test_a_text_too_large_is_left_out_and_the_oldest_corrections_dropped() -> None:
    """A reply past MAX_CORRECTION_BYTES is kept as None with ``cut`` (an answer too); past
    CORRECTIONS_MAX_BYTES the oldest corrections go first and are counted."""
    state = run()
    add_correction(state, reedit("x" * (MAX_CORRECTION_BYTES + 1)))
    complete_reedits(state, "y" * (MAX_CORRECTION_BYTES + 1))
    [cut] = state.corrections
    assert (cut.before, cut.after, cut.cut, cut.answered) == (None, None, True, True)

    size = MAX_CORRECTION_BYTES // 2
    count = 2 * CORRECTIONS_MAX_BYTES // size
    for number in range(count):
        add_correction(state, reedit("z" * size, review_round=number + 2))
        complete_reedits(state, "w" * size)
    total = sum(len(c.model_dump_json()) + 1 for c in state.corrections)
    assert total <= CORRECTIONS_MAX_BYTES
    assert state.corrections[-1].review_round == count + 1
    assert state.corrections_dropped == count + 1 - len(state.corrections)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_draft_is_given_back_once_for_its_run_within_the_hour() -> None:
    """A draft comes back for the run it was typed for, once; not for another run, not after
    its lifetime; the oldest goes first past the limit."""
    clock = Clock()
    drafts = Drafts(lifetime=timedelta(hours=1), limit=2, clock=clock)

    def keep(run: str) -> str:
        return drafts.keep(
            run, decision="reedit", feedback="f" * 50, fields=None, review_round="1",
            max_feedback=10,
        )  # fmt: skip

    first = keep("run-a")
    assert drafts.take(first, "run-b") is None
    taken = drafts.take(first, "run-a")
    assert taken is not None and taken.feedback == "f" * 10
    assert drafts.take(first, "run-a") is None
    late = keep("run-a")
    clock.now += timedelta(hours=1, seconds=1)
    assert drafts.take(late, "run-a") is None
    oldest, _, _ = keep("run-a"), keep("run-a"), keep("run-a")
    assert len(drafts) == 2 and drafts.take(oldest, "run-a") is None
