"""Signing reviews: the operator's half of ``workflows.engine.identity``.

A reviewer (or a tool that authenticates reviewers, such as the review inbox) holds an Ed25519
private key; the workers know its public key (``REVIEW_PUBLIC_KEYS``). ``starter.py keys reviewer
NAME`` makes a pair and prints both configuration lines; ``starter.py review`` signs with
``REVIEWER_KEY`` (or ``REVIEWER_KEY_FILE``), a ``key_id:base64 private key`` entry. The private
key never leaves the signer: only the token, bound to one decision on one round of one run,
travels with the review.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from aiorch.ops.reviews import ReviewTarget, Signer
from aiorch_runtime.config import ConfigError, Settings
from workflows.engine.budget_tokens import budget_claims_for
from workflows.engine.identity import (
    ALGORITHM,
    ANY_REVIEWER,
    KEY_BYTES,
    claims_for,
    start_claims_for,
)
from workflows.payloads import BudgetDecision, RequestBase, ReviewDecision

R = TypeVar("R", bound=RequestBase)


@dataclass(frozen=True)
class SigningKey:
    """A reviewer's (or an identity provider's) private key and its id."""

    key_id: str
    private_key: Ed25519PrivateKey = field(repr=False)

    @classmethod
    def generate(cls, key_id: str) -> SigningKey:
        """A fresh random key."""
        return cls(key_id, Ed25519PrivateKey.generate())

    @classmethod
    def parse(cls, spec: str, *, source: str = "REVIEWER_KEY") -> SigningKey:
        """``key_id:base64`` of the 32-byte private key.

        Raises:
            ConfigError: one line naming the problem, never the key.
        """
        key_id, sep, material = spec.strip().partition(":")
        if not sep or not key_id:
            raise ConfigError(f"{source} must be KEY_ID:BASE64_PRIVATE_KEY")
        try:
            raw = base64.b64decode(material.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{source}: the key is not valid base64") from None
        if len(raw) != KEY_BYTES:
            raise ConfigError(f"{source}: an Ed25519 private key is {KEY_BYTES} bytes")
        return cls(key_id.strip(), Ed25519PrivateKey.from_private_bytes(raw))

    def private_entry(self) -> str:
        """The ``REVIEWER_KEY`` line for this key (a secret)."""
        raw = self.private_key.private_bytes_raw()
        return f"{self.key_id}:{base64.b64encode(raw).decode('ascii')}"

    def public_entry(self, reviewers: list[str] | None = None) -> str:
        """The ``REVIEW_PUBLIC_KEYS`` entry: signs for ``reviewers``; None (the default):
        anyone, as an identity provider; ``[key_id]``: only the reviewer named like the key."""
        public = self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        entry = f"{self.key_id}:{base64.b64encode(public).decode('ascii')}"
        if reviewers is None:
            return f"{entry}:{ANY_REVIEWER}"
        if reviewers == [self.key_id]:
            return entry
        return f"{entry}:{'|'.join(reviewers)}"

    def requester_entry(self, tenant: str) -> str:
        """The ``REQUESTER_PUBLIC_KEYS`` entry: this key signs the starts of the requester named
        like it, whose runs spend ``tenant``'s budget."""
        return f"{self.public_entry([self.key_id])}:{tenant}"

    def sign(
        self,
        decision: ReviewDecision,
        *,
        workflow_id: str,
        review_round: int,
        now: datetime,
        ttl: timedelta = timedelta(minutes=10),
        run_id: str | None = None,
        digest: str | None = None,
    ) -> ReviewDecision:
        """``decision`` for ``review_round`` of ``workflow_id``, with its token (naming the
        run chain ``run_id`` and the content ``digest`` when given).

        ``now`` is the signer's clock; the workflow checks expiry against its own time.
        """
        claims = claims_for(
            decision,
            workflow_id=workflow_id,
            review_round=review_round,
            issued=now,
            ttl=ttl,
            run_id=run_id,
            digest=digest,
        )
        token = jwt.encode(
            claims, self.private_key, algorithm=ALGORITHM, headers={"kid": self.key_id}
        )
        return decision.model_copy(update={"review_round": review_round, "token": token})

    def sign_budget(
        self,
        decision: BudgetDecision,
        *,
        workflow_id: str,
        run_id: str,
        now: datetime,
        ttl: timedelta = timedelta(minutes=10),
    ) -> BudgetDecision:
        """``decision`` for the run chain ``run_id`` of ``workflow_id``, with its token."""
        claims = budget_claims_for(
            decision, workflow_id=workflow_id, run_id=run_id, issued=now, ttl=ttl
        )
        token = jwt.encode(
            claims, self.private_key, algorithm=ALGORITHM, headers={"kid": self.key_id}
        )
        return decision.model_copy(update={"token": token})

    def sign_start(
        self,
        request: R,
        *,
        workflow_type: str,
        namespace: str,
        now: datetime,
        ttl: timedelta = timedelta(minutes=10),
    ) -> R:
        """``request`` with its start claim: this key's requester asks for exactly it, as a
        run of ``workflow_type`` (the pipeline) in ``namespace``."""
        claims = start_claims_for(
            request,
            requester=self.key_id,
            workflow_type=workflow_type,
            namespace=namespace,
            issued=now,
            ttl=ttl,
        )
        token = jwt.encode(
            claims, self.private_key, algorithm=ALGORITHM, headers={"kid": self.key_id}
        )
        return request.model_copy(update={"start_claim": token})

    def signer(self, ttl: timedelta = timedelta(minutes=10)) -> Signer:
        """Signs each decision for its target (run chain, round, content when shown), at the
        wall clock's time (``aiorch.ops.reviews.Signer``, as ``submit_review`` and
        ``review-all`` take it)."""

        def sign(decision: ReviewDecision, target: ReviewTarget) -> ReviewDecision:
            assert target.review_round is not None
            return self.sign(
                decision,
                workflow_id=target.workflow_id,
                review_round=target.review_round,
                now=datetime.now(UTC),
                ttl=ttl,
                run_id=target.chain_id,
                digest=target.digest,
            )

        return sign


def requester_key_from_settings(settings: Settings) -> SigningKey | None:
    """The CLI's key for signing starts (``REQUESTER_KEY``/``REQUESTER_KEY_FILE``), if
    configured.

    Raises:
        ConfigError: it is configured but unusable.
    """
    if settings.requester_key is None:
        return None
    return SigningKey.parse(settings.requester_key.get_secret_value(), source="REQUESTER_KEY")


def signing_key_from_settings(settings: Settings) -> SigningKey | None:
    """The CLI's own signing key (``REVIEWER_KEY``/``REVIEWER_KEY_FILE``), if configured.

    Raises:
        ConfigError: it is configured but unusable.
    """
    if settings.reviewer_key is None:
        return None
    return SigningKey.parse(settings.reviewer_key.get_secret_value())
