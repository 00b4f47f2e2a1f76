"""Reviewer and requester keys: parsing REVIEW_PUBLIC_KEYS, REVIEWER_KEY, REQUESTER_PUBLIC_KEYS
and REQUESTER_KEY, and what a review token, a budget token and a start claim bind."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta

import jwt
import pytest

from aiorch.ops.reviews import ReviewTarget
from aiorch.ops.signing import SigningKey, requester_key_from_settings, signing_key_from_settings
from aiorch.runtime.config import ConfigError, Settings
from workflows.engine.identity import (
    Expected,
    KeySpecError,
    budget_claims_for,
    budget_token_problem,
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
from workflows.payloads import BudgetDecision, PipelineRequest, RequesterKey, ReviewDecision

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
    return jwt.encode(
        {**claims, **changes},
        key.private_key,
        algorithm="EdDSA",
        headers={"kid": key.key_id, **(headers or {})},
    )


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


# The contract's start audience (docs/security.md), spelt out rather than read from the code.
START_AUDIENCE = "ai-orchestrator/start"
REQUESTER = SigningKey.generate("alice")
START = PipelineRequest(
    request_id="0123456789abcdef01234567",
    user_message="Grüße",
    review="always",
    metadata={"b": 1, "a": 2},
)
# START as canonical JSON, worked out by hand: keys sorted at every level, no spaces, non-ASCII
# kept, the start claim and every field left at its default out.
START_CANONICAL = (
    '{"metadata":{"a":2,"b":1},"request_id":"0123456789abcdef01234567","review":"always",'
    '"user_message":"Grüße"}'
)


def requester_keys(*keys: SigningKey, tenant: str = "acme") -> list[RequesterKey]:
    return parse_requester_keys(",".join(key.requester_entry(tenant) for key in keys))


def start_claim(key: SigningKey = REQUESTER, **changes: object) -> str:
    """A start claim for ``START`` by ``key``, issued at ``AT`` for 10 minutes, with
    ``changes`` to its claims."""
    claims = start_claims_for(START, requester=key.key_id, issued=AT, ttl=timedelta(minutes=10))
    return jwt.encode(
        {**claims, **changes}, key.private_key, algorithm="EdDSA", headers={"kid": key.key_id}
    )


def test_a_start_claim_vouches_for_the_request_as_canonical_json() -> None:
    """``rq`` is SHA-256 of the request as canonical JSON (sorted keys, no spaces, UTF-8), its
    start claim and its defaults left out: signing it, or adding a field a later version has,
    changes nothing; any other content does. A request built in Python has the digest of the
    JSON it is sent as."""
    expected = hashlib.sha256(START_CANONICAL.encode("utf-8")).hexdigest()
    assert request_digest(START) == expected
    assert request_digest(START.model_copy(update={"start_claim": "x.y.z"})) == expected
    assert request_digest(START.model_copy(update={"user_message": "Grüsse"})) != expected
    # Built in Python, a request may hold values JSON spells otherwise (a datetime, a tuple):
    # its digest is that of the JSON the worker receives.
    built = PipelineRequest.model_validate(
        {**START.model_dump(), "metadata": {"when": AT, "ids": (1, 2)}}
    )
    received = PipelineRequest.model_validate_json(built.model_dump_json())
    assert received.metadata == {"when": "2026-01-01T00:00:00Z", "ids": [1, 2]}
    assert request_digest(built) == request_digest(received)


def test_a_start_claim_names_requester_request_and_lifetime() -> None:
    """The signed claims are the start audience, the requester, the request's digest, and
    the issue and expiry times in whole seconds; a lifetime under a second is one second."""
    issued = int(AT.timestamp())
    claims = start_claims_for(START, requester="alice", issued=AT, ttl=timedelta(minutes=10))
    assert claims == {
        "aud": START_AUDIENCE,
        "sub": "alice",
        "rq": request_digest(START),
        "iat": issued,
        "exp": issued + 600,
    }
    short = start_claims_for(START, requester="alice", issued=AT, ttl=timedelta(seconds=0.5))
    assert short["exp"] == issued + 1


def test_the_cli_signs_a_start_that_the_workers_keys_accept() -> None:
    """``sign_start`` adds a start claim (EdDSA, the key's id in its header) for exactly this
    request, valid for 10 minutes by default; the workers' entry for the key
    (``requester_entry``) reads back as that requester and tenant, and accepts it."""
    signed = REQUESTER.sign_start(START, now=AT)
    assert signed.model_copy(update={"start_claim": None}) == START
    assert signed.start_claim is not None
    assert jwt.get_unverified_header(signed.start_claim) == {
        "alg": "EdDSA",
        "kid": "alice",
        "typ": "JWT",
    }
    claims = jwt.decode(signed.start_claim, options={"verify_signature": False})
    assert claims == start_claims_for(
        START, requester="alice", issued=AT, ttl=timedelta(minutes=10)
    )
    [key] = requester_keys(REQUESTER)
    assert (key.key_id, key.tenant) == ("alice", "acme")
    assert key.public_key == REQUESTER.public_entry(["alice"]).split(":")[1]
    assert start_claim_problem(signed, keys=[key], now=AT) == key


def test_each_start_claim_that_does_not_vouch_is_refused_with_its_own_reason() -> None:
    """A start claim is refused when missing, signed by a key the workers do not know, meant
    for another audience, naming another requester than its key, issued for other content,
    expired (at its expiry second) or issued more than a minute ahead; each in its own words."""
    keys = requester_keys(REQUESTER)
    bob = SigningKey.generate("bob")

    def why(claim: str | None, now: datetime = AT) -> RequesterKey | str:
        return start_claim_problem(
            START.model_copy(update={"start_claim": claim}), keys=keys, now=now
        )

    expires = AT + timedelta(minutes=10)
    cases: dict[str, tuple[str | None, datetime]] = {
        "the start is not signed (start authentication is on: sign it with REQUESTER_KEY)": (
            None,
            AT,
        ),
        "start claim is signed with a key this run does not know": (start_claim(bob), AT),
        "start claim is not meant for starts": (start_claim(aud=REVIEW_AUDIENCE), AT),
        "start claim names another requester than its key's": (start_claim(sub="bob"), AT),
        "start claim was issued for another request": (start_claim(rq="0" * 64), AT),
        "start claim has expired": (start_claim(), expires),
        "start claim is issued in the future": (start_claim(), AT - timedelta(seconds=61)),
    }
    for reason, (claim, now) in cases.items():
        assert why(claim, now) == reason
    assert why(start_claim(), expires - timedelta(seconds=1)) == keys[0]
    assert why(start_claim(), AT - timedelta(seconds=60)) == keys[0]


def test_requester_key_entries_name_a_tenant_or_are_refused() -> None:
    """``REQUESTER:BASE64:TENANT`` entries read as keys for that requester and tenant; an entry
    without a tenant, or with one that is not a tenant name, is refused in one line."""
    keys = parse_requester_keys(f"{REQUESTER.requester_entry('acme')}\n# more soon\n")
    assert [(key.key_id, key.tenant) for key in keys] == [("alice", "acme")]
    material = REQUESTER.public_entry(["alice"])
    cases = {
        material: "each entry is REQUESTER:BASE64_PUBLIC_KEY:TENANT with a key id of letters, "
        "digits, '.', '_', '@' or '-'",
        f"{material}:": "key 'alice' names no valid tenant (^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$)",
        f"{material}:-acme": "key 'alice' names no valid tenant "
        "(^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$)",
    }
    for entry, message in cases.items():
        with pytest.raises(KeySpecError) as info:
            parse_requester_keys(entry)
        assert str(info.value) == message


def test_the_cli_signs_starts_with_its_configured_requester_key_or_none() -> None:
    """``REQUESTER_KEY`` gives the CLI its key for signing starts; without it the CLI has none;
    an unusable one is refused naming REQUESTER_KEY."""
    found = requester_key_from_settings(Settings(requester_key=REQUESTER.private_entry()))
    assert found is not None and found.private_entry() == REQUESTER.private_entry()
    assert requester_key_from_settings(Settings(requester_key=None)) is None
    with pytest.raises(ConfigError) as refused:
        requester_key_from_settings(Settings(requester_key="alice:!!!"))
    assert str(refused.value) == "REQUESTER_KEY: the key is not valid base64"


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
    return jwt.encode(
        {**claims, **changes}, key.private_key, algorithm="EdDSA", headers={"kid": key.key_id}
    )


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
