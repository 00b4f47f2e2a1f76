"""A model call's errors, classified in one place: transient failures (timeouts, connection
errors, 408/409/429, 5xx) raise retryable errors; the rest (bad request, auth, not found,
exhausted quota) raise non-retryable ones with stable type names. Also what a provider's answer
says about its rate limits (``ProviderSignal``), for the shared capacity."""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import openai
from temporalio.exceptions import ApplicationError

from aiorch_runtime.capacity import ProviderSignal
from workflows import errors
from workflows.payloads import CallFailure

PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})


def retry_after(headers: Any) -> timedelta | None:
    """The provider's requested wait: ``retry-after-ms``, ``Retry-After`` seconds or HTTP date."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        with contextlib.suppress(ValueError):
            return timedelta(milliseconds=max(0.0, float(millis)))
    value = headers.get("retry-after")
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return timedelta(seconds=max(0.0, float(value)))
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return timedelta(seconds=max(0.0, when.timestamp() - time.time()))
    return None


def provider_signal(headers: Mapping[str, str] | None, *, throttled: bool) -> ProviderSignal:
    """The rate-limit headers of a provider's answer (OpenAI's names); ``throttled``: a 429,
    whose ``retry-after-ms``/``Retry-After`` pauses the model's shared capacity."""
    if headers is None:
        return ProviderSignal()

    def number(name: str) -> int | None:
        value = headers.get(name)
        try:
            return int(float(value)) if value is not None else None
        except ValueError:
            return None

    return ProviderSignal(
        remaining_tokens=number("x-ratelimit-remaining-tokens"),
        remaining_requests=number("x-ratelimit-remaining-requests"),
        limit_tokens=number("x-ratelimit-limit-tokens"),
        limit_requests=number("x-ratelimit-limit-requests"),
        retry_after=(retry_after(headers) or timedelta(seconds=1)) if throttled else None,
    )


def classify(err: openai.OpenAIError) -> ApplicationError:
    """Map a client error to a retryable or permanent ApplicationError with a stable type."""
    if isinstance(err, openai.APITimeoutError):
        return ApplicationError(f"LLM call timed out: {err}", type=errors.LLM_RETRYABLE)
    if isinstance(err, openai.APIConnectionError):
        return ApplicationError(f"cannot reach the LLM: {err}", type=errors.LLM_RETRYABLE)
    if isinstance(err, openai.APIStatusError):
        return status_error(
            err.status_code,
            getattr(err, "code", None),
            err.message,
            retry_after(err.response.headers),
        )
    return ApplicationError(f"LLM client error: {err}", type=errors.LLM_RETRYABLE)


def status_error(
    status: int, code: str | None, message: str, delay: timedelta | None = None
) -> ApplicationError:
    """The error of an HTTP ``status`` answer (a call's, or a batched call's line): retryable
    or permanent, with a stable type, and the wait it asks for."""
    summary = f"HTTP {status} from the LLM: {message}"
    if status == 429 and code == "insufficient_quota":
        return ApplicationError(summary, type=errors.LLM_QUOTA_EXHAUSTED, non_retryable=True)
    if status == 429:
        return ApplicationError(summary, type=errors.LLM_RATE_LIMITED, next_retry_delay=delay)
    if status in PERMANENT_STATUSES:
        return ApplicationError(summary, type=errors.LLM_PERMANENT, non_retryable=True)
    return ApplicationError(summary, type=errors.LLM_RETRYABLE, next_retry_delay=delay)


def failure_of(err: ApplicationError) -> CallFailure:
    """An activity's error as the value a batched call's failure is handed back as."""
    delay = err.next_retry_delay
    return CallFailure(
        error=f"{err.type}: {err.message}" if err.type else err.message,
        type=err.type,
        permanent=err.non_retryable,
        retry_after_s=delay.total_seconds() if delay else None,
    )
