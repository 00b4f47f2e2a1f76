"""What a continued run holds before its state is in place (``Admission``): every decision and
operator action, in the order it came, but at most 64 (docs/contract.md, "decisions while a run
resumes"), so a flood sent in that moment cannot grow the run's memory without bound."""

from __future__ import annotations

from collections.abc import Callable

from workflows.engine.inbound import Admission, DecisionInbox
from workflows.payloads import ReviewDecision

# The contract's cap and its refusal, spelt out rather than read from the code.
HELD_AT_MOST = 64
ONE_TOO_MANY = "too many sent while the run was resuming"


def recorder(into: list[int], n: int) -> Callable[[], None]:
    return lambda: into.append(n)


def test_before_admission_everything_is_held_and_delivered_in_order() -> None:
    """Deferred actions wait until ``admit``, then run once each, in the order they came;
    after admission nothing is held (the caller acts at once)."""
    admission = Admission()
    delivered: list[int] = []
    for n in range(3):
        assert admission.defer(recorder(delivered, n))
    assert delivered == []
    admission.admit()
    assert delivered == [0, 1, 2]
    assert not admission.defer(recorder(delivered, 3))
    assert delivered == [0, 1, 2]


def test_a_flood_before_admission_is_held_only_up_to_the_cap() -> None:
    """Of 100 actions sent before admission, the first 64 are held and delivered; the other 36
    go to their overflow (a decision's refusal) at once and are never delivered; without an
    overflow one is dropped. ``full`` says so until the run is admitted."""
    admission = Admission()
    delivered: list[int] = []
    overflowed: list[int] = []
    for n in range(100):
        assert admission.defer(recorder(delivered, n), overflow=recorder(overflowed, n))
        assert admission.full == (n + 1 >= HELD_AT_MOST)
    assert admission.defer(recorder(delivered, 100))  # no overflow: dropped
    assert overflowed == list(range(HELD_AT_MOST, 100))
    admission.admit()
    assert delivered == list(range(HELD_AT_MOST))
    assert not admission.full


def test_what_runs_after_admission_runs_after_the_held_and_at_once_once_admitted() -> None:
    """An act registered before admission runs once, after every held action is delivered; one
    registered once the run is admitted runs at once."""
    admission = Admission()
    order: list[int] = []
    admission.defer(recorder(order, 1))
    admission.after_admission(recorder(order, 2))
    admission.defer(recorder(order, 3))
    assert order == []
    admission.admit()
    assert order == [1, 3, 2]
    admission.after_admission(recorder(order, 4))
    assert order == [1, 3, 2, 4]


class CountingRules:
    """Rules that accept every decision that decodes and count each refusal in ``counted``."""

    def __init__(self, counted: list[str]) -> None:
        self.counted = counted

    def refusal(self, decision: ReviewDecision, pending: ReviewDecision | None) -> str | None:
        return None

    def invalid(self, problem: str) -> str:
        return problem

    def count(self, refused: str) -> None:
        self.counted.append(refused)

    def reason(self, refused: str) -> str:
        return refused

    def settle(self, decision: ReviewDecision) -> bool:
        return False


def test_signals_past_the_cap_are_counted_once_each_after_the_held_ones() -> None:
    """A review signal past the 64 held while a run resumes cannot be refused to its sender; it
    is counted as one too many once the run's state is in place, after the held ones are judged,
    once each: one past the cap counts one, three count three."""
    for past_the_cap in (1, 3):
        admission = Admission()
        counted: list[str] = []
        inbox: DecisionInbox[ReviewDecision, str] = DecisionInbox(
            ReviewDecision, admission, CountingRules(counted)
        )
        for _ in range(HELD_AT_MOST + past_the_cap):
            inbox.signal([])  # sent empty: the held ones are refused as such once judged
        assert counted == []
        admission.admit()
        assert counted == ["nothing was sent"] * HELD_AT_MOST + [ONE_TOO_MANY] * past_the_cap
