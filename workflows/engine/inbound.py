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
from typing import Any, Final, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

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
D_in = TypeVar("D_in", bound=BaseModel, contravariant=True)
# Why every decision sent to a run that never started (its input refused) is refused.
NOT_STARTED: Final = "run did not start: its input was refused"


class Admission:
    """Whether the run's state is in place. Until it is, every decision and operator action is
    held, in the order it came (signals and updates alike), and delivered once it is.

    Until then a decision would be judged against a blank state: a review or an operator's
    action sent in the instant a run continues as new would be refused or dropped by the new
    run before the carried state (its round, its reviewers, its review wait) is installed.
    """

    def __init__(self) -> None:
        self.admitted = False
        self._held: list[Callable[[], None]] = []
        self._after: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        """True when nothing more can be held (``HELD_BEFORE_ADMISSION`` are)."""
        return not self.admitted and len(self._held) >= HELD_BEFORE_ADMISSION

    def defer(
        self, deliver: Callable[[], None], overflow: Callable[[], None] | None = None
    ) -> bool:
        """Before admission: hold ``deliver`` until then, or, with ``HELD_BEFORE_ADMISSION``
        already held, call ``overflow`` instead (None: drop it); True either way.
        Once admitted: False, and the caller handles its decision now."""
        if self.admitted:
            return False
        if not self.full:
            self._held.append(deliver)
        elif overflow is not None:
            overflow()
        return True

    def admit(self) -> None:
        """The run's state is in place (or the run will not start): deliver what was held, in
        order."""
        self.admitted = True
        held, self._held = self._held, []
        for deliver in held:
            deliver()
        after, self._after = self._after, []
        for act in after:
            act()

    def after_admission(self, act: Callable[[], None]) -> None:
        """Call ``act`` once the run is admitted, after what was held (at once if it is)."""
        if self.admitted:
            act()
        else:
            self._after.append(act)


OVERFLOW: Final = "too many sent while the run was resuming"
# Since this patch a signalled decision that ``DecisionInbox.screen`` refuses (a reedit with no
# feedback) is counted as refused; before it, the run acted on it.
SIGNAL_SCREENED_PATCH: Final = "signalled-decision-screened"


class DecisionRules(Protocol[D_in, R]):
    """The rules a ``DecisionInbox`` judges its decisions by; ``R`` is their refusal."""

    def refusal(self, decision: D_in, pending: D_in | None, /) -> R | None:
        """Why the rules refuse ``decision`` now, given the one ``pending`` (None: they do
        not)."""
        ...

    def invalid(self, problem: str, /) -> R:
        """The refusal of a payload that does not decode or validate."""
        ...

    def count(self, refused: R, /) -> None:
        """Record a refused signal."""
        ...

    def reason(self, refused: R, /) -> str:
        """A refusal's sentence, for the update's caller."""
        ...

    def settle(self, decision: D_in, /) -> bool:
        """Apply an accepted decision at once when it does not move the run; True when it
        did (False: it is held for the run to apply)."""
        ...


@dataclass(eq=False)
class DecisionInbox(Generic[D, R]):
    """A decision a client sends as a signal or as an update (a review, a budget decision),
    judged by one set of rules for both, and held until the run applies it.

    The update's validator refuses what the rules or ``screen`` refuse (nothing enters
    history); the signal, which cannot be refused, counts it and does not act on it. Before the
    run is admitted, both wait: the validator refuses only what does not decode (or ``screen``
    refuses), and the decision is judged, in the order it came, once the run's state is in
    place; an update the rules refuse then fails with the same reason. ``R`` is the rules'
    refusal (a review's or a budget decision's).

    A decision the run takes without moving (``rules.settle``: a review policy's vote short of
    its quorum) is applied as it is accepted, never held, so the next one is judged at once; the
    update that sent it answers right away.
    """

    model: type[D]
    # The run's, which holds decisions until its state is in place.
    admission: Admission
    rules: DecisionRules[D, R]
    _: KW_ONLY
    # Why a decision's own content is refused whatever the run's state (None: it never is):
    # by the update's validator, and for a signal since SIGNAL_SCREENED_PATCH.
    screen: Callable[[D], R | None] | None = None
    pending: D | None = None
    # Decisions accepted and applied so far: an update waits until its own is applied.
    accepted: int = 0
    applied: int = 0
    # Signals refused as one too many before admission, counted once the run's state is in
    # place: counted at once, they would land on the blank state the carried state replaces.
    overflowed: int = 0

    def signal(self, args: Sequence[RawValue]) -> None:
        """The signal: hold the decision, or count the refusal (the rules', or ``screen``'s)."""
        if self.admission.defer(lambda: self.signal(args), overflow=self._overflow):
            return
        decision, refused = self._judged(args)
        if refused is None and decision is not None:
            refused = self._screened_signal(decision)
            if refused is None:
                self._hold(decision)
                return
        if refused is not None:
            self.rules.count(refused)

    def _screened_signal(self, decision: D) -> R | None:
        """``screen``'s refusal of a signalled decision. A run recorded before
        ``SIGNAL_SCREENED_PATCH`` took such a decision, and replays so: the patch is asked only
        when ``screen`` refuses."""
        if self.screen is None:
            return None
        refused = self.screen(decision)
        if refused is not None and workflow.patched(SIGNAL_SCREENED_PATCH):
            return refused
        return None

    def _overflow(self) -> None:
        self.overflowed += 1
        if self.overflowed == 1:
            self.admission.after_admission(self._count_overflowed)

    def _count_overflowed(self) -> None:
        # Runs once, on admission: nothing is held, so nothing overflows, after it.
        for _ in range(self.overflowed):
            self.rules.count(self.rules.invalid(OVERFLOW))

    def validate(self, args: Sequence[RawValue]) -> None:
        """The update's validator.

        Raises:
            ApplicationError: ``DecisionRefused`` (non-retryable): the rules or ``screen``
                refuse the decision (the update is rejected with the reason); before
                admission, only a decision that does not decode, one ``screen`` refuses, or
                one too many held.
        """
        if self.admission.admitted:
            decision, refused = self._judged(args)
        else:
            decision, refused = self._decoded(args)
            if refused is None and self.admission.full:
                refused = self.rules.invalid(OVERFLOW)
        if refused is None and decision is not None and self.screen is not None:
            refused = self.screen(decision)
        if refused is not None:
            raise self._refused(refused)

    async def submit(self, args: Sequence[RawValue]) -> None:
        """The update (once validated): judge the decision (once the run is admitted), hold it,
        and return once it is applied.

        Raises:
            ApplicationError: ``DecisionRefused`` (non-retryable): the rules refused it once
                the run's state was in place.
        """
        if self.admission.admitted:
            # The validator judged it a moment ago, against this state (its verdict is not
            # asked again: it is not replayed). Unless another update validated in the same
            # moment got here first, it is held at once, with no await before.
            if self.pending is None:
                ticket, refused = self._hold(inbound(args, self.model)), None
            else:
                ticket, refused = self._accept(args)
        else:
            verdicts: list[tuple[int, R | None]] = []
            self.admission.defer(
                lambda: verdicts.append(self._accept(args)),
                overflow=lambda: verdicts.append((0, self.rules.invalid(OVERFLOW))),
            )
            await workflow.wait_condition(lambda: bool(verdicts))
            [(ticket, refused)] = verdicts
        if refused is not None:
            raise self._refused(refused)
        await workflow.wait_condition(lambda: self.applied >= ticket)

    def take(self) -> D | None:
        """The held decision, if any, now being applied (it wakes the update that sent it)."""
        decision, self.pending = self.pending, None
        if decision is not None:
            self.applied += 1
        return decision

    def _accept(self, args: Sequence[RawValue]) -> tuple[int, R | None]:
        """Judge a decision now: hold it and return its ticket (see `_hold`), or return its
        refusal."""
        decision, refused = self._judged(args)
        if refused is not None or decision is None:
            return 0, refused
        return self._hold(decision), None

    def _hold(self, decision: D) -> int:
        """Hold a decision the rules accept (or apply it now, when ``settle`` can); its ticket:
        the count of decisions accepted, which the count applied reaches once it is applied."""
        self.accepted += 1
        if self.rules.settle(decision):
            self.applied += 1
        else:
            self.pending = decision
        return self.accepted

    def _judged(self, args: Sequence[RawValue]) -> tuple[D | None, R | None]:
        try:
            decision = inbound(args, self.model)
        except errors.InvalidRequest as err:
            return None, self.rules.invalid(str(err))
        return decision, self.rules.refusal(decision, self.pending)

    def _decoded(self, args: Sequence[RawValue]) -> tuple[D | None, R | None]:
        try:
            return inbound(args, self.model), None
        except errors.InvalidRequest as err:
            return None, self.rules.invalid(str(err))

    def _refused(self, refused: R) -> ApplicationError:
        return ApplicationError(
            self.rules.reason(refused), type=errors.DECISION_REFUSED, non_retryable=True
        )
