"""Rules about a review decision's own content that hold wherever a decision is made: the
command line and the inbox refuse such a decision before sending it, and the run's
``submit_review`` update refuses it from any other client.
"""

from __future__ import annotations

from workflows.payloads._base import Decision

__all__ = ["REEDIT_NEEDS_FEEDBACK", "lacks_feedback"]

REEDIT_NEEDS_FEEDBACK = "a reedit needs feedback: say what the model should change"


def lacks_feedback(decision: Decision | str, feedback: str | None) -> bool:
    """Whether ``decision`` is a reedit that says nothing to change: the model would be asked
    again with no reason, and the reedit would be exported as an example with no feedback."""
    return decision == "reedit" and not (feedback or "").strip()
