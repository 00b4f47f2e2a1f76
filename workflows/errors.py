"""The project's errors, small and stable.

Hierarchy::

    OrchestratorError            base of everything raised on purpose
    ├── InvalidTransition        the graph has no such edge: a bug, fails loudly
    └── InvalidRequest           a request or review that breaks the contract

Activities report failures to the workflow as ``temporalio.exceptions.ApplicationError`` with
one of the stable ``type`` names below; the workflow, queries and dead-letter messages rely on
them, so they never change. Retryable ones are retried by the workflow's ``retry_llm`` state,
permanent ones end the run in ``failed``. ``DeadLetterRejected`` (non-retryable) says SQS refused
a run's dead-letter message for good, even in its reduced form (``activities.dead_letter``);
``NotificationRejected`` (non-retryable) that the review webhook refused a notification, which
the run never waits for (``activities.notify``).
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base class for errors this project raises on purpose."""


class InvalidTransition(OrchestratorError):
    """A (state, event) pair that the state graph does not allow."""

    def __init__(self, state: str, event: str, reason: str = "") -> None:
        self.state = state
        self.event = event
        suffix = f" ({reason})" if reason else ""
        super().__init__(f"invalid transition: event {event!r} in state {state!r}{suffix}")


class InvalidRequest(OrchestratorError):
    """A payload that breaks the contract; the message names the offending field."""


# Stable ApplicationError type names (wire contract: never rename).
INVALID_REQUEST = "InvalidRequest"
# A review or budget decision the run refused (the update fails with the reason).
DECISION_REFUSED = "DecisionRefused"
# A prompt whose reservation is more than the model's tokens per minute (permanent: the same
# prompt never fits), and a budgeted call the capacity store cannot meter (retryable: the store
# comes back).
LLM_PROMPT_TOO_LARGE = "LlmPromptTooLarge"
BUDGET_STORE_UNAVAILABLE = "BudgetStoreUnavailable"
# An activity scheduled by a run that is not one of the worker's own pipelines on its own task
# queue (activities.callers): refused, never retried.
UNKNOWN_CALLER = "UnknownCaller"
INPUT_UNAVAILABLE = "InputUnavailable"
# A referenced input could not be fetched for a passing reason (S3 throttling, 5xx, timeouts).
INPUT_FETCH_FAILED = "InputFetchFailed"
LLM_RETRYABLE = "LlmRetryable"
LLM_RATE_LIMITED = "LlmRateLimited"
LLM_MALFORMED_REPLY = "LlmMalformedReply"
LLM_PERMANENT = "LlmPermanent"
LLM_QUOTA_EXHAUSTED = "LlmQuotaExhausted"
LLM_REFUSED = "LlmRefused"
LLM_REPLY_TOO_LARGE = "LlmReplyTooLarge"
EMBEDDING_FAILED = "EmbeddingFailed"
DEAD_LETTER_REJECTED = "DeadLetterRejected"
# A run that ended in failed or dead_letter closes as a Temporal *Failed* run with this type; its
# details carry the run's PipelineResult (the contract's result, as a completed run returns it).
RUN_FAILED = "RunFailed"
# A call would have crossed the run's cost ceiling or its tenant's daily budget, and the
# policy (or an operator, or the decision's timeout) ended the run; redrive it once the budget
# allows (dead_letter) or start it again (failed, rejected by an operator).
BUDGET_EXCEEDED = "BudgetExceeded"
# The review webhook could not be reached or was overloaded (retried a few times) ...
NOTIFICATION_FAILED = "NotificationFailed"
# ... or refused a notification for good (4xx), or this worker has none configured.
NOTIFICATION_REJECTED = "NotificationRejected"
