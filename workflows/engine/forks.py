"""A replay lab's fork, on the wire: what starts one (``ForkInput``) and what it returns
(``ForkResult``).

A fork is a new run of a recorded run's pipeline, on the lab's task queue, that re-runs the
original from one of its states: its request (under the fork's own request id), the outputs of
the activities the original ran before it entered that state (``RecordedOutput``, the seed the
fork's engine answers those activities from, ``workflows.engine.seeding``), and, for the
candidate, the ``Variant`` its plan takes. Only the lab's workflow class accepts one; the
production class refuses it (``is_fork_input``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from workflows.payloads import TENANT_PATTERN, Assignment, Variant
from workflows.payloads._base import _Open, _Strict

ForkKind = Literal["baseline", "candidate"]
# Keys every fork's input has (required fields of ForkInput) and no request has.
_FORK_KEYS = frozenset({"from_state", "original_run_id"})
MAX_RECORDED = 200


class RecordedOutput(_Strict):
    """What one activity of the original returned (JSON, as its history recorded it)."""

    activity: str = Field(min_length=1, max_length=200)
    result: Any


class ForkInput(_Strict):
    """A fork's start input: the original's request with the fork's id as its request id,
    the state it forks from, which fork it is, the candidate's variant (None for the
    baseline), the original's recorded outputs before that state in order, and the tenant
    its model calls spend as (the lab's, so its spend is counted apart)."""

    request: dict[str, Any]
    lab_id: str = Field(min_length=1, max_length=200)
    original_workflow_id: str = Field(min_length=1, max_length=1000)
    original_run_id: str = Field(min_length=1, max_length=200)
    from_state: str = Field(min_length=1, max_length=200)
    kind: ForkKind
    variant: Variant | None = None
    recorded: list[RecordedOutput] = Field(default_factory=list, max_length=MAX_RECORDED)
    tenant: str = Field(pattern=TENANT_PATTERN)
    assignment: Assignment | None = None
    """The rollout variant the original was planned under: the fork runs it too."""


class ForkResult(_Open):
    """How a fork ended: its state (a final one, or the review or budget state it would have
    waited in), the result as text or fields, what validation found, whether it went (or
    would have gone) to a reviewer, where and why it would have waited, and its error when it
    failed or diverged from the original before its fork state."""

    state: str
    model: str | None = None
    text: str | None = None
    fields: dict[str, Any] | None = None
    problems: list[str] = Field(default_factory=list)
    needs_review: bool = False
    waits: list[str] = Field(default_factory=list)
    error: str | None = None


def is_fork_input(raw: Any) -> bool:
    """Whether ``raw`` (a decoded start input) is a fork's (``ForkInput``)."""
    return isinstance(raw, dict) and raw.keys() >= _FORK_KEYS
