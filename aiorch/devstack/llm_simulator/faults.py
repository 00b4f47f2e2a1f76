"""Fault injection: the ``[sim:...]`` directives in a request, the global faults of
``/_sim/faults``, and the error answers they produce (docs/simulator.md lists them)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

EndpointPath = Literal["chat", "embeddings"]

_DIRECTIVE = re.compile(r"\[sim:([^\[\]]*)\]")
SHAPES = frozenset({"malformed", "fenced", "badjson", "truncated", "refusal", "content_filter"})
_FLAGS = SHAPES | {"review"}
# Directives whose value is the share of runs they fire for (chosen from the run key).
_RATES = frozenset({"wrong_total"})
# Every directive name and option the parser takes (docs/simulator.md lists each).
DIRECTIVES = tuple(sorted(_FLAGS | _RATES | {"status", "hang", "delay_ms"}))
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}
_DEFAULT_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


class FaultFilter(BaseModel):
    """Which calls a fault or directive applies to, and how many times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    path: EndpointPath | None = None
    times: int | None = Field(default=None, ge=1)

    def matches(self, path: EndpointPath, model: str) -> bool:
        """Return whether a call to ``path`` for ``model`` passes the filters."""
        return self.path in (None, path) and self.model in (None, model)


class FaultSpec(FaultFilter):
    """An HTTP error answer, a delay or both: the body of ``POST /_sim/faults`` and of a
    ``status`` directive (which always has a status)."""

    status: int | None = Field(default=None, ge=400, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    retry_after_ms: int | None = Field(default=None, ge=0)
    code: str | None = None
    delay_ms: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _has_an_effect(self) -> FaultSpec:
        if self.status is None and self.delay_ms is None:
            raise ValueError("a fault needs a status, a delay_ms or both")
        return self


class InvalidRequestError(Exception):
    """A request the simulator answers with HTTP 400; ``fault`` is its code (None: none)."""

    fault: str | None = None


class InvalidDirective(InvalidRequestError):
    """A ``[sim:...]`` directive the simulator does not understand."""

    fault = "invalid_directive"


@dataclass(frozen=True)
class Directive:
    """One parsed ``[sim:...]`` token; ``text`` is the counter key; ``rate`` the share of
    runs a rate directive fires for."""

    text: str
    name: str
    spec: FaultFilter
    sleep_s: float | None = None
    rate: float | None = None


@dataclass
class GlobalFault:
    """A fault added with ``POST /_sim/faults``, and how many calls it has matched."""

    spec: FaultSpec
    hits: int = 0


@dataclass
class Plan:
    """What the directives decided for one call."""

    fired: list[str] = field(default_factory=list)
    error: FaultSpec | None = None
    shape: str | None = None
    review: bool = False
    wrong_total: bool = False


def strip_directives(text: str) -> str:
    """Remove every ``[sim:...]`` token and collapse the whitespace left behind."""
    return " ".join(_DIRECTIVE.sub(" ", text).split())


def parse_directives(texts: Iterable[str]) -> list[Directive]:
    """Parse the directives in ``texts`` in order, once each; raise InvalidRequestError."""
    found = dict.fromkeys(m.group(1) for text in texts for m in _DIRECTIVE.finditer(text))
    return [_parse_directive(text) for text in found]


def _parse_directive(text: str) -> Directive:
    head, *options = text.split(":")
    name, has_value, value = head.partition("=")
    params: dict[str, str] = {"path": "chat"}
    for option in options:
        key, has_eq, option_value = option.partition("=")
        if not has_eq:
            raise _directive_error(text, f"expected key=value, got {option!r}")
        params[key] = option_value
    if name not in DIRECTIVES:
        raise _directive_error(text, f"unknown directive {name!r}; known: {', '.join(DIRECTIVES)}")
    if name in _FLAGS and has_value:
        raise _directive_error(text, f"{name!r} takes no value")
    try:
        if name == "status":
            return Directive(text, name, FaultSpec.model_validate({"status": value, **params}))
        spec = FaultFilter.model_validate(params)
        sleep_s = _sleep_seconds(name, value if has_value else None)
        rate = _rate(name, value if has_value else None)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise _directive_error(text, details) from exc
    except ValueError as exc:
        raise _directive_error(text, str(exc)) from exc
    if name in _FLAGS | _RATES and spec.path != "chat":
        raise _directive_error(text, f"{name!r} only applies to chat")
    return Directive(text, name, spec, sleep_s, rate)


def _rate(name: str, value: str | None) -> float | None:
    if name not in _RATES:
        return None
    if value is None:
        raise ValueError(f"{name} needs a share of runs, e.g. [sim:{name}=0.6]")
    rate = float(value)
    if not 0 <= rate <= 1:
        raise ValueError(f"{name} must be a share of runs from 0 to 1")
    return rate


def _sleep_seconds(name: str, value: str | None) -> float | None:
    if name == "hang":
        seconds = math.inf if value is None else float(value)
    elif name == "delay_ms":
        if value is None:
            raise ValueError("delay_ms needs a value, e.g. [sim:delay_ms=200]")
        seconds = int(value) / 1000
    else:
        return None
    if not seconds >= 0:
        raise ValueError(f"{name} must be a non-negative number")
    return seconds


def _directive_error(text: str, reason: str) -> InvalidDirective:
    return InvalidDirective(f"invalid directive [sim:{text}]: {reason}")


def error_response(
    status: int, message: str, kind: str, code: str | None, headers: dict[str, str] | None = None
) -> web.Response:
    """An error answer with OpenAI's error body."""
    error = {"message": message, "type": kind, "code": code, "param": None}
    return web.json_response({"error": error}, status=status, headers=headers)


def fault_response(spec: FaultSpec, status: int) -> web.Response:
    """The error answer a fault asks for, with its Retry-After headers."""
    code = spec.code or _DEFAULT_CODES.get(status)
    if code == "insufficient_quota":  # OpenAI reports a quota 429 with its own error type
        kind = code
    else:
        fallback = "server_error" if status >= 500 else "invalid_request_error"
        kind = _ERROR_TYPES.get(status, fallback)
    headers = {}
    if spec.retry_after is not None:
        headers["Retry-After"] = _format_seconds(spec.retry_after)
    if spec.retry_after_ms is not None:
        headers["retry-after-ms"] = str(spec.retry_after_ms)
    message = f"Simulated HTTP {status} ({code or kind})"
    return error_response(status, message, kind, code, headers)


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if seconds.is_integer() else str(seconds)
