"""Reviewer and requester keys: parsing REVIEW_PUBLIC_KEYS, REVIEWER_KEY, REQUESTER_PUBLIC_KEYS
and REQUESTER_KEY, and what a review token, a budget token and a start claim bind."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest

from aiorch.ops.reviews import ReviewTarget
from aiorch.ops.signing import SigningKey, requester_key_from_settings, signing_key_from_settings
from aiorch_runtime.config import ConfigError, Settings
from workflows.engine.budget_tokens import budget_claims_for, budget_token_problem
from workflows.engine.identity import (
    Expected,
    KeySpecError,
    claims_for,
    feedback_digest,
    fields_digest,
    parse_requester_keys,
    parse_review_keys,
    request_digest,
    review_token_problem,
    start_claim_problem,
    start_claims_for,
)
from workflows.payloads import (
    BudgetDecision,
    PipelineRequest,
    RequestBase,
    RequesterKey,
    ReviewDecision,
    RunOptions,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)
# The contract's audience (docs/security.md), spelt out rather than read from the code.
REVIEW_AUDIENCE = "ai-orchestrator/review"
# SHA-256 of "shorter" (UTF-8, hex), worked out by hand: what a token's ``fb`` claim must hold.
SHORTER_SHA256 = "13602ce54433df2bee54be0836c90a0adc931b85abc047f786e1a6c39670adb8"


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
        "aud": REVIEW_AUDIENCE,
        "sub": "ann",
        "wid": "a" * 24,
        "round": 3,
        "dec": "reedit",
        "fb": SHORTER_SHA256,
        "iat": int(AT.timestamp()),
        "exp": int(AT.timestamp()) + 300,
    }
    assert "shorter" not in signed.token


@pytest.mark.parametrize("audience", ["ai-orchestrator/login", "", "ai-orchestrator/review "])
def test_the_verifier_refuses_a_token_meant_for_another_audience(audience: str) -> None:
    """A token signed by a key the run trusts, for exactly this run, round, decision, reviewer
    and feedback, but whose ``aud`` is not ``ai-orchestrator/review`` (a token the same key
    signed for something else) does not authenticate a review; the same claims with the
    review audience do."""
    key = SigningKey.generate("inbox")
    keys = parse_review_keys(key.public_entry())
    decision = ReviewDecision(decision="approve", reviewer="ann", review_round=1)
    expected = Expected(workflow_id="a" * 24, review_round=1, now=AT)

    def token_for(aud: str) -> ReviewDecision:
        claims = claims_for(
            decision, workflow_id="a" * 24, review_round=1, issued=AT, ttl=timedelta(minutes=5)
        )
        token = jwt.encode(
            {**claims, "aud": aud}, key.private_key, algorithm="EdDSA", headers={"kid": "inbox"}
        )
        return decision.model_copy(update={"token": token})

    assert review_token_problem(token_for(REVIEW_AUDIENCE), keys=keys, expected=expected) is None
    refused = review_token_problem(token_for(audience), keys=keys, expected=expected)
    assert refused == "review token is not meant for reviews"


def test_the_digests_are_sha256_of_the_feedback_and_of_canonical_fields() -> None:
    """``fb`` is SHA-256 of the feedback's UTF-8, empty without feedback; ``fd`` is SHA-256 of
    the corrected fields as JSON with sorted keys, no spaces and characters kept as UTF-8
    (not escaped), empty without corrections: what any signer must compute to match."""
    assert feedback_digest("shorter") == SHORTER_SHA256
    assert feedback_digest(None) == feedback_digest("") == ""
    # SHA-256 of '{"amount":12.5,"vendor":"Café Ünïcode"}' in UTF-8.
    assert fields_digest({"vendor": "Café Ünïcode", "amount": 12.5}) == (
        "2909d121ac1558ffd649b415f2a8517f78b5255f1b61dadeebd1191eb1b0f1e9"
    )
    assert fields_digest({}) == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    assert fields_digest(None) == ""


def test_a_signed_token_carries_the_run_chain_and_the_content_shown() -> None:
    """Signed for a run chain and the content a reviewer was shown, a token carries them as
    ``rid`` and ``ch``, and corrected fields as ``fd``; without them it has none of these."""
    key = SigningKey.generate("inbox")
    decision = ReviewDecision(decision="approve", reviewer="ann", fields={"total": 3})
    signed = key.sign(
        decision, workflow_id="a" * 24, review_round=1, now=AT, run_id="run-1", digest="c0ffee"
    )
    assert signed.token is not None
    claims = jwt.decode(signed.token, options={"verify_signature": False})
    assert (claims["rid"], claims["ch"], claims["fd"]) == (
        "run-1",
        "c0ffee",
        fields_digest({"total": 3}),
    )
    bare = key.sign(
        ReviewDecision(decision="approve", reviewer="ann"),
        workflow_id="a" * 24,
        review_round=1,
        now=AT,
    )
    assert bare.token is not None
    assert not {"rid", "ch", "fd"} & set(
        jwt.decode(bare.token, options={"verify_signature": False})
    )


KEY = SigningKey.generate("inbox")
ALICE = SigningKey.generate("alice")
KEYS = parse_review_keys(f"{KEY.public_entry()},{ALICE.public_entry(['alice'])}")
RUN = "a" * 24
DECISION = ReviewDecision(decision="reedit", reviewer="ann", feedback="shorter")


def signed_by(key: SigningKey, claims: dict[str, object]) -> str:
    """``claims`` signed as the tools sign them: EdDSA, with ``key``'s id in the header."""
    return jwt.encode(claims, key.private_key, algorithm="EdDSA", headers={"kid": key.key_id})


def token(
    key: SigningKey = KEY, headers: dict[str, object] | None = None, **changes: object
) -> str:
    """A token for ``DECISION`` on round 1 of ``RUN``, chain ``chain-1``, content ``c0ffee``,
    issued at ``AT`` for 10 minutes, with ``changes`` to its claims."""
    claims = claims_for(
        DECISION,
        workflow_id=RUN,
        review_round=1,
        issued=AT,
        ttl=timedelta(minutes=10),
        run_id="chain-1",
        digest="c0ffee",
    )
    return signed_by(key, {**claims, **changes})


def problem(
    signed: str | None,
    decision: ReviewDecision = DECISION,
    **expected: object,
) -> str | None:
    fields: dict[str, object] = {
        "workflow_id": RUN,
        "review_round": 1,
        "now": AT,
        "run_id": "chain-1",
        "digest": lambda: "c0ffee",
    }
    fields.update(expected)
    return review_token_problem(
        decision.model_copy(update={"token": signed}),
        keys=KEYS,
        expected=Expected(**fields),  # type: ignore[arg-type]
    )


def test_a_token_for_exactly_this_decision_is_accepted() -> None:
    """The token signed for this run chain, round, decision, reviewer, feedback and content,
    checked within its lifetime, authenticates the review."""
    assert problem(token()) is None
    assert problem(token(exp=int(AT.timestamp()) + 1)) is None  # one second left
    skewed = int(AT.timestamp()) + 60  # issued as far ahead as the clock skew allows
    assert problem(token(iat=skewed, exp=skewed + 600)) is None


def test_each_claim_that_does_not_match_is_refused_with_its_own_reason() -> None:
    """Every claim is checked against the review and the run, each refusal in its own words."""
    at = int(AT.timestamp())
    hs256 = jwt.encode(
        {"sub": "ann"},
        "a-shared-secret-of-32-bytes-long!",
        algorithm="HS256",
        headers={"kid": "inbox"},
    )
    cases = {
        None: "review is not signed (reviewer authentication is on: send a signed token)",
        "not.a.token": "review token is malformed",
        token(SigningKey.generate("stranger")): (
            "review token is signed with a key this run does not know"
        ),
        hs256: "review token must be signed with EdDSA",
        token(SigningKey.generate("inbox")): "review token signature does not verify",
        token(sub="bob"): "review token was issued to another reviewer",
        token(ALICE): "key 'alice' may not sign for this reviewer",
        token(wid="b" * 24): "review token was issued for another run",
        token(rid="chain-2"): "review token was issued for another run of this workflow id",
        token(round=2): "review token is for round 2, the run is at round 1",
        token(dec="approve"): "review token was issued for another decision",
        token(fb=feedback_digest("longer")): "review token was issued for other feedback",
        token(fd=fields_digest({"total": 3})): (
            "review token was issued for other corrected fields"
        ),
        token(ch="decaf"): "review token was issued for other content than the run shows",
        token(exp=at): "review token has expired",
        token(iat=at + 61, exp=at + 661): "review token is issued in the future",
    }
    for signed, reason in cases.items():
        assert problem(signed) == reason, reason


def test_checks_a_run_does_not_ask_for_are_not_made() -> None:
    """A run planned without the chain binding accepts any ``rid``; a token without ``ch``,
    or a run that shows no digest, skips the content check; corrected fields in the review
    need the token's ``fd``."""
    assert problem(token(rid="chain-2"), run_id=None) is None
    assert problem(token(ch=""), digest=lambda: "c0ffee") is None
    assert problem(token(ch="decaf"), digest=None) is None
    corrected = DECISION.model_copy(update={"fields": {"total": 3}})
    assert problem(token(), corrected) == "review token was issued for other corrected fields"
    assert problem(token(fd=fields_digest({"total": 3})), corrected) is None


def test_a_token_living_longer_than_the_operator_allows_is_refused() -> None:
    """With REVIEW_TOKEN_TTL_S in the plan, a token whose lifetime (exp - iat) is longer is
    refused, naming both; one exactly that long is accepted."""
    ten_minutes = timedelta(minutes=10)
    assert problem(token(), max_ttl=ten_minutes) is None
    at = int(AT.timestamp())
    assert problem(token(exp=at + 601), max_ttl=ten_minutes) == (
        "review token lives 601 s; the run accepts at most 600 s (REVIEW_TOKEN_TTL_S)"
    )


def test_a_private_key_entry_is_read_or_refused_in_one_line() -> None:
    """``REVIEWER_KEY`` is ``key_id:base64`` of 32 bytes: an entry round-trips; one without an
    id, with characters outside base64 or of another length is refused with a line that names
    the variable (or the file it came from) and never the key."""
    key = SigningKey.generate("alice")
    entry = key.private_entry()
    material = entry.partition(":")[2]
    assert SigningKey.parse(f"  {entry}\n").private_entry() == entry
    cases = {
        material: "REVIEWER_KEY must be KEY_ID:BASE64_PRIVATE_KEY",
        f":{material}": "REVIEWER_KEY must be KEY_ID:BASE64_PRIVATE_KEY",
        f"alice:{material[:10]}!{material[10:]}": "REVIEWER_KEY: the key is not valid base64",
        "alice:AAAA": "REVIEWER_KEY: an Ed25519 private key is 32 bytes",
    }
    for spec, message in cases.items():
        with pytest.raises(ConfigError) as info:
            SigningKey.parse(spec)
        assert str(info.value) == message
        assert material not in str(info.value)
    with pytest.raises(ConfigError) as info:
        SigningKey.parse("alice:AAAA", source="REVIEWER_KEY_FILE")
    assert str(info.value) == "REVIEWER_KEY_FILE: an Ed25519 private key is 32 bytes"


def test_key_entries_are_base64_of_the_raw_keys() -> None:
    """The public entry holds the raw 32-byte public key in base64 and whom it signs for; the
    private entry the raw private key, from which the same public key follows."""
    key = SigningKey.generate("alice")
    public = key.private_key.public_key().public_bytes_raw()
    encoded = base64.b64encode(public).decode()
    assert key.public_entry() == f"alice:{encoded}:*"
    assert key.public_entry(["alice"]) == f"alice:{encoded}"
    assert key.public_entry(["bob", "carol"]) == f"alice:{encoded}:bob|carol"
    raw = base64.b64decode(key.private_entry().removeprefix("alice:"), validate=True)
    assert len(raw) == 32
    assert SigningKey.parse(key.private_entry()).private_key.public_key().public_bytes_raw() == (
        public
    )


def test_the_tools_signer_binds_each_decision_to_its_target_now() -> None:
    """``SigningKey.signer`` (what the CLI and the inbox sign with) signs each decision for the
    run chain, round and content its target names, issued at the wall clock's time and living
    the given lifetime; the workflow accepts it."""
    key = SigningKey.generate("inbox")
    target = ReviewTarget(
        workflow_id=RUN, run_id="run-7", chain_id="chain-1", review_round=1, digest="c0ffee"
    )
    before = int(datetime.now(UTC).timestamp())
    signed = key.signer(timedelta(minutes=3))(DECISION, target)
    after = int(datetime.now(UTC).timestamp())
    assert signed.review_round == 1 and signed.token is not None
    claims = jwt.decode(signed.token, options={"verify_signature": False})
    assert (claims["wid"], claims["round"], claims["rid"], claims["ch"]) == (
        RUN,
        1,
        "chain-1",
        "c0ffee",
    )
    assert before <= claims["iat"] <= after and claims["exp"] == claims["iat"] + 180
    now = datetime.fromtimestamp(claims["iat"], UTC)
    expected = Expected(
        workflow_id=RUN, review_round=1, now=now, run_id="chain-1", digest=lambda: "c0ffee"
    )
    keys = parse_review_keys(key.public_entry())
    assert review_token_problem(signed, keys=keys, expected=expected) is None


def test_the_cli_signs_with_its_configured_key_or_none() -> None:
    """``REVIEWER_KEY`` gives the CLI its signing key; without it the CLI has none."""
    key = SigningKey.generate("alice")
    found = signing_key_from_settings(Settings(reviewer_key=key.private_entry()))
    assert found is not None and found.private_entry() == key.private_entry()
    assert signing_key_from_settings(Settings(reviewer_key=None)) is None


def test_each_public_key_problem_is_named_exactly() -> None:
    """Comments and blank entries are skipped wherever they are; each malformed entry is refused
    with a line naming the entry's key id and its problem, never the key."""
    alice = SigningKey.generate("alice").public_entry(["alice"])
    bob = SigningKey.generate("bob").public_entry(["bob"])
    spec = f"# reviewers\n\n{alice}\n# bob joined in May\n{bob}"
    assert [key.key_id for key in parse_review_keys(spec)] == ["alice", "bob"]
    material = alice.split(":")[1]
    cases = {
        "al ice:AAAA": "each entry is KEY_ID:BASE64_PUBLIC_KEY[:REVIEWER|REVIEWER...|*] with a "
        "key id of letters, digits, '.', '_', '@' or '-'",
        "alice:!!!": "key 'alice' is not valid base64",
        "alice:AAAA": "key 'alice' is 3 bytes; an Ed25519 key is 32",
        f"alice:{material}:|": "key 'alice' names nobody it may sign for",
    }
    for entry, message in cases.items():
        with pytest.raises(KeySpecError) as info:
            parse_review_keys(entry)
        assert str(info.value) == message
    with pytest.raises(ConfigError) as refused:
        SigningKey.parse(f"alice:x:{SigningKey.generate('alice').private_entry().split(':')[1]}")
    assert str(refused.value) == "REVIEWER_KEY: the key is not valid base64"


def test_a_token_lives_at_least_a_second() -> None:
    """A lifetime under a second is signed as one second, never as already expired."""
    claims = claims_for(DECISION, workflow_id=RUN, review_round=1, issued=AT, ttl=timedelta(0))
    assert claims["exp"] == int(AT.timestamp()) + 1


# Start claims (REQUESTER_PUBLIC_KEYS, REQUESTER_KEY): a requester's signed word that they ask
# for exactly this request; the key names the requester and the tenant whose budget it spends.

# The contract's start audience (docs/security.md), spelt out rather than read from the code.
CLAIM_AUDIENCE = "ai-orchestrator/start"
REQUESTER_ALICE = SigningKey.generate("alice")
REQUESTER_BOB = SigningKey.generate("bob")
WORKER_REQUESTER_KEYS = parse_requester_keys(
    f"{REQUESTER_ALICE.requester_entry('acme')}\n{REQUESTER_BOB.requester_entry('beta')}"
)
REPORT_REQUEST = PipelineRequest(
    request_id="b" * 24,
    user_message="Résumé ✓ of the Q3 report",
    metadata={"z": 1, "a": [1, 2]},
    options=RunOptions(llm_max_attempts=2),
    requested_by="alice",
    tenant="acme",
)
# What ``REPORT_REQUEST`` is as canonical JSON (sorted keys, no spaces, characters kept as UTF-8,
# fields at their defaults and the claim left out): what a start claim's ``rq`` digests.
REPORT_CANONICAL = (
    '{"metadata":{"a":[1,2],"z":1},"options":{"llm_max_attempts":2},'
    f'"request_id":"{"b" * 24}","requested_by":"alice","tenant":"acme",'
    '"user_message":"Résumé ✓ of the Q3 report"}'
)


def public_key_text(key: SigningKey) -> str:
    """The raw public key of ``key`` in base64, as key entries hold it."""
    return base64.b64encode(key.private_key.public_key().public_bytes_raw()).decode()


# The pipeline and namespace the runs in these tests start as (a claim names both).
STARTED_TYPE, STARTED_NAMESPACE = "AiOrchestrator", "default"


def claim_for(
    key: SigningKey = REQUESTER_ALICE,
    request: RequestBase = REPORT_REQUEST,
    **changes: object,
) -> str:
    """``key``'s start claim for ``request``, issued at ``AT`` for 10 minutes, with
    ``changes`` to its claims."""
    claims = start_claims_for(
        request,
        requester=key.key_id,
        issued=AT,
        ttl=timedelta(minutes=10),
        workflow_type=STARTED_TYPE,
        namespace=STARTED_NAMESPACE,
    )
    return signed_by(key, {**claims, **changes})


def start_verdict(
    claim: str | None, request: RequestBase = REPORT_REQUEST, now: datetime = AT
) -> RequesterKey | str:
    """What the worker makes of ``request`` arriving with ``claim`` at ``now``."""
    return start_claim_problem(
        request.model_copy(update={"start_claim": claim}),
        keys=WORKER_REQUESTER_KEYS,
        now=now,
        workflow_type=STARTED_TYPE,
        namespace=STARTED_NAMESPACE,
    )


def test_a_start_claim_for_exactly_this_request_yields_its_requesters_key() -> None:
    """A claim signed by a configured requester key for exactly this request, checked within
    its lifetime, yields that key: the requester and the tenant the run is bound to come from
    the key, whatever else the request says."""
    alice = RequesterKey(key_id="alice", public_key=public_key_text(REQUESTER_ALICE), tenant="acme")
    bob = RequesterKey(key_id="bob", public_key=public_key_text(REQUESTER_BOB), tenant="beta")
    assert start_verdict(claim_for()) == alice
    assert start_verdict(claim_for(REQUESTER_BOB)) == bob
    at = int(AT.timestamp())
    assert start_verdict(claim_for(exp=at + 1)) == alice  # one second left
    # Issued as far ahead of the worker's clock as the tolerated skew allows, and less.
    assert start_verdict(claim_for(iat=at + 60, exp=at + 660)) == alice
    assert start_verdict(claim_for(iat=at + 30, exp=at + 630)) == alice


def test_each_start_claim_that_does_not_vouch_for_the_request_is_refused_in_its_words() -> None:
    """A start without a claim, a claim that is not a token, signed by an unknown key, with
    another algorithm or a forged signature, a review token of a trusted key, and a claim for
    another audience, requester, request, pipeline, namespace or time (and one issued before
    claims named the pipeline and namespace) are each refused with their own reason."""
    at = int(AT.timestamp())
    hs256 = jwt.encode(
        {"sub": "alice"},
        "a-shared-secret-of-32-bytes-long!",
        algorithm="HS256",
        headers={"kid": "alice"},
    )
    review_token = REQUESTER_ALICE.sign(
        ReviewDecision(decision="approve", reviewer="alice"),
        workflow_id="b" * 24,
        review_round=1,
        now=AT,
    ).token
    other_request = REPORT_REQUEST.model_copy(update={"user_message": "Another report"})
    cases = {
        None: "the start is not signed (start authentication is on: sign it with REQUESTER_KEY)",
        "not.a.token": "start claim is malformed",
        claim_for(SigningKey.generate("mallory")): (
            "start claim is signed with a key this run does not know"
        ),
        hs256: "start claim must be signed with EdDSA",
        claim_for(SigningKey.generate("alice")): "start claim signature does not verify",
        review_token: "start claim signature does not verify",
        claim_for(aud="ai-orchestrator/review"): "start claim is not meant for starts",
        claim_for(aud=f"{CLAIM_AUDIENCE} "): "start claim is not meant for starts",
        claim_for(sub="bob"): "start claim names another requester than its key's",
        claim_for(rq=request_digest(other_request)): ("start claim was issued for another request"),
        claim_for(wft="DocumentPipeline"): (
            "start claim was issued for another pipeline (workflow type)"
        ),
        claim_for(wft=None): "start claim was issued for another pipeline (workflow type)",
        claim_for(ns="production"): "start claim was issued for another namespace",
        claim_for(ns=None): "start claim was issued for another namespace",
        claim_for(exp=at): "start claim has expired",
        claim_for(iat=at + 61, exp=at + 661): "start claim is issued in the future",
    }
    for claim, reason in cases.items():
        assert start_verdict(claim) == reason, reason
    expired_later = start_verdict(claim_for(), now=AT + timedelta(minutes=10))
    assert expired_later == "start claim has expired"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_id", "c" * 24),
        ("user_message", "Résumé ✓ of the Q4 report"),
        ("metadata", {"z": 1, "a": [1, 3]}),
        ("options", {"llm_max_attempts": 3}),
        ("requested_by", "bob"),
        ("tenant", "beta"),
        ("review", "always"),
    ],
)
def test_a_start_claim_binds_every_field_of_the_request(field: str, value: object) -> None:
    """Changing any one field of a signed request changes its digest, so the claim signed for
    the original no longer vouches for it."""
    changed = PipelineRequest.model_validate({**REPORT_REQUEST.model_dump(), field: value})
    assert request_digest(changed) != request_digest(REPORT_REQUEST)
    claim = claim_for()
    assert start_verdict(claim, changed) == "start claim was issued for another request"
    assert start_verdict(claim) != "start claim was issued for another request"


def test_the_request_digest_is_sha256_of_its_canonical_json() -> None:
    """``rq`` is SHA-256 of the request as JSON with sorted keys, no spaces and characters kept
    as UTF-8, fields at their defaults left out (so a field a later version adds keeps older
    clients' claims valid) and the start claim itself left out: what any signer computes."""
    assert request_digest(REPORT_REQUEST) == hashlib.sha256(REPORT_CANONICAL.encode()).hexdigest()
    spelt_out = REPORT_REQUEST.model_copy(
        update={"review": "auto", "options": RunOptions(llm_max_attempts=2, lane=None)}
    )
    assert request_digest(spelt_out) == request_digest(REPORT_REQUEST)
    signed = REPORT_REQUEST.model_copy(update={"start_claim": claim_for()})
    assert request_digest(signed) == request_digest(REPORT_REQUEST)


def test_a_request_digests_alike_before_and_after_it_travels_as_json() -> None:
    """A client digests the request it built (here with a datetime and a tuple in its
    metadata); the worker digests the request it decoded from JSON: both are the same, so the
    client's claim vouches for what the worker receives."""
    built = REPORT_REQUEST.model_copy(
        update={"metadata": {"due": datetime(2026, 3, 1, 12, tzinfo=UTC), "pages": (1, 2)}}
    )
    received = PipelineRequest.model_validate_json(
        REQUESTER_ALICE.sign_start(
            built, now=AT, workflow_type=STARTED_TYPE, namespace=STARTED_NAMESPACE
        ).model_dump_json()
    )
    assert received.metadata == {"due": "2026-03-01T12:00:00Z", "pages": [1, 2]}
    assert request_digest(received) == request_digest(built)
    assert start_verdict(received.start_claim, received) == WORKER_REQUESTER_KEYS[0]


def test_start_claims_name_audience_requester_request_and_lifetime() -> None:
    """The claims a requester signs are the start audience, the requester, the request's
    digest, the pipeline (workflow type) and namespace it starts in, when issued and when it
    expires; a lifetime under a second is one second."""
    at = int(AT.timestamp())
    claims = start_claims_for(
        REPORT_REQUEST,
        requester="alice",
        issued=AT,
        ttl=timedelta(minutes=5),
        workflow_type=STARTED_TYPE,
        namespace=STARTED_NAMESPACE,
    )
    assert claims == {
        "aud": CLAIM_AUDIENCE,
        "sub": "alice",
        "rq": hashlib.sha256(REPORT_CANONICAL.encode()).hexdigest(),
        "wft": "AiOrchestrator",
        "ns": "default",
        "iat": at,
        "exp": at + 300,
    }
    instant = start_claims_for(
        REPORT_REQUEST,
        requester="alice",
        issued=AT,
        ttl=timedelta(0),
        workflow_type=STARTED_TYPE,
        namespace=STARTED_NAMESPACE,
    )
    assert instant["exp"] == at + 1


def test_sign_start_attaches_a_claim_for_exactly_the_request() -> None:
    """``SigningKey.sign_start`` returns the request unchanged but for its claim: an EdDSA token
    naming the key, signed by it, for this request, issued now and living 10 minutes unless
    told otherwise; the worker accepts it until it expires."""
    signed = REQUESTER_ALICE.sign_start(
        REPORT_REQUEST, now=AT, workflow_type=STARTED_TYPE, namespace=STARTED_NAMESPACE
    )
    assert signed.start_claim is not None
    assert signed.model_copy(update={"start_claim": None}) == REPORT_REQUEST
    assert jwt.get_unverified_header(signed.start_claim) == {
        "alg": "EdDSA",
        "kid": "alice",
        "typ": "JWT",
    }
    claims = jwt.decode(
        signed.start_claim,
        REQUESTER_ALICE.private_key.public_key(),
        algorithms=["EdDSA"],
        audience=CLAIM_AUDIENCE,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims == start_claims_for(
        REPORT_REQUEST,
        requester="alice",
        issued=AT,
        ttl=timedelta(minutes=10),
        workflow_type=STARTED_TYPE,
        namespace=STARTED_NAMESPACE,
    )
    assert start_verdict(signed.start_claim) == WORKER_REQUESTER_KEYS[0]
    short = REQUESTER_ALICE.sign_start(
        REPORT_REQUEST,
        now=AT,
        ttl=timedelta(minutes=1),
        workflow_type=STARTED_TYPE,
        namespace=STARTED_NAMESPACE,
    )
    assert (
        start_verdict(short.start_claim, now=AT + timedelta(seconds=59)) == WORKER_REQUESTER_KEYS[0]
    )
    assert start_verdict(short.start_claim, now=AT + timedelta(minutes=1)) == (
        "start claim has expired"
    )


def test_a_requester_entry_names_the_key_its_public_key_and_tenant() -> None:
    """``requester_entry`` is the ``REQUESTER_PUBLIC_KEYS`` line ``id:base64 key:tenant``, and
    it parses back to that key for that tenant."""
    entry = REQUESTER_ALICE.requester_entry("acme")
    assert entry == f"alice:{public_key_text(REQUESTER_ALICE)}:acme"
    assert parse_requester_keys(entry) == [
        RequesterKey(key_id="alice", public_key=public_key_text(REQUESTER_ALICE), tenant="acme")
    ]


def test_requester_keys_are_read_from_commas_newlines_and_comments() -> None:
    """Entries are separated by commas or newlines, with blank lines, ``#`` comments and
    spaces around the parts skipped; nothing but comments is no key at all."""
    alice, bob = public_key_text(REQUESTER_ALICE), public_key_text(REQUESTER_BOB)
    spec = f"# requesters\n\n alice : {alice} : acme ,\n# bob moved to beta\nbob:{bob}:beta.eu-1"
    assert parse_requester_keys(spec) == [
        RequesterKey(key_id="alice", public_key=alice, tenant="acme"),
        RequesterKey(key_id="bob", public_key=bob, tenant="beta.eu-1"),
    ]
    assert parse_requester_keys("") == []
    assert parse_requester_keys("# revoked pending rotation\n") == []


def test_each_malformed_requester_entry_is_refused_in_one_line() -> None:
    """An entry without exactly a requester, a key and a tenant, with a bad requester name, a
    key that is not 32 bytes of base64, a tenant that is not a tenant name, or a requester
    listed twice is refused with a line that names the entry's problem and never the key."""
    material = public_key_text(REQUESTER_ALICE)
    shape = (
        "each entry is REQUESTER:BASE64_PUBLIC_KEY:TENANT with a key id of letters, digits, "
        "'.', '_', '@' or '-'"
    )
    no_tenant = r"key 'alice' names no valid tenant (^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$)"
    cases = {
        f"alice:{material}": shape,
        f"alice:{material}:acme:extra": shape,
        f"al ice:{material}:acme": shape,
        f"alice:{material}:": no_tenant,
        f"alice:{material}:ac me": no_tenant,
        f"alice:{material}:-acme": no_tenant,
        f"alice:{material}:{'a' * 65}": no_tenant,
        "alice:!!!:acme": "key 'alice' is not valid base64",
        "alice:AAAA:acme": "key 'alice' is 3 bytes; an Ed25519 key is 32",
        f"alice:{material}:acme,alice:{material}:beta": "key id 'alice' is configured twice",
    }
    for spec, message in cases.items():
        with pytest.raises(KeySpecError) as info:
            parse_requester_keys(spec)
        assert str(info.value) == message
        assert material not in str(info.value)


def test_requester_public_keys_load_from_their_file_or_fail_at_start(tmp_path: Path) -> None:
    """``REQUESTER_PUBLIC_KEYS_FILE`` holds the entries (comments allowed); a malformed one
    stops the settings from loading, naming the file's variable."""
    good = tmp_path / "requesters"
    good.write_text(f"# who may start runs\n{REQUESTER_ALICE.requester_entry('acme')}\n")
    keys = Settings(requester_public_keys_file=good).requester_keys()
    assert keys == [
        RequesterKey(key_id="alice", public_key=public_key_text(REQUESTER_ALICE), tenant="acme")
    ]
    bad = tmp_path / "bad-requesters"
    bad.write_text(f"alice:{public_key_text(REQUESTER_ALICE)}:\n")
    with pytest.raises(ConfigError) as info:
        Settings(requester_public_keys_file=bad)
    assert "REQUESTER_PUBLIC_KEYS_FILE: key 'alice' names no valid tenant" in str(info.value)


def test_the_cli_signs_starts_with_its_requester_key_or_none(tmp_path: Path) -> None:
    """``REQUESTER_KEY`` (or ``REQUESTER_KEY_FILE``) gives the CLI the key it signs starts with;
    without it the CLI has none; an unusable one is refused in a line naming REQUESTER_KEY,
    never the key."""
    entry = REQUESTER_ALICE.private_entry()
    found = requester_key_from_settings(Settings(requester_key=entry))
    assert found is not None and found.private_entry() == entry
    key_file = tmp_path / "requester.key"
    key_file.write_text(f"{entry}\n")
    from_file = requester_key_from_settings(Settings(requester_key_file=key_file))
    assert from_file is not None and from_file.private_entry() == entry
    assert requester_key_from_settings(Settings(requester_key=None)) is None
    material = entry.partition(":")[2]
    cases = {
        material: "REQUESTER_KEY must be KEY_ID:BASE64_PRIVATE_KEY",
        "alice:AAAA": "REQUESTER_KEY: an Ed25519 private key is 32 bytes",
    }
    for spec, message in cases.items():
        with pytest.raises(ConfigError) as info:
            requester_key_from_settings(Settings(requester_key=spec))
        assert str(info.value) == message


# The contract's budget audience (docs/security.md), spelt out rather than read from the code.
BUDGET_AUDIENCE = "ai-orchestrator/budget"
CFO = SigningKey.generate("cfo")
BUDGET = BudgetDecision(decision="approve", operator="cfo")
# CFO signs for the operator named like it; KEY (the inbox) for anyone.
BUDGET_KEYS = parse_review_keys(f"{CFO.public_entry(['cfo'])},{KEY.public_entry()}")


def budget_token(key: SigningKey = CFO, **changes: object) -> str:
    """A token for ``BUDGET`` on run chain ``chain-1`` of ``RUN``, issued at ``AT`` for 10
    minutes, with ``changes`` to its claims."""
    claims = budget_claims_for(
        BUDGET, workflow_id=RUN, run_id="chain-1", issued=AT, ttl=timedelta(minutes=10)
    )
    return signed_by(key, {**claims, **changes})


def budget_problem(
    signed: str | None, decision: BudgetDecision = BUDGET, now: datetime = AT
) -> str | None:
    return budget_token_problem(
        decision.model_copy(update={"token": signed}),
        keys=BUDGET_KEYS,
        expected=Expected(workflow_id=RUN, review_round=0, now=now, run_id="chain-1"),
    )


def test_a_budget_token_names_operator_decision_and_run_chain() -> None:
    """A budget token's claims are the budget audience, the operator, the run's workflow id
    and chain, the decision, and the issue and expiry times in whole seconds (at least one
    second apart); ``sign_budget`` signs exactly those, and the run accepts them."""
    issued = int(AT.timestamp())
    claims = budget_claims_for(
        BUDGET, workflow_id=RUN, run_id="chain-1", issued=AT, ttl=timedelta(minutes=10)
    )
    assert claims == {
        "aud": BUDGET_AUDIENCE,
        "sub": "cfo",
        "wid": RUN,
        "rid": "chain-1",
        "dec": "approve",
        "iat": issued,
        "exp": issued + 600,
    }
    short = budget_claims_for(
        BUDGET, workflow_id=RUN, run_id="chain-1", issued=AT, ttl=timedelta(seconds=0.5)
    )
    assert short["exp"] == issued + 1
    signed = CFO.sign_budget(BUDGET, workflow_id=RUN, run_id="chain-1", now=AT)
    assert signed.token is not None
    assert jwt.decode(signed.token, options={"verify_signature": False}) == claims
    assert budget_problem(signed.token) is None


def test_each_budget_token_that_does_not_match_is_refused_with_its_own_reason() -> None:
    """A budget decision is refused when unsigned, signed by an unknown key, by a token meant
    for another audience, issued to another operator (or by a key that may not sign for its
    operator), for another run or run chain, for another decision, expired (at its expiry
    second) or issued more than a minute ahead; each in its own words. A key that signs for
    anyone (the inbox's) may sign for any operator."""
    dan = BudgetDecision(decision="approve", operator="dan")
    expires = AT + timedelta(minutes=10)
    cases: dict[str, tuple[str | None, BudgetDecision, datetime]] = {
        "budget decision is not signed (authentication is on: send a signed token)": (
            None,
            BUDGET,
            AT,
        ),
        "budget token is signed with a key this run does not know": (
            budget_token(SigningKey.generate("mallory")),
            BUDGET,
            AT,
        ),
        "budget token is not meant for budget decisions": (
            budget_token(aud=REVIEW_AUDIENCE),
            BUDGET,
            AT,
        ),
        "budget token was issued to another operator": (budget_token(sub="bob"), BUDGET, AT),
        "key 'cfo' may not sign for this operator": (budget_token(sub="dan"), dan, AT),
        "budget token was issued for another run": (budget_token(wid="b" * 24), BUDGET, AT),
        "budget token was issued for another decision": (budget_token(dec="reject"), BUDGET, AT),
        "budget token has expired": (budget_token(), BUDGET, expires),
        "budget token is issued in the future": (
            budget_token(),
            BUDGET,
            AT - timedelta(seconds=61),
        ),
    }
    for reason, (signed, decision, now) in cases.items():
        assert budget_problem(signed, decision, now) == reason, reason
    assert budget_problem(budget_token(rid="chain-2")) == "budget token was issued for another run"
    assert budget_problem(budget_token(), now=expires - timedelta(seconds=1)) is None
    assert budget_problem(budget_token(), now=AT - timedelta(seconds=60)) is None
    assert budget_problem(budget_token(KEY, sub="dan"), dan) is None
