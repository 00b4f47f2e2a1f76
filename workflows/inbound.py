"""What clients send, decoded inside the workflow: the start input, reviews, operator requests.

Every such payload reaches the workflow undecoded (``RawValue``), as many arguments as the
client sent, and is decoded here, so no input of any shape, encoding, size or number can fail
the workflow task (which Temporal would retry forever): whatever is not exactly one argument
that decodes and validates raises ``InvalidRequest`` with one printable line, and the caller
fails the run, refuses the update or counts the signal (``DecisionInbox`` does the last two for
decisions sent both ways).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Final, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue

import workflows.errors as errors
from workflows.payloads import describe_validation_error, printable

M = TypeVar("M", bound=BaseModel)


def decoded(args: Sequence[RawValue]) -> Any:
    """A client's one argument, decoded (JSON values, not yet validated).

    Raises:
        errors.InvalidRequest: none was sent, or more than one, or it does not decode: an
            unknown or refused encoding, invalid JSON or Unicode, nesting past the decoder's
            limit.
    """
    if not args:
        raise errors.InvalidRequest("nothing was sent")
    if len(args) > 1:
        raise errors.InvalidRequest(f"{len(args)} arguments were sent, not one")
    try:
        return workflow.payload_converter().from_payload(args[0].payload)
    except ValidationError as err:
        raise errors.InvalidRequest(describe_validation_error(err)) from None
    except Exception as err:  # whatever a decoder raises, the client gets one line, no loop
        raise errors.InvalidRequest(printable(str(err) or type(err).__name__)) from None


def inbound(args: Sequence[RawValue], model: type[M]) -> M:
    """A client's one argument, decoded and validated as ``model``.

    Raises:
        errors.InvalidRequest: not one was sent, or it does not decode, or does not validate.
    """
    value = decoded(args)
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

    def signal(self, args: Sequence[RawValue]) -> None:
        """The signal: hold the decision, or count the refusal."""
        if self.admission.defer(
            lambda: self.signal(args),
            overflow=lambda: self.count(self.invalid("too many sent while the run was resuming")),
        ):
            return
        decision, refused = self._judged(args)
        if refused is not None:
            self.count(refused)
            return
        self.pending = decision

    def validate(self, args: Sequence[RawValue]) -> None:
        """The update's validator.

        Raises:
            ValueError: the rules refuse the decision (the update is rejected with the reason),
                or the run is not admitted yet (the sender may send it again in a moment).
        """
        if not self.admission.admitted:
            raise ValueError("the run is resuming from the run it continued; send it again")
        _, refused = self._judged(args)
        if refused is not None:
            raise ValueError(self.reason(refused))

    async def submit(self, args: Sequence[RawValue]) -> None:
        """The update (once validated): hold the decision, and return once it is applied."""
        decision = inbound(args, self.model)
        applied_before = self.applied
        self.pending = decision
        await workflow.wait_condition(lambda: self.applied > applied_before)

    def take(self) -> D | None:
        """The held decision, if any, now being applied (it wakes the update that sent it)."""
        decision, self.pending = self.pending, None
        if decision is not None:
            self.applied += 1
        return decision

    def _judged(self, args: Sequence[RawValue]) -> tuple[D | None, R | None]:
        try:
            decision = inbound(args, self.model)
        except errors.InvalidRequest as err:
            return None, self.invalid(str(err))
        return decision, self.refusal(decision, self.pending)
