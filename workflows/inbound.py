"""What clients send, decoded inside the workflow: the start input, reviews, operator requests.

Every such payload reaches the workflow undecoded (``RawValue``) and is decoded here, so no
input of any shape, encoding or size can fail the workflow task (which Temporal would retry
forever): whatever does not decode or validate raises ``InvalidRequest`` with one printable
line, and the caller fails the run, refuses the update or counts the signal
(``DecisionInbox`` does the last two for decisions sent both ways).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any, Final, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

import workflows.errors as errors
from workflows.payloads import describe_validation_error, printable

M = TypeVar("M", bound=BaseModel)
# What a handler or the run gets when the client sent no argument: the SDK calls them with
# none, and a required parameter would fail the workflow task on every retry (a stuck run).
NO_ARGUMENT: Final = RawValue(Payload())


def sent(raw: RawValue) -> bool:
    """Whether the client sent an argument at all."""
    return raw.payload != NO_ARGUMENT.payload


def decoded(raw: RawValue) -> Any:
    """A client's payload, decoded (JSON values, not yet validated).

    Raises:
        errors.InvalidRequest: none was sent, or it does not decode: an unknown or refused
            encoding, invalid JSON or Unicode, nesting past the decoder's limit.
    """
    if not sent(raw):
        raise errors.InvalidRequest("nothing was sent")
    try:
        return workflow.payload_converter().from_payload(raw.payload)
    except ValidationError as err:
        raise errors.InvalidRequest(describe_validation_error(err)) from None
    except Exception as err:  # whatever a decoder raises, the client gets one line, no loop
        raise errors.InvalidRequest(printable(str(err) or type(err).__name__)) from None


def inbound(raw: RawValue, model: type[M]) -> M:
    """A client's payload, decoded and validated as ``model``.

    Raises:
        errors.InvalidRequest: it does not decode, or does not validate.
    """
    value = decoded(raw)
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise errors.InvalidRequest(describe_validation_error(err)) from None


D = TypeVar("D", bound=BaseModel)
# Signals held while a run is not yet admitted (a continued run's state is installed only once
# its lineage is verified); beyond this, a flood in that moment is refused or dropped.
HELD_BEFORE_ADMISSION: Final = 64
R = TypeVar("R")


class Admission:
    """Whether the run's state is in place. Until it is, every signal is held, in the order the
    signals came (reviews, budget decisions and operator actions alike), and delivered once it is.

    Until then a signal would be judged against a blank state: a review or an operator's
    action sent in the instant a run continues as new would be refused or dropped by the new
    run before the carried state (its round, its reviewers, its review wait) is installed.
    """

    def __init__(self) -> None:
        self.admitted = False
        self._held: list[Callable[[], None]] = []

    def defer(
        self, deliver: Callable[[], None], overflow: Callable[[], None] | None = None
    ) -> bool:
        """Before admission: hold ``deliver`` until then, or, with ``HELD_BEFORE_ADMISSION``
        signals already held, call ``overflow`` instead (None: drop it); True either way.
        Once admitted: False, and the caller handles its signal now."""
        if self.admitted:
            return False
        if len(self._held) < HELD_BEFORE_ADMISSION:
            self._held.append(deliver)
        elif overflow is not None:
            overflow()
        return True

    def admit(self) -> None:
        """The run's state is in place: deliver the held signals, in order."""
        self.admitted = True
        held, self._held = self._held, []
        for deliver in held:
            deliver()


@dataclass(eq=False)
class DecisionInbox(Generic[D, R]):
    """A decision a client sends as a signal or as an update (a review, a budget decision),
    judged by one set of rules for both, and held until the run applies it.

    The update's validator refuses what the rules refuse (nothing enters history); the signal,
    which cannot be refused, counts it and does not act on it. ``R`` is the desk's refusal.
    """

    model: type[D]
    # The run's, which holds signals until its state is in place.
    admission: Admission
    _: KW_ONLY
    # Why the rules refuse a decision now, given the one pending (None: they do not).
    refusal: Callable[[D, D | None], R | None]
    # The refusal of a payload that does not decode or validate.
    invalid: Callable[[str], R]
    # Record a refused signal.
    count: Callable[[R], None]
    # A refusal's sentence, for the update's caller.
    reason: Callable[[R], str]
    pending: D | None = None
    applied: int = 0

    def signal(self, raw: RawValue = NO_ARGUMENT) -> None:
        """The signal: hold the decision, or count the refusal."""
        if self.admission.defer(
            lambda: self.signal(raw),
            overflow=lambda: self.count(self.invalid("too many sent while the run was resuming")),
        ):
            return
        decision, refused = self._judged(raw)
        if refused is not None:
            self.count(refused)
            return
        self.pending = decision

    def validate(self, raw: RawValue = NO_ARGUMENT) -> None:
        """The update's validator.

        Raises:
            ValueError: the rules refuse the decision (the update is rejected with the reason),
                or the run is not admitted yet (the sender may send it again in a moment).
        """
        if not self.admission.admitted:
            raise ValueError("the run is resuming from the run it continued; send it again")
        _, refused = self._judged(raw)
        if refused is not None:
            raise ValueError(self.reason(refused))

    async def submit(self, raw: RawValue = NO_ARGUMENT) -> None:
        """The update (once validated): hold the decision, and return once it is applied."""
        decision = inbound(raw, self.model)
        applied_before = self.applied
        self.pending = decision
        await workflow.wait_condition(lambda: self.applied > applied_before)

    def take(self) -> D | None:
        """The held decision, if any, now being applied (it wakes the update that sent it)."""
        decision, self.pending = self.pending, None
        if decision is not None:
            self.applied += 1
        return decision

    def _judged(self, raw: RawValue) -> tuple[D | None, R | None]:
        try:
            decision = inbound(raw, self.model)
        except errors.InvalidRequest as err:
            return None, self.invalid(str(err))
        return decision, self.refusal(decision, self.pending)
