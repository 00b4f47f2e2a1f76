"""What the inbox's forms post: a review form's decision and the run it was shown for, a
field's text, and the local paths a form leads to (never an open redirect)."""

from __future__ import annotations

import json
from typing import Any, Final, get_args
from urllib.parse import quote

from pydantic import ValidationError
from starlette.requests import Request

from aiorch.ops.reviews import ReviewTarget
from workflows.payloads import (
    MAX_FEEDBACK_CHARS,
    Decision,
    ReviewDecision,
    describe_validation_error,
    lacks_feedback,
)

DECISIONS: Final = get_args(Decision)

# The form's buttons for an approval with corrected fields: from the correction form's inputs
# (and, with ``confirm=yes``, from the preview's JSON), and from the advanced JSON box.
CORRECT: Final = "correct"
CORRECT_JSON: Final = "correct-json"

# The hidden fields a review form carries (the run and round it was shown for).
REVIEW_FORM_FIELDS: Final = ("review_round", "run_id", "chain_id", "digest")


def decision_of(form: Any, reviewer: str) -> ReviewDecision:
    """The decision a review form asks for, on behalf of ``reviewer``.

    Raises:
        ValueError: one line for the page.
    """
    decision = form.get("decision")
    fields: dict[str, Any] | None = None
    if decision == CORRECT:
        decision, fields = "approve", corrected_fields(form.get("fields"))
    if decision not in DECISIONS:
        raise ValueError("Choose approve, reedit or reject.")
    feedback_raw = form.get("feedback")
    feedback = feedback_raw.strip() if isinstance(feedback_raw, str) else ""
    if len(feedback) > MAX_FEEDBACK_CHARS:
        raise ValueError(f"Feedback is limited to {MAX_FEEDBACK_CHARS} characters.")
    if lacks_feedback(decision, feedback):
        raise ValueError(
            "A reedit needs feedback: say what the model should change. Nothing was sent."
        )
    try:
        review_round = int(str(form.get("review_round", "")))
    except ValueError:
        raise ValueError("The form names no review round: reload the page.") from None
    try:
        return ReviewDecision(
            decision=decision,
            reviewer=reviewer,
            feedback=feedback or None,
            review_round=review_round,
            fields=fields,
        )
    except ValidationError as err:
        raise ValueError(f"Invalid review: {describe_validation_error(err)}") from None


def target_of(form: Any, workflow_id: str, decision: ReviewDecision) -> ReviewTarget:
    """The run the form was shown for (its hidden fields): the decision goes there only, and
    its token names that run chain and what the page showed."""

    def hidden(name: str) -> str | None:
        value = form.get(name)
        return value if isinstance(value, str) and value else None

    return ReviewTarget(
        workflow_id=workflow_id,
        run_id=hidden("run_id"),
        chain_id=hidden("chain_id"),
        review_round=decision.review_round,
        digest=hidden("digest"),
    )


def corrected_fields(raw: object) -> dict[str, Any]:
    """The corrected fields a reviewer typed (one JSON object).

    Raises:
        ValueError: one line for the page.
    """
    try:
        fields = json.loads(raw if isinstance(raw, str) else "")
    except json.JSONDecodeError as err:
        raise ValueError(
            f"The corrected fields are not JSON ({err.msg}, line {err.lineno})."
        ) from None
    if not isinstance(fields, dict):
        raise ValueError("The corrected fields must be one JSON object.")
    return fields


def field_text(form: Any, name: str) -> str:
    """A form field's text ("" when it is missing or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def run_path(workflow_id: str) -> str:
    """The path of a run's page."""
    return f"/runs/{quote(workflow_id, safe='')}"


def local_path(request: Request) -> str:
    """The path and query of the page ``request`` asked for."""
    path = request.url.path
    return path + (f"?{request.url.query}" if request.url.query else "")


def safe_next(target: object) -> str:
    """Only a path on this site (no scheme, no host, no ``//``): never an open redirect."""
    if isinstance(target, str) and target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return "/"
