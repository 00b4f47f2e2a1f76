"""Who sent a review: signed review tokens, verified inside the workflow.

A review names its reviewer, and a name is a string anyone can type. When the operator
configures reviewer keys (``REVIEW_PUBLIC_KEYS``), every review must also carry a token: a
compact JWS (JWT) signed with Ed25519 (``alg: EdDSA``) whose header names the key (``kid``) and
whose claims bind it to one decision on one round of one run:

========== ==========================================================================
``aud``    ``ai-orchestrator/review``
``sub``    the reviewer; the key must be allowed to sign for this name
``wid``    the workflow id
``rid``    the run chain's first execution run id: a new run that reuses the workflow id has
           another (required by runs whose plan says ``review_token_binds_run``)
``ch``     SHA-256 (hex) of what the reviewer was shown (``ReviewView.digest``), or absent
``round``  the review round decided (``RunStatus.review_round``)
``dec``    ``approve``, ``reedit`` or ``reject``
``fb``     SHA-256 (hex) of the feedback, or the empty string when there is none
``fd``     SHA-256 (hex) of the corrected fields (canonical JSON), or absent/empty when none
``iat``    issued at (seconds since the epoch)
``exp``    expires at; checked against workflow time, never the wall clock
========== ==========================================================================

So a token cannot be replayed on another run (one that reuses the workflow id included), round
or decision, nor carry other feedback or other corrected fields, nor approve content other than
what the reviewer was shown. With ``review_token_ttl_s`` in the plan the workflow also refuses a
token whose lifetime (``exp - iat``) is longer than the operator's ``REVIEW_TOKEN_TTL_S``.

Public keys are plain data (``ReviewKey``: key id, the raw 32-byte key in base64, and whom it
may sign for: one reviewer, a list, or anyone for an identity provider such as the review inbox).
They travel in the run's plan, built by the worker from its configuration; private keys never
enter a run. Verification is deterministic (a signature check and comparisons with values the
workflow passes in), so it runs in update validators and signal handlers alike; the signing half
lives with the operator's tools (``aiorch.ops.reviews``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workflows.payloads import (
    TENANT_PATTERN,
    RequestBase,
    RequesterKey,
    ReviewDecision,
    ReviewKey,
)

AUDIENCE = "ai-orchestrator/review"
START_AUDIENCE = "ai-orchestrator/start"
ALGORITHM = "EdDSA"
KEY_BYTES = 32
ANY_REVIEWER = "*"
# Tolerated clock difference between the signer and the workflow's time.
CLOCK_SKEW = timedelta(seconds=60)
_KEY_ID = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


class ReviewClaims(BaseModel):
    """The claims of a review token (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    aud: str
    sub: str = Field(min_length=1, max_length=200)
    wid: str
    rid: str = ""
    ch: str = ""
    round: int
    dec: str
    fb: str
    fd: str = ""
    iat: int
    exp: int


class KeySpecError(ValueError):
    """A reviewer key entry that cannot be used; the message names the entry, not the key."""


def feedback_digest(feedback: str | None) -> str:
    """The ``fb`` claim: SHA-256 of the feedback (UTF-8, hex), or ``""`` without feedback."""
    return hashlib.sha256(feedback.encode("utf-8")).hexdigest() if feedback else ""


def fields_digest(fields: dict[str, Any] | None) -> str:
    """The ``fd`` claim: SHA-256 of the corrected fields as canonical JSON (sorted keys, no
    spaces, UTF-8), or ``""`` without corrections."""
    if fields is None:
        return ""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def claims_for(
    decision: ReviewDecision,
    *,
    workflow_id: str,
    review_round: int,
    issued: datetime,
    ttl: timedelta,
    run_id: str | None = None,
    digest: str | None = None,
) -> dict[str, object]:
    """The claims a signer puts in the token for ``decision`` (the verifier checks the same)."""
    issued_s = int(issued.timestamp())
    claims: dict[str, object] = {
        "aud": AUDIENCE,
        "sub": decision.reviewer,
        "wid": workflow_id,
        "round": review_round,
        "dec": decision.decision,
        "fb": feedback_digest(decision.feedback),
        "iat": issued_s,
        "exp": issued_s + max(1, int(ttl.total_seconds())),
    }
    if decision.fields is not None:
        claims["fd"] = fields_digest(decision.fields)
    if run_id:
        claims["rid"] = run_id
    if digest:
        claims["ch"] = digest
    return claims


def _key_entries(spec: str, shape: str, *, third: bool) -> list[tuple[str, str, str | None]]:
    """``(key_id, base64 key, third part or None)`` of each ``KEY_ID:BASE64[:THIRD]`` entry,
    separated by commas or newlines (``#`` comments and blank lines skipped); ``third``: the
    third part is required.

    Raises:
        KeySpecError: an entry is malformed (``shape`` says how it should look), a key is not
            32 bytes, or an id repeats.
    """
    found: dict[str, tuple[str, str, str | None]] = {}
    for raw_entry in re.split(r"[,\n]", spec):
        entry = raw_entry.strip()
        if not entry or entry.startswith("#"):
            continue
        parts = [part.strip() for part in entry.split(":")]
        if len(parts) not in ((3,) if third else (2, 3)) or not _KEY_ID.match(parts[0]):
            raise KeySpecError(
                f"each entry is {shape} with a key id of letters, digits, '.', '_', '@' or '-'"
            )
        key_id = parts[0]
        if key_id in found:
            raise KeySpecError(f"key id {key_id!r} is configured twice")
        public_key_bytes(parts[1], key_id)
        found[key_id] = (key_id, parts[1], parts[2] if len(parts) == 3 else None)
    return list(found.values())


def parse_review_keys(spec: str) -> list[ReviewKey]:
    """``key_id:base64key[:who]`` entries separated by commas or newlines.

    ``who`` is ``*`` (any reviewer: an identity provider) or reviewer names joined by ``|``;
    without it the key signs only for the reviewer named like the key.

    Raises:
        KeySpecError: an entry is malformed, a key is not 32 bytes, or an id repeats.
    """
    keys = []
    shape = "KEY_ID:BASE64_PUBLIC_KEY[:REVIEWER|REVIEWER...|*]"
    for key_id, material, who in _key_entries(spec, shape, third=False):
        who = who or key_id
        reviewers = None if who == ANY_REVIEWER else [n for n in who.split("|") if n.strip()]
        if reviewers is not None and not reviewers:
            raise KeySpecError(f"key {key_id!r} names nobody it may sign for")
        keys.append(ReviewKey(key_id=key_id, public_key=material, reviewers=reviewers))
    return keys


def parse_requester_keys(spec: str) -> list[RequesterKey]:
    """``requester:base64key:tenant`` entries separated by commas or newlines: each key signs
    the starts of the requester it is named after, spending ``tenant``'s budget.

    Raises:
        KeySpecError: an entry is malformed, names no tenant, or an id repeats.
    """
    keys = []
    shape = "REQUESTER:BASE64_PUBLIC_KEY:TENANT"
    for key_id, material, tenant in _key_entries(spec, shape, third=True):
        if not tenant or not re.fullmatch(TENANT_PATTERN, tenant):
            raise KeySpecError(f"key {key_id!r} names no valid tenant ({TENANT_PATTERN})")
        keys.append(RequesterKey(key_id=key_id, public_key=material, tenant=tenant))
    return keys


def public_key_bytes(material: str, key_id: str) -> bytes:
    """The raw public key of a ``ReviewKey``.

    Raises:
        KeySpecError: not base64, or not 32 bytes.
    """
    try:
        raw = base64.b64decode(material, validate=True)
    except (binascii.Error, ValueError):
        raise KeySpecError(f"key {key_id!r} is not valid base64") from None
    if len(raw) != KEY_BYTES:
        raise KeySpecError(f"key {key_id!r} is {len(raw)} bytes; an Ed25519 key is {KEY_BYTES}")
    return raw


@dataclass(frozen=True)
class Expected:
    """What a token must say to decide a run's review now: the workflow id and round; the
    chain's first run id when the run requires it (None: it does not); the digest of what is
    under review (asked only when the token names one); the longest lifetime the operator
    allows (None: no limit); and the workflow's time."""

    workflow_id: str
    review_round: int
    now: datetime
    run_id: str | None = None
    digest: Callable[[], str] | None = None
    max_ttl: timedelta | None = None


def review_token_problem(
    decision: ReviewDecision, *, keys: Sequence[ReviewKey], expected: Expected
) -> str | None:
    """Why ``decision``'s token does not authenticate it, or None when it does.

    ``expected.now`` is workflow time (``workflow.now()``), so a replay decides the same way.
    """
    if not decision.token:
        return "review is not signed (reviewer authentication is on: send a signed token)"
    verified = verified_token(decision.token, keys, ReviewClaims, "review token")
    if isinstance(verified, str):
        return verified
    claims, key = verified
    return _claims_problem(claims, key, decision, expected)


C = TypeVar("C", bound=BaseModel)
K = TypeVar("K", ReviewKey, RequesterKey)


def verified_token(token: str, keys: Sequence[K], model: type[C], what: str) -> tuple[C, K] | str:
    """``token``'s claims (as ``model``) and the key that signed them, or why not."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return f"{what} is malformed"
    key_id = header.get("kid")
    key = next((k for k in keys if k.key_id == key_id), None)
    if key is None:
        return f"{what} is signed with a key this run does not know"
    if header.get("alg") != ALGORITHM:
        return f"{what} must be signed with {ALGORITHM}"
    try:
        public_key = Ed25519PublicKey.from_public_bytes(
            public_key_bytes(key.public_key, key.key_id)
        )
        payload = jwt.PyJWS().decode(token, key=public_key, algorithms=[ALGORITHM])
        return model.model_validate_json(payload), key
    except (jwt.PyJWTError, KeySpecError, ValidationError):
        return f"{what} signature does not verify"


class StartClaims(BaseModel):
    """The claims of a start claim: who asked for which request (its digest), of which
    pipeline (its workflow type) in which namespace, when. Claims issued before they named
    the pipeline and namespace carry neither, and vouch for no start."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    aud: str
    sub: str = Field(min_length=1, max_length=200)
    rq: str
    wft: str | None = None
    ns: str | None = None
    iat: int
    exp: int


def request_digest(request: RequestBase) -> str:
    """SHA-256 (hex) of a request as canonical JSON, its start claim and fields left at their
    defaults out (so a field a later version adds keeps older clients' claims valid): what a
    start claim vouches for."""
    value = request.model_dump(mode="json", exclude={"start_claim"}, exclude_defaults=True)
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def start_claims_for(
    request: RequestBase,
    *,
    requester: str,
    workflow_type: str,
    namespace: str,
    issued: datetime,
    ttl: timedelta,
) -> dict[str, object]:
    """The claims a requester's tool signs for ``request``, a start of ``workflow_type`` (the
    pipeline) in ``namespace`` (the verifier checks the same)."""
    issued_s = int(issued.timestamp())
    return {
        "aud": START_AUDIENCE,
        "sub": requester,
        "rq": request_digest(request),
        "wft": workflow_type,
        "ns": namespace,
        "iat": issued_s,
        "exp": issued_s + max(1, int(ttl.total_seconds())),
    }


def start_claim_problem(
    request: RequestBase,
    *,
    keys: Sequence[RequesterKey],
    workflow_type: str,
    namespace: str,
    now: datetime,
) -> RequesterKey | str:
    """The requester key that signed ``request``'s start claim for a run of ``workflow_type``
    in ``namespace``, or why it does not vouch for this start (not signed, an unknown key,
    another request, another pipeline or namespace, expired)."""
    if not request.start_claim:
        return "the start is not signed (start authentication is on: sign it with REQUESTER_KEY)"
    verified = verified_token(request.start_claim, keys, StartClaims, "start claim")
    if isinstance(verified, str):
        return verified
    claims, key = verified
    if claims.aud != START_AUDIENCE:
        return "start claim is not meant for starts"
    if claims.sub != key.key_id:
        return "start claim names another requester than its key's"
    if claims.rq != request_digest(request):
        return "start claim was issued for another request"
    if claims.wft != workflow_type:
        return "start claim was issued for another pipeline (workflow type)"
    if claims.ns != namespace:
        return "start claim was issued for another namespace"
    now_s = now.timestamp()
    if claims.exp <= now_s:
        return "start claim has expired"
    if claims.iat > now_s + CLOCK_SKEW.total_seconds():
        return "start claim is issued in the future"
    return key


def _claims_problem(
    claims: ReviewClaims, key: ReviewKey, decision: ReviewDecision, expected: Expected
) -> str | None:
    if claims.aud != AUDIENCE:
        return "review token is not meant for reviews"
    if claims.sub != decision.reviewer:
        return "review token was issued to another reviewer"
    if key.reviewers is not None and claims.sub not in key.reviewers:
        return f"key {key.key_id!r} may not sign for this reviewer"
    if claims.wid != expected.workflow_id:
        return "review token was issued for another run"
    if expected.run_id is not None and claims.rid != expected.run_id:
        return "review token was issued for another run of this workflow id"
    if claims.round != expected.review_round:
        return (
            f"review token is for round {claims.round}, the run is at round {expected.review_round}"
        )
    if claims.dec != decision.decision:
        return "review token was issued for another decision"
    if claims.fb != feedback_digest(decision.feedback):
        return "review token was issued for other feedback"
    if claims.fd != fields_digest(decision.fields):
        return "review token was issued for other corrected fields"
    if claims.ch and expected.digest is not None and claims.ch != expected.digest():
        return "review token was issued for other content than the run shows"
    now_s = expected.now.timestamp()
    if claims.exp <= now_s:
        return "review token has expired"
    if claims.iat > now_s + CLOCK_SKEW.total_seconds():
        return "review token is issued in the future"
    if expected.max_ttl is not None and claims.exp - claims.iat > expected.max_ttl.total_seconds():
        return (
            f"review token lives {claims.exp - claims.iat} s; the run accepts at most "
            f"{expected.max_ttl.total_seconds():g} s (REVIEW_TOKEN_TTL_S)"
        )
    return None
