"""What a review decision must say for itself, whatever the run's state: the update's
validator refuses a decision that breaks these rules (``workflows.payloads.review_rules``), the
rules the command line and the inbox apply before sending.

Only the validator asks (``DecisionInbox.screen``): a validator is not replayed, so recorded
histories replay as they were. A ``review`` signal, which cannot be refused to its sender, is
judged as before.

Workflow code, passed through the sandbox; deterministic.
"""

from __future__ import annotations

from workflows.engine.reviews import Refusal
from workflows.payloads import REEDIT_NEEDS_FEEDBACK, ReviewDecision, lacks_feedback


def content_refusal(decision: ReviewDecision) -> Refusal | None:
    """Why ``decision`` may never be applied, or None: a reedit with no feedback."""
    if lacks_feedback(decision.decision, decision.feedback):
        return Refusal("feedback_missing", REEDIT_NEEDS_FEEDBACK)
    return None
