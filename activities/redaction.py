"""Keeping secrets out of error messages, which end up in history, logs and dead letters.

Providers echo credentials back in error bodies (OpenAI's 401 says "Incorrect API key provided:
sk-abc...xyz"), and such a message would otherwise travel into ``last_error``, the run's
history, the dead-letter message and the worker's log. Every error built from a provider's
answer passes through ``scrub`` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from temporalio.exceptions import ApplicationError

from workflows.payloads import DeadLetterMessage

REDACTED = "[redacted]"
# Key-shaped tokens: OpenAI-style (sk-..., including masked forms like sk-ab***yz), bearer tokens.
_KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_*\-.]{6,}|Bearer\s+[A-Za-z0-9_\-.=]{8,})")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every given secret (at least 4 characters) and key-shaped token replaced."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return _KEY_SHAPES.sub(REDACTED, text)


def scrubbed_error(error: ApplicationError, secrets: Iterable[str] = ()) -> ApplicationError:
    """The same application error (type, retryability, delay) with its message scrubbed."""
    message = scrub(error.message, secrets)
    if message == error.message:
        return error
    return ApplicationError(
        message,
        type=error.type,
        non_retryable=error.non_retryable,
        next_retry_delay=error.next_retry_delay,
    )


def content_free_dead_letter(message: DeadLetterMessage) -> DeadLetterMessage:
    """The dead-letter message without content, for deployments that encrypt payloads.

    SQS bodies are not covered by the payload codec, so with encryption on the message keeps
    what an operator needs to triage and redrive (ids, failed state, attempts, the error's type,
    the states and events with their times) and drops what may hold personal data (the message,
    metadata, error texts, review details and feedback). ``starter.py dlq redrive`` then takes
    the request from the run's (encrypted) history; the full story is readable through the
    project's client or the codec server.
    """
    request = message.request
    kept_request = {
        "request_id": request.get("request_id"),
        "redacted": "payload encryption is on: the request is in the run's encrypted history",
    }
    return message.model_copy(
        update={
            "request": kept_request,
            "last_error": _error_type(message.last_error),
            "history": [
                entry.model_copy(update={"detail": None, "feedback": None})
                for entry in message.history
            ],
        }
    )


def _error_type(text: str | None) -> str | None:
    if text is None:
        return None
    head, sep, _ = text.partition(": ")
    return f"{head}: {REDACTED}" if sep and head.isidentifier() else REDACTED
