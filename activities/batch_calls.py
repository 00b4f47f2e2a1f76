"""A call in the batch lane: its name in a batch (``custom_id``), the spend reservation the
store keeps with it, what its run is handed (batched, or failed), and the calls metric."""

from __future__ import annotations

import hashlib
from datetime import date
from typing import Final

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.spend import SpendHold, call_key
from aiorch_runtime.batch_store import QueuedCall
from workflows import errors
from workflows.payloads import CallFailure, LlmCallInput, LlmCallResult

METRIC_BATCH_CALLS: Final = "aiorch_batch_calls"


def item_name(call: LlmCallInput) -> str:
    """A batched call's name (its ``custom_id``): a digest of its idempotency key."""
    return "call-" + hashlib.sha256(call_key(call).encode()).hexdigest()[:40]


def submission_key(scope: str, group: int, round_: int) -> str:
    """The metadata value that names a group's round in the provider's batch."""
    return f"{scope}:{group}:r{round_}"


def hold_text(hold: SpendHold | None) -> str:
    """A spend reservation as the store keeps it with its call ('' for none)."""
    return "" if hold is None else f"{hold.tenant}|{hold.day.isoformat()}|{hold.reservation}"


def hold_of(text: str) -> SpendHold | None:
    """The spend reservation a call was stored with (`hold_text`)."""
    if not text:
        return None
    tenant, day, reservation = text.split("|", 2)
    return SpendHold(tenant, date.fromisoformat(day), reservation)


def batched(call: LlmCallInput, item: str, batch_id: str) -> LlmCallResult:
    """What a run's ``invoke_llm`` returns once its call is in batch ``batch_id``."""
    return LlmCallResult(
        model=call.model, outcome="batched", lane="batch", batch_id=batch_id, batch_item=item
    )


def failed(call: LlmCallInput, failure: CallFailure, batch_id: str | None) -> LlmCallResult:
    """A batched call's failure, as its run takes it up."""
    return LlmCallResult(
        model=call.model, outcome="failed", lane="batch", batch_id=batch_id, failure=failure
    )


def count_calls(outcome: str, model: str, n: int = 1) -> None:
    """Count ``n`` calls through the batch API with their ``outcome``."""
    if activity.in_activity() and n:
        activity.metric_meter().create_counter(
            METRIC_BATCH_CALLS, "Calls through the provider's batch API, by outcome"
        ).add(n, {"model": model, "outcome": outcome})


def queued_input(queued: QueuedCall) -> LlmCallInput:
    """The call a queued call was stored as."""
    return LlmCallInput.model_validate_json(queued.call)


def unavailable(reason: str) -> ApplicationError:
    """The retryable error of a batch lane that cannot take or hand back a call now."""
    return ApplicationError(reason, type=errors.LLM_RETRYABLE)
