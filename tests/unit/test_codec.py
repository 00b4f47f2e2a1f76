"""The AES-GCM payload codec (its key ring, its binding to a run, the markers it leaves for
payloads it refuses), and the converter built from settings."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    ActivitySerializationContext,
    CompositePayloadConverter,
    DataConverter,
    NexusSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.exceptions import ApplicationError

from aiorch_runtime.codec import (
    ENCODING,
    METADATA_KEY_ID,
    METADATA_NAMESPACE,
    METADATA_REASON,
    METADATA_WORKFLOW_ID,
    NOT_ENCRYPTED,
    UNDECODABLE,
    Binding,
    EncryptionCodec,
    KeyRing,
    PayloadDecryptionError,
    PayloadUnreadable,
    keyring_from_settings,
    new_key,
)
from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.failures import EncodedActivityFailureConverter
from aiorch_runtime.temporal import DATA_CONVERTER, data_converter, encrypted_converter
from workflows.errors import OrchestratorError
from workflows.payloads import PipelineRequest

CANARY = "canary-7f3a-personal-data"
KEY_A = new_key()
KEY_B = new_key()
RUN_A = WorkflowSerializationContext(namespace="default", workflow_id="run-a")
RUN_B = WorkflowSerializationContext(namespace="default", workflow_id="run-b")
RUN_A_ELSEWHERE = WorkflowSerializationContext(namespace="staging", workflow_id="run-a")


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{text}"'.encode())


def codec(
    spec: str = f"k1:{KEY_A}", current: str | None = None, *, require_encryption: bool = False
) -> EncryptionCodec:
    return EncryptionCodec(KeyRing.parse(spec, current), require_encryption=require_encryption)


def activity_of(namespace: str, workflow_id: str | None) -> ActivitySerializationContext:
    return ActivitySerializationContext(
        namespace=namespace,
        activity_id="1",
        activity_type="invoke_llm",
        activity_task_queue="ai-orchestrator",
        workflow_id=workflow_id,
        workflow_type="AiOrchestrator",
        is_local=False,
    )


def reason(payload: Payload) -> str:
    """The reason of a marker, checked to be one: the refused encoding, no content."""
    assert payload.metadata["encoding"] == UNDECODABLE, payload
    assert payload.data == b""
    return payload.metadata[METADATA_REASON].decode()


async def test_round_trip_hides_content_and_names_key_and_run() -> None:
    """An encoded payload is opaque, says binary/encrypted and names its key id, namespace and
    workflow id; the same run's codec gives back the original payload exactly."""
    run_a = codec().with_context(RUN_A)
    original = plain(CANARY)

    [encoded] = await run_a.encode([original])

    assert encoded.metadata["encoding"] == ENCODING
    assert encoded.metadata[METADATA_KEY_ID] == b"k1"
    assert encoded.metadata[METADATA_NAMESPACE] == b"default"
    assert encoded.metadata[METADATA_WORKFLOW_ID] == b"run-a"
    assert CANARY.encode() not in encoded.SerializeToString()
    assert await run_a.decode([encoded]) == [original]


async def test_each_encryption_uses_a_fresh_nonce() -> None:
    """The same payload encrypts differently every time (random nonce), so equal inputs cannot
    be recognised in history."""
    run_a = codec().with_context(RUN_A)
    first, second = await run_a.encode([plain(CANARY), plain(CANARY)])
    assert first.data != second.data


async def test_a_ciphertext_moved_to_another_run_or_namespace_is_refused() -> None:
    """A payload encrypted for run A, copied as it is into run B (same namespace) or into a run
    with A's id in another namespace, is refused by that run's codec (a marker naming the
    reason, no content); A's own codec and a context-free reader (the codec server, a manual
    history read) still open it."""
    keys = codec()
    [sealed] = await keys.with_context(RUN_A).encode([plain(CANARY)])

    [moved] = await keys.with_context(RUN_B).decode([sealed])
    assert "another workflow id" in reason(moved)
    [elsewhere] = await keys.with_context(RUN_A_ELSEWHERE).decode([sealed])
    assert "another namespace" in reason(elsewhere)
    assert await keys.with_context(RUN_A).decode([sealed]) == [plain(CANARY)]
    assert await keys.decode([sealed]) == [plain(CANARY)]
    with pytest.raises(PayloadDecryptionError, match="cannot be moved between runs"):
        keys.with_context(RUN_B).decrypt(sealed)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (METADATA_WORKFLOW_ID, b"run-b"),
        (METADATA_NAMESPACE, b"staging"),
        (METADATA_KEY_ID, b"k2"),
    ],
)
async def test_relabelling_the_key_or_run_breaks_authentication(field: str, value: bytes) -> None:
    """The associated data covers key id, namespace and workflow id: a payload whose metadata
    is rewritten to claim another run, namespace or (configured) key fails to decrypt, for the
    run it now names and for a context-free reader alike."""
    keys = codec(f"k1:{KEY_A},k2:{KEY_B}", "k1")
    [sealed] = await keys.with_context(RUN_A).encode([plain(CANARY)])
    relabelled = Payload(metadata={**sealed.metadata, field: value}, data=sealed.data)
    claimed = Binding(
        relabelled.metadata[METADATA_NAMESPACE].decode(),
        relabelled.metadata[METADATA_WORKFLOW_ID].decode(),
    )

    [marker] = await keys.bound(claimed).decode([relabelled])
    assert "does not decrypt" in reason(marker)
    with pytest.raises(PayloadDecryptionError, match="does not decrypt"):
        keys.decrypt(relabelled)


def test_associated_data_cannot_be_shifted_between_fields() -> None:
    """Namespace and workflow id are length-prefixed in the associated data, so moving a
    character from one to the other (``a:b`` + ``c`` vs ``a`` + ``b:c``) changes it."""
    assert Binding("a:b", "c").associated_data("k1") != Binding("a", "b:c").associated_data("k1")
    assert Binding("k", "x").associated_data("1") != Binding("", "x").associated_data("k1")


async def test_activity_payloads_are_bound_to_their_workflow() -> None:
    """An activity started by a workflow encodes and decodes for that workflow: the workflow's
    codec opens its results and the activity's codec opens the workflow's inputs; an activity
    of another workflow refuses them."""
    keys = codec()
    [result] = await keys.with_context(activity_of("default", "run-a")).encode([plain("reply")])
    assert result.metadata[METADATA_WORKFLOW_ID] == b"run-a"
    assert await keys.with_context(RUN_A).decode([result]) == [plain("reply")]
    [arg] = await keys.with_context(RUN_A).encode([plain("prompt")])
    assert await keys.with_context(activity_of("default", "run-a")).decode([arg]) == [
        plain("prompt")
    ]
    [refused] = await keys.with_context(activity_of("default", "run-b")).decode([arg])
    assert "another workflow id" in reason(refused)


async def test_a_payload_encrypted_without_context_is_bound_to_no_run() -> None:
    """Without a serialization context (and for a Nexus context, which names no workflow) a
    payload records an empty namespace and workflow id: context-free readers open it, every
    run's codec refuses it, so it cannot be injected into a run either; the same goes for one
    bound to a namespace but no run (the codec server's /encode), with a reason that says to
    use the project's client."""
    keys = codec()
    nexus = NexusSerializationContext(endpoint="e", service="s", operation="o")
    assert keys.with_context(nexus).binding is None
    [unbound] = await keys.encode([plain(CANARY)])
    assert unbound.metadata[METADATA_NAMESPACE] == b""
    assert unbound.metadata[METADATA_WORKFLOW_ID] == b""

    assert await keys.decode([unbound]) == [plain(CANARY)]
    [refused] = await keys.with_context(RUN_A).decode([unbound])
    assert reason(refused).startswith("payload is encrypted for no run")
    [namespaced] = await keys.bound(Binding(namespace="default")).encode([plain(CANARY)])
    [refused] = await keys.with_context(RUN_A).decode([namespaced])
    assert "send it with the project's client" in reason(refused)


async def test_rotation_old_key_still_decodes_and_new_payloads_use_the_current_key() -> None:
    """After rotating (k2 current, k1 kept), payloads written with k1 still decode and new ones
    are written with k2; once k1 is removed its payloads are refused with a reason naming k1
    (a marker from decode, PayloadDecryptionError from the strict decrypt)."""
    [old] = await codec().with_context(RUN_A).encode([plain("old")])

    rotated = codec(f"k1:{KEY_A},k2:{KEY_B}", "k2").with_context(RUN_A)
    [new] = await rotated.encode([plain("new")])

    assert new.metadata[METADATA_KEY_ID] == b"k2"
    assert await rotated.decode([old, new]) == [plain("old"), plain("new")]
    only_new = codec(f"k2:{KEY_B}").with_context(RUN_A)
    [marker] = await only_new.decode([old])
    assert "key id 'k1', which is not configured" in reason(marker)
    with pytest.raises(PayloadDecryptionError, match="key id 'k1', which is not configured"):
        only_new.decrypt(old)


async def test_plain_payloads_pass_through_unless_encryption_is_required() -> None:
    """Without REQUIRE_ENCRYPTION a plaintext payload decodes unchanged; with it, decode leaves
    a marker saying it is not encrypted. The strict decrypt (the codec server's, for display)
    passes plaintext through either way."""
    assert await codec().with_context(RUN_A).decode([plain("x")]) == [plain("x")]
    strict = codec(require_encryption=True).with_context(RUN_A)
    assert strict.require_encryption
    [marker] = await strict.decode([plain("x")])
    assert reason(marker) == NOT_ENCRYPTED
    assert strict.decrypt(plain("x")) == plain("x")


def crafted(**metadata: bytes) -> Payload:
    data = metadata.pop("data", b"\x00" * 40)
    return Payload(metadata={"encoding": ENCODING, **metadata}, data=data)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (crafted(), "key id (not a valid key id)"),
        (crafted(**{METADATA_KEY_ID: b"k9"}), "key id 'k9', which is not configured"),
        (crafted(**{METADATA_KEY_ID: b"\xff\xfe" * 500}), "(not a valid key id)"),
        (crafted(**{METADATA_KEY_ID: b"k1"}), "does not decrypt"),
        (crafted(**{METADATA_KEY_ID: b"k1", "data": b""}), "does not decrypt"),
        (crafted(**{METADATA_KEY_ID: b"k1", "data": b"\x01\x02"}), "does not decrypt"),
        (crafted(**{METADATA_KEY_ID: b"k1", METADATA_NAMESPACE: b"\xff"}), "does not decrypt"),
        (
            Payload(metadata={"encoding": UNDECODABLE, METADATA_REASON: b"trust me"}),
            NOT_ENCRYPTED,
        ),
    ],
    ids=[
        "no-key-id",
        "unknown-key-id",
        "junk-key-id",
        "garbage-data",
        "empty-data",
        "short-nonce",
        "non-utf8-namespace",
        "client-made-marker",
    ],
)
async def test_decode_never_raises_on_crafted_payloads(payload: Payload, words: str) -> None:
    """Whatever a client sends as an encrypted payload (no or junk key id, garbage, empty or
    short data, non-UTF-8 metadata), or a marker of its own while encryption is required,
    decode leaves this codec's marker with a short reason and never raises (a codec error
    would fail the workflow task, and Temporal would retry it forever)."""
    [marker] = await codec(require_encryption=True).with_context(RUN_A).decode([payload])
    text = reason(marker)
    assert words in text
    assert len(text) < 300 and "\n" not in text


async def test_converter_turns_a_marker_into_one_typed_line() -> None:
    """Through the project's data converter a refused payload (here: moved from run A to run
    B) raises PayloadUnreadable, an OrchestratorError with one line naming the reason, not the
    SDK's KeyError or a RuntimeError wrapping it; a RawValue still arrives undecoded, so the
    workflow decides what to do with it."""
    converter = encrypted_converter(KeyRing.parse(f"k1:{KEY_A}"))
    request = PipelineRequest(request_id="a" * 24, user_message=CANARY)
    [sealed] = await converter.with_context(RUN_A).encode([request])

    run_b = converter.with_context(RUN_B)
    with pytest.raises(PayloadUnreadable) as info:
        await run_b.decode([sealed], [PipelineRequest])
    assert type(info.value) is PayloadUnreadable
    assert isinstance(info.value, OrchestratorError)
    message = str(info.value)
    assert message.startswith("payload refused: payload is encrypted for another workflow id")
    assert "\n" not in message and CANARY not in message
    [raw] = await run_b.decode([sealed], [RawValue])
    with pytest.raises(PayloadUnreadable, match="another workflow id"):
        run_b.payload_converter.from_payload(raw.payload)
    assert await converter.with_context(RUN_A).decode([sealed], [PipelineRequest]) == [request]


async def test_keyless_converter_says_which_keys_to_set() -> None:
    """A process without keys (no codec) that meets an encrypted payload raises one line
    telling the operator to set PAYLOAD_KEYS or use the codec server, instead of the SDK's
    ``KeyError: 'Unknown payload encoding binary/encrypted'``."""
    converter = encrypted_converter(KeyRing.parse(f"k1:{KEY_A}"))
    [sealed] = await converter.with_context(RUN_A).encode([{"x": CANARY}])
    with pytest.raises(PayloadUnreadable) as info:
        await DATA_CONVERTER.with_context(RUN_A).decode([sealed])
    assert str(info.value) == (
        "this payload is encrypted (binary/encrypted): set PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE) "
        "to the deployment's keys, or use the codec server"
    )


def test_a_client_made_marker_shows_a_bounded_printable_reason() -> None:
    """Without a codec, a client can send a payload that merely claims to be a marker: its
    reason reaches the error cut short and without control characters or newlines."""
    claimed = Payload(
        metadata={"encoding": UNDECODABLE, METADATA_REASON: b"line\nbreak\x1b[31m" + b"x" * 5000}
    )
    with pytest.raises(PayloadUnreadable) as info:
        DATA_CONVERTER.payload_converter.from_payload(claimed)
    message = str(info.value)
    assert message.startswith("payload refused: line?break?[31m")
    assert len(message) < 350 and "\n" not in message and "\x1b" not in message


async def test_require_encryption_is_wired_from_settings() -> None:
    """REQUIRE_ENCRYPTION=true (with keys) gives a converter whose decode refuses plaintext
    with PayloadUnreadable naming the reason; without it plaintext still decodes."""
    required = data_converter(Settings(payload_keys=f"k1:{KEY_A}", require_encryption=True))
    assert isinstance(required.payload_codec, EncryptionCodec)
    assert required.payload_codec.require_encryption
    [plaintext] = await DATA_CONVERTER.encode([{"decision": "approve"}])
    with pytest.raises(PayloadUnreadable, match="REQUIRE_ENCRYPTION=true"):
        await required.with_context(RUN_A).decode([plaintext])
    relaxed = data_converter(Settings(payload_keys=f"k1:{KEY_A}"))
    assert await relaxed.with_context(RUN_A).decode([plaintext]) == [{"decision": "approve"}]


def test_the_sdk_binds_the_codec_through_the_data_converter() -> None:
    """``DataConverter.with_context`` (what the SDK calls for every client call, activation and
    activity) hands the codec the run: a bound copy, sharing the keys; the original stays
    context-free."""
    converter = encrypted_converter(KeyRing.parse(f"k1:{KEY_A}"))
    bound = converter.with_context(RUN_A)
    assert isinstance(bound, DataConverter)
    assert isinstance(bound.payload_codec, EncryptionCodec)
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert bound.payload_codec.binding == Binding("default", "run-a")
    assert converter.payload_codec.binding is None
    assert bound.payload_codec.bound(Binding("default", "run-a")) is bound.payload_codec


@pytest.mark.parametrize(
    ("spec", "current", "problem"),
    [
        ("", None, "holds no keys"),
        ("k1", None, "KEY_ID:BASE64KEY"),
        ("k 1:" + KEY_A, None, "KEY_ID:BASE64KEY"),
        ("k1:not base64!", None, "not valid base64"),
        ("k1:" + base64.b64encode(b"short").decode(), None, "AES-256 needs 32"),
        (f"k1:{KEY_A},k1:{KEY_B}", None, "configured twice"),
        (f"k1:{KEY_A},k2:{KEY_B}", None, "set PAYLOAD_KEY_ID"),
        (f"k1:{KEY_A}", "k9", "names no configured key"),
    ],
    # Stable ids: the keys are new each run (mutmut finds a test by its id in another process).
    ids=[
        "empty",
        "no-key",
        "space-in-id",
        "not-base64",
        "short-key",
        "id-twice",
        "two-keys-no-current",
        "unknown-current",
    ],
)
def test_bad_key_configuration_is_one_line_without_key_material(
    spec: str, current: str | None, problem: str
) -> None:
    """Each misconfiguration fails with one line naming the problem and never the key."""
    with pytest.raises(ConfigError) as info:
        KeyRing.parse(spec, current)
    message = str(info.value)
    assert problem in message
    assert "\n" not in message
    assert KEY_A not in message and KEY_B not in message


def test_keyring_repr_shows_ids_only() -> None:
    """A key ring in a log line or traceback shows its key ids, never key bytes."""
    ring = KeyRing.parse(f"k1:{KEY_A}")
    assert "k1" in repr(ring)
    assert KEY_A not in repr(ring)
    assert repr(base64.b64decode(KEY_A)) not in repr(ring)


def test_no_keys_means_the_plain_converter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PAYLOAD_KEYS the converter is the plain pydantic one (no codec)."""
    for name in ("PAYLOAD_KEYS", "PAYLOAD_KEYS_FILE", "PAYLOAD_KEY_ID", "REQUIRE_ENCRYPTION"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert keyring_from_settings(settings) is None
    assert data_converter(settings) is DATA_CONVERTER
    assert DATA_CONVERTER.payload_codec is None


def test_key_id_without_keys_is_refused() -> None:
    """PAYLOAD_KEY_ID alone is a mistake (encryption silently off), so it is an error."""
    with pytest.raises(ConfigError, match="no keys are"):
        keyring_from_settings(Settings(payload_key_id="k1"))


async def test_configured_converter_encrypts_values_and_failure_messages(tmp_path: Path) -> None:
    """With keys (here from PAYLOAD_KEYS_FILE) the converter encrypts pydantic values and, via
    the failure converter with encoded attributes, failure messages too; it decodes both back."""
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# rotated 2026-11\nk1:{KEY_A}\nk2:{KEY_B}\n")
    converter = data_converter(
        Settings(payload_keys_file=keys_file, payload_key_id="k2")
    ).with_context(RUN_A)
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.failure_converter_class is EncodedActivityFailureConverter
    request = PipelineRequest(request_id="a" * 24, user_message=CANARY)

    [payload] = await converter.encode([request])
    assert CANARY.encode() not in payload.SerializeToString()
    assert await converter.decode([payload], [PipelineRequest]) == [request]

    failure = Failure()
    await converter.encode_failure(ApplicationError(f"bad input {CANARY}"), failure)
    assert CANARY.encode() not in failure.SerializeToString()
    assert failure.message == "Encoded failure"
    decoded = await converter.decode_failure(failure)
    assert CANARY in str(decoded)


def test_converter_keeps_the_pydantic_payload_converter() -> None:
    """Encryption wraps the project's pydantic converter rather than replacing it."""
    converter = dataclasses.replace(DATA_CONVERTER)
    encrypted = data_converter(Settings(payload_keys=f"k1:{KEY_A}"))
    assert encrypted.payload_converter_class is converter.payload_converter_class


def test_payload_converters_share_one_type_adapter_cache() -> None:
    """Every payload converter the SDK builds (one per run and activation) uses the same JSON
    converter, so a model's type adapter is built once per process, not once per run; the
    bytes are those of temporalio's own pydantic converter."""
    first = DATA_CONVERTER.payload_converter_class()
    second = DATA_CONVERTER.payload_converter_class()
    assert isinstance(first, CompositePayloadConverter)
    assert isinstance(second, CompositePayloadConverter)
    assert first.converters[b"json/plain"] is second.converters[b"json/plain"]
    assert first.with_context(RUN_A) is first  # nothing in it takes a context: no copies

    request = PipelineRequest(request_id="a" * 24, user_message=CANARY)
    [ours] = first.to_payloads([request])
    [temporalios] = pydantic_data_converter.payload_converter.to_payloads([request])
    assert ours == temporalios
    assert second.from_payloads([ours], [PipelineRequest]) == [request]


def sealed_by_hand(
    key: bytes, key_id: str, namespace: str | None, workflow_id: str | None, inner: Payload
) -> Payload:
    """``inner`` encrypted the way the wire format says, built with AES-GCM directly (not the
    codec): associated data ``ai-orchestrator/payload/v1`` then key id, namespace and workflow
    id, each after its length as 4 big-endian bytes; data: a 12-byte nonce, then the
    ciphertext and tag. None leaves that metadata entry out (read as "")."""
    aad = b"ai-orchestrator/payload/v1"
    for part in (key_id, namespace or "", workflow_id or ""):
        aad += len(part.encode()).to_bytes(4, "big") + part.encode()
    nonce = bytes(range(12))
    metadata = {"encoding": b"binary/encrypted", "encryption-key-id": key_id.encode()}
    if namespace is not None:
        metadata["encryption-namespace"] = namespace.encode()
    if workflow_id is not None:
        metadata["encryption-workflow-id"] = workflow_id.encode()
    data = nonce + AESGCM(key).encrypt(nonce, inner.SerializeToString(), aad)
    return Payload(metadata=metadata, data=data)


def test_the_wire_format_is_the_documented_one() -> None:
    """A payload sealed by hand as the format says (so, by an earlier release or another
    client) opens, bound to its run or to none; the associated data is exactly that layout."""
    key = base64.b64decode(KEY_A)
    assert Binding("default", "run-a").associated_data("k1") == (
        b"ai-orchestrator/payload/v1\x00\x00\x00\x02k1\x00\x00\x00\x07default\x00\x00\x00\x05run-a"
    )
    bound = sealed_by_hand(key, "k1", "default", "run-a", plain(CANARY))
    assert codec().decrypt(bound) == plain(CANARY)
    assert codec().bound(Binding("default", "run-a")).decrypt(bound) == plain(CANARY)
    for unbound in (
        sealed_by_hand(key, "k1", "", "", plain(CANARY)),
        sealed_by_hand(key, "k1", None, None, plain(CANARY)),
    ):
        assert codec().decrypt(unbound) == plain(CANARY)


def test_an_activity_without_a_workflow_binds_to_its_namespace_only() -> None:
    """A standalone activity's context (no workflow id) binds to the namespace and no run."""
    assert Binding.of(activity_of("default", None)) == Binding("default", "")
    assert Binding.of(activity_of("default", "run-a")) == Binding("default", "run-a")


async def test_each_refusal_says_why_in_one_line() -> None:
    """Every payload the codec refuses is replaced by a marker whose reason says what is wrong,
    in one line, naming key ids and never key material."""
    key = base64.b64decode(KEY_A)
    two = codec(f"k1:{KEY_A},k2:{KEY_B}", "k1")
    run_a = two.bound(Binding("default", "run-a"))
    cases = [
        (
            sealed_by_hand(key, "k9", "default", "run-a", plain(CANARY)),
            "payload is encrypted with key id 'k9', which is not configured (configured: k1, "
            "k2); add it to PAYLOAD_KEYS to read older data",
        ),
        (
            sealed_by_hand(key, "k2", "default", "run-a", plain(CANARY)),
            "payload does not decrypt with key 'k2': wrong key material or tampered data (its "
            "key id, namespace or workflow id changed)",
        ),
        (
            sealed_by_hand(key, "k1", "", "", plain(CANARY)),
            "payload is encrypted for no run (made outside one, e.g. by the codec server's "
            "/encode): send it with the project's client (starter.py)",
        ),
        (
            sealed_by_hand(key, "k1", "default", "run-b", plain(CANARY)),
            "payload is encrypted for another workflow id than this run's: an encrypted "
            "payload cannot be moved between runs or namespaces",
        ),
        (
            sealed_by_hand(key, "k1", "staging", "run-a", plain(CANARY)),
            "payload is encrypted for another namespace than this run's: an encrypted "
            "payload cannot be moved between runs or namespaces",
        ),
        (
            Payload(
                metadata={"encoding": b"binary/encrypted", "encryption-key-id": b"k1"},
                data=bytes(12) + b"\xff" * 40,
            ),
            "payload does not decrypt with key 'k1': wrong key material or tampered data (its "
            "key id, namespace or workflow id changed)",
        ),
    ]
    for payload, why in cases:
        [opened] = await run_a.decode([payload])
        assert reason(opened) == why
    not_a_payload = sealed_by_hand(key, "k1", "default", "run-a", plain(CANARY))
    not_a_payload.data = not_a_payload.data[:12] + AESGCM(key).encrypt(
        not_a_payload.data[:12],
        b"\xff\xff not protobuf",
        Binding("default", "run-a").associated_data("k1"),
    )
    [opened] = await run_a.decode([not_a_payload])
    assert reason(opened) == "malformed encrypted payload"


def test_each_key_configuration_problem_is_named_exactly() -> None:
    """Each bad PAYLOAD_KEYS / PAYLOAD_KEY_ID is refused with a line that names the variable
    (or the file it came from), the key id and what to do, never the key material."""
    short = base64.b64encode(b"short").decode()
    cases = [
        (
            "k 1:" + KEY_A,
            None,
            "PAYLOAD_KEYS: each entry must be KEY_ID:BASE64KEY with a key id "
            "of letters, digits, '.', '_' or '-'",
        ),
        # A colon inside the material: the id ends at the first one.
        (f"k1:x:{KEY_A}", None, "PAYLOAD_KEYS: key 'k1' is not valid base64"),
        (f"k1:{KEY_A[:10]}!{KEY_A[10:]}", None, "PAYLOAD_KEYS: key 'k1' is not valid base64"),
        (
            f"k1:{short}",
            None,
            "PAYLOAD_KEYS: key 'k1' is 5 bytes; AES-256 needs 32 (generate one "
            "with `aiorch keys payload`)",
        ),
        (
            f"k1:{KEY_A},k2:{KEY_B}",
            None,
            "PAYLOAD_KEYS holds 2 keys; set PAYLOAD_KEY_ID to the one that encrypts new payloads",
        ),
        (
            f"k1:{KEY_A},k2:{KEY_B}",
            "k9",
            "PAYLOAD_KEY_ID='k9' names no configured key (configured key ids: k1, k2)",
        ),
    ]
    for spec, current, message in cases:
        with pytest.raises(ConfigError) as info:
            KeyRing.parse(spec, current)
        assert str(info.value) == message
    with pytest.raises(ConfigError) as info:
        KeyRing.parse(f"k1:{short}", source="PAYLOAD_KEYS_FILE")
    assert str(info.value).startswith("PAYLOAD_KEYS_FILE: key 'k1' is 5 bytes")
    with pytest.raises(ConfigError) as info:
        KeyRing(keys={}, current_id="k1")
    assert (
        str(info.value) == "PAYLOAD_KEY_ID='k1' names no configured key (configured key ids: none)"
    )
    with pytest.raises(ConfigError) as info:
        keyring_from_settings(Settings(payload_key_id="k1"))
    assert str(info.value) == (
        "PAYLOAD_KEY_ID is set but no keys are (PAYLOAD_KEYS/PAYLOAD_KEYS_FILE)"
    )


async def test_a_codec_accepts_plain_payloads_unless_told_otherwise() -> None:
    """Encryption is required only when the codec is built to require it (its default: no)."""
    plain_codec = EncryptionCodec(KeyRing.parse(f"k1:{KEY_A}"))
    assert not plain_codec.require_encryption
    assert await plain_codec.decode([plain(CANARY)]) == [plain(CANARY)]
