"""Reviewer keys: parsing REVIEW_PUBLIC_KEYS and REVIEWER_KEY, and what a token binds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jwt
import pytest

from aiorch.ops.signing import SigningKey
from aiorch.runtime.config import ConfigError, Settings
from workflows.engine.identity import (
    AUDIENCE,
    KeySpecError,
    feedback_digest,
    parse_review_keys,
)
from workflows.payloads import ReviewDecision

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_public_key_entries_say_whom_a_key_signs_for() -> None:
    """``id:key`` signs for the reviewer named id; ``id:key:a|b`` for a and b; ``id:key:*``
    for anyone (an identity provider such as the review inbox)."""
    alice, team, inbox = (SigningKey.generate(name) for name in ("alice", "team", "inbox"))
    spec = "\n".join(
        [alice.public_entry(["alice"]), team.public_entry(["bob", "carol"]), inbox.public_entry()]
    )
    keys = {key.key_id: key.reviewers for key in parse_review_keys(spec + "\n# comment\n")}
    assert keys == {"alice": ["alice"], "team": ["bob", "carol"], "inbox": None}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("alice", "KEY_ID:BASE64_PUBLIC_KEY"),
        ("al ice:AAAA", "KEY_ID:BASE64_PUBLIC_KEY"),
        ("alice:!!!", "not valid base64"),
        ("alice:AAAA", "is 3 bytes"),
    ],
)
def test_malformed_public_keys_are_refused_by_name(spec: str, words: str) -> None:
    """A malformed entry is refused with a line that names the entry's problem."""
    with pytest.raises(KeySpecError, match=words):
        parse_review_keys(spec)


def test_a_key_id_may_appear_once() -> None:
    """Two entries with one id would make verification ambiguous."""
    entry = SigningKey.generate("alice").public_entry(["alice"])
    with pytest.raises(KeySpecError, match="configured twice"):
        parse_review_keys(f"{entry},{entry}")


def test_settings_refuse_bad_keys_at_load_and_mask_the_private_one() -> None:
    """A bad REVIEW_PUBLIC_KEYS fails at start as a ConfigError; REVIEWER_KEY is a secret."""
    with pytest.raises(ConfigError, match="REVIEW_PUBLIC_KEYS"):
        Settings(review_public_keys="alice:nope")
    key = SigningKey.generate("alice")
    settings = Settings(reviewer_key=key.private_entry())
    assert key.private_entry() not in repr(settings)
    assert SigningKey.parse(key.private_entry()).private_entry() == key.private_entry()


def test_a_token_binds_run_round_decision_reviewer_and_feedback() -> None:
    """The signed claims are exactly what the workflow checks: audience, reviewer, run,
    round, decision, a digest of the feedback (not the feedback itself), and a lifetime."""
    key = SigningKey.generate("inbox")
    decision = ReviewDecision(decision="reedit", reviewer="ann", feedback="shorter")
    signed = key.sign(
        decision, workflow_id="a" * 24, review_round=3, now=AT, ttl=timedelta(minutes=5)
    )
    assert signed.review_round == 3 and signed.token is not None
    assert jwt.get_unverified_header(signed.token)["kid"] == "inbox"
    claims = jwt.decode(signed.token, options={"verify_signature": False})
    assert claims == {
        "aud": AUDIENCE,
        "sub": "ann",
        "wid": "a" * 24,
        "round": 3,
        "dec": "reedit",
        "fb": feedback_digest("shorter"),
        "iat": int(AT.timestamp()),
        "exp": int(AT.timestamp()) + 300,
    }
    assert "shorter" not in signed.token
