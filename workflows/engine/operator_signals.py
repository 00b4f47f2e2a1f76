"""Operator signals a run takes once it is admitted: ``expire_review`` (end the current review
wait now, exactly as its timeout would), ``dead_letter`` (time out every review wait, so the
run takes its normal escalate -> dead_letter path and sends its dead-letter message) and
``revoke`` (its review rules refuse the revoked keys and reviewers from then on).

Signals cannot be refused: an invalid or untimely one (the run is not waiting for review) is
dropped, the run's state unchanged. Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio.common import RawValue

import workflows.engine.reviews as reviews
import workflows.errors as errors
from workflows.engine.inbound import Admission, inbound
from workflows.engine.pipeline import Context
from workflows.payloads import OperatorRequest, Revocation, RunCore

# What an action does with its reason: it sets the run's field that the review waits read.
Record = Callable[[RunCore[Any], str], None]


def force_timeout(run: RunCore[Any], reason: str) -> None:
    """End the current review wait (``reviews.take_forced_reason`` consumes it)."""
    run.forced_timeout = reason


def request_dead_letter(run: RunCore[Any], reason: str) -> None:
    """End every review wait until the run is dead-lettered."""
    run.dead_letter_requested = reason


class OperatorSignals:
    """The operator signals of the run ``context`` returns (None: the run never started, so
    they are dropped), each held until the run is admitted (``admission``)."""

    def __init__(
        self, admission: Admission, context: Callable[[], Context[Any, Any] | None]
    ) -> None:
        self._admission = admission
        self._context = context

    def expire_review(self, args: Sequence[RawValue]) -> None:
        """``expire_review``: end the current review wait now."""
        self._action(args, "review timeout forced", force_timeout)

    def dead_letter(self, args: Sequence[RawValue]) -> None:
        """``dead_letter``: time out every review wait from now on."""
        self._action(args, "dead-lettered", request_dead_letter)

    def revoke(self, args: Sequence[RawValue]) -> None:
        """``revoke``: refuse the revoked keys and reviewers from now on."""
        if self._admission.defer(lambda: self.revoke(args)):
            return
        ctx = self._context()
        if ctx is None:
            return
        try:
            revocation = inbound(args, Revocation)
        except errors.InvalidRequest:
            return
        reviews.revoke(ctx.run, revocation)

    def _action(self, args: Sequence[RawValue], action: str, record: Record) -> None:
        """Once the run is admitted, ``record`` the action's reason (``reviews.operator_reason``)
        while the run waits for review."""
        if self._admission.defer(lambda: self._action(args, action, record)):
            return
        ctx = self._context()
        if ctx is None:
            return
        request = OperatorRequest()
        if args:
            try:
                request = inbound(args, OperatorRequest)
            except errors.InvalidRequest:
                return
        reason = reviews.operator_reason(ctx.graph, ctx.run, request, action)
        if reason:
            record(ctx.run, reason)
