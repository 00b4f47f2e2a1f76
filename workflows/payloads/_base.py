"""What every payload model shares: the contract's limits and names, the validators of text a
client sends, the three kinds of model, and one-line validation errors."""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "DEFAULT_TENANT",
    "MAX_FEEDBACK_CHARS",
    "MAX_INLINE_MESSAGE_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_REVIEWER_CHARS",
    "MAX_TOKEN_CHARS",
    "NOTE_CONTINUED_AS_NEW",
    "NOTE_REVIEW_VOTE",
    "REFERENCE_SCHEMES",
    "REQUEST_ID_PATTERN",
    "TENANT_PATTERN",
    "BudgetPolicy",
    "BudgetVerdict",
    "Decision",
    "FinalState",
    "Lane",
    "NonBlank",
    "ReviewMode",
    "ReviewerName",
    "Text",
    "describe_validation_error",
    "printable",
]

REQUEST_ID_PATTERN = r"^[a-f0-9]{24}$"
# A tenant name: a key in the capacity store and a metric label, so short and plain.
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# Runs that name no tenant spend as this one.
DEFAULT_TENANT: Final = "default"
REFERENCE_SCHEMES: Final = ("file://", "s3://")

ReviewMode = Literal["auto", "always", "never"]
Decision = Literal["approve", "reedit", "reject"]
BudgetVerdict = Literal["approve", "reject"]
BudgetPolicy = Literal["wait", "fail"]
FinalState = Literal["completed", "failed", "dead_letter"]
# How a model call is made: a synchronous call, or through the provider's batch API.
Lane = Literal["sync", "batch"]

MAX_INLINE_MESSAGE_BYTES: Final = 256 * 1024
MAX_METADATA_BYTES: Final = 64 * 1024
MAX_FEEDBACK_CHARS: Final = 16 * 1024
MAX_REVIEWER_CHARS: Final = 200
MAX_METADATA_DEPTH: Final = 16
MAX_TOKEN_CHARS: Final = 8192
NOTE_CONTINUED_AS_NEW: Final = "continued_as_new"
NOTE_REVIEW_VOTE: Final = "review_vote"


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode (it holds a lone surrogate)") from None
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


Text = Annotated[str, AfterValidator(_unicode)]
NonBlank = Annotated[str, AfterValidator(_unicode), AfterValidator(_not_blank)]
ReviewerName = Annotated[
    str, Field(max_length=MAX_REVIEWER_CHARS), AfterValidator(_unicode), AfterValidator(_not_blank)
]


def _inline_size(value: str) -> str:
    size = len(value.encode("utf-8"))
    if size > MAX_INLINE_MESSAGE_BYTES:
        raise ValueError(
            f"is {size} bytes; inline messages are limited to {MAX_INLINE_MESSAGE_BYTES} bytes: "
            "pass a reference instead (file:///path or s3://bucket/key; "
            "`starter.py start --file PATH` stores the document for you)"
        )
    return value


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests (stops counting past ``limit``)."""
    if limit < 0 or not isinstance(value, dict | list):
        return 0
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)


def _metadata_bounds(value: dict[str, Any]) -> dict[str, Any]:
    if _depth(value, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise ValueError(f"nests deeper than {MAX_METADATA_DEPTH} levels")
    try:
        size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode (it holds a lone surrogate)") from None
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES} bytes")
    return value


class _Strict(BaseModel):
    """Inbound models: what a client sends. Unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Open(BaseModel):
    """Outbound models ignore unknown fields so an older reader accepts a newer writer."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _Mutable(BaseModel):
    """The workflow's own state: changed in place by workflow code, carried as a whole."""

    model_config = ConfigDict(extra="ignore")


def printable(text: str, limit: int = 300) -> str:
    """``text`` safe to put in an error or log line: no lone surrogates (they would make the
    message itself unencodable), at most ``limit`` characters."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= limit else safe[: limit - 6] + " [cut]"


def describe_validation_error(err: ValidationError) -> str:
    """One line naming each offending field, for users rather than developers.

    Never quotes the offending value (it may be content, or not even encodable), and field
    names a client made up are cut short.
    """
    problems = []
    for item in err.errors()[:10]:
        field = ".".join(printable(str(part), 64) for part in item["loc"]) or "(payload)"
        problems.append(f"{field}: {printable(item['msg'], 200)}")
    return printable("; ".join(problems), 1000)
