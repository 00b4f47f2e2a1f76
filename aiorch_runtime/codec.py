"""Payload encryption: an AES-256-GCM ``PayloadCodec`` with key ids, key rotation and payloads
bound to their run.

Every payload the SDK sends to Temporal (workflow input and result, activity inputs and results,
signals, updates, queries, memo, user metadata, and, with the failure converter that
``aiorch_runtime.temporal.data_converter`` sets, failure messages and stack traces) passes through
``EncryptionCodec.encode``: the serialized payload is encrypted with the *current* key and
wrapped in a new payload whose metadata says ``encoding: binary/encrypted``, names the key
(``encryption-key-id``) and the run it belongs to (``encryption-namespace``,
``encryption-workflow-id``). ``decode`` picks the key by its id, so after a rotation old
histories still decode as long as the old key stays configured.

**Binding.** The associated data of AES-GCM authenticates the key id, the namespace and the
workflow id, so none of the three can be changed without the payload failing to decrypt. The SDK
hands the codec the namespace and workflow id through its serialization context
(``with_context``: a workflow's payloads, and its activities' inputs and results, carry the
workflow's id). A codec bound to a run refuses a payload recorded for another namespace or
workflow id, so a ciphertext copied out of one run's history into another run (or namespace) is
refused. The workflow id, not the run id: continue-as-new and a redrive keep the workflow id, and
the SDK encodes a start before its run id exists. A codec without context (the codec server, a
manual read of history) reads the binding from the metadata, where the associated data vouches
for it. A payload encrypted without any context (not a path this project uses; the SDK's
asynchronous activity completion is one) is bound to *no* run (empty namespace and workflow id):
only context-free readers accept it, every run refuses it. The codec server encodes for its
namespace and no run, so payloads made through its ``/encode`` (the Web UI's or the ``temporal``
CLI's inputs) are refused by workers: start and review runs with the project's client
(``starter.py``). Two consequences: a ``Replayer`` must run in the runs' namespace
(``namespace=``; its default, ``ReplayNamespace``, refuses every payload), and Temporal
schedules cannot start runs (the SDK encodes a scheduled start for the schedule's workflow id,
which is only the prefix of each run's id).

**Untrusted payloads never raise.** What the SDK decodes includes whatever a client sent, and a
codec error while decoding a workflow activation fails the workflow task, which Temporal retries
forever. So ``decode`` returns a *marker* for a payload it cannot open (unknown key id, wrong
key, tampered, bound to another run or namespace, and, with ``REQUIRE_ENCRYPTION=true``, any
payload that is not encrypted): metadata ``encoding: binary/undecodable`` and a short
``undecodable-reason``, no data. The project's payload converter (``aiorch_runtime.temporal``)
turns a marker into ``PayloadUnreadable`` with that reason, which the workflow reports as an invalid
request (a bad start fails the run, a bad signal is counted as refused, a bad update is refused).
``decrypt`` is the strict form, for the codec server: it raises ``PayloadDecryptionError``.

Keys come from configuration only (``PAYLOAD_KEYS`` / ``PAYLOAD_KEYS_FILE`` and
``PAYLOAD_KEY_ID``, see ``aiorch_runtime.config``): ``id:base64key`` entries separated by commas or
newlines, each key 32 random bytes. ``aiorch keys payload`` prints a fresh one (`new_key`).
Random 96-bit nonces are safe for about 2**32 payloads per key: rotate keys on a schedule.
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from aiorch_runtime.config import ConfigError, Settings
from workflows.errors import OrchestratorError

ENCODING = b"binary/encrypted"
# What ``decode`` leaves in place of a payload it refuses; the payload converter raises on it.
UNDECODABLE = b"binary/undecodable"
METADATA_ENCODING = "encoding"
METADATA_KEY_ID = "encryption-key-id"
METADATA_NAMESPACE = "encryption-namespace"
METADATA_WORKFLOW_ID = "encryption-workflow-id"
METADATA_REASON = "undecodable-reason"
KEY_BYTES = 32
NONCE_BYTES = 12
_AAD_PREFIX = b"ai-orchestrator/payload/v1"
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
NOT_ENCRYPTED = (
    "not encrypted: this deployment accepts encrypted payloads only (REQUIRE_ENCRYPTION=true)"
)


class PayloadUnreadable(OrchestratorError):
    """A payload this process cannot turn into a value: encrypted and no key here, or refused
    by the codec (the message says why). Never names key material or content."""


class PayloadDecryptionError(PayloadUnreadable):
    """An encrypted payload that ``EncryptionCodec.decrypt`` cannot open (unknown key id, wrong
    key, tampered data, bound to another run). The message names the key id, never key
    material or content."""


@dataclass(frozen=True)
class Binding:
    """The run a payload is encrypted for: namespace and workflow id ("" = none)."""

    namespace: str = ""
    workflow_id: str = ""

    @classmethod
    def of(cls, context: SerializationContext) -> Binding | None:
        """The binding a serialization context asks for; None for a context that names no
        workflow (Nexus operations), which is treated as no context at all."""
        if isinstance(context, WorkflowSerializationContext):
            return cls(context.namespace, context.workflow_id)
        if isinstance(context, ActivitySerializationContext):
            # An activity started by a workflow is bound to that workflow; a standalone one to
            # its namespace only.
            return cls(context.namespace, context.workflow_id or "")
        return None

    def associated_data(self, key_id: str) -> bytes:
        """AES-GCM associated data: the key id, namespace and workflow id, each length-prefixed
        so no two different triples serialize alike."""
        parts = [key_id.encode(), self.namespace.encode(), self.workflow_id.encode()]
        return _AAD_PREFIX + b"".join(len(part).to_bytes(4, "big") + part for part in parts)


@dataclass(frozen=True)
class KeyRing:
    """The configured keys by id, and the id of the one new payloads are encrypted with."""

    keys: Mapping[str, bytes] = field(repr=False)
    current_id: str

    def __post_init__(self) -> None:
        if self.current_id not in self.keys:
            configured = ", ".join(sorted(self.keys)) or "none"
            raise ConfigError(
                f"PAYLOAD_KEY_ID={self.current_id!r} names no configured key "
                f"(configured key ids: {configured})"
            )

    def __repr__(self) -> str:
        return f"KeyRing(ids={sorted(self.keys)!r}, current_id={self.current_id!r})"

    @classmethod
    def parse(
        cls, spec: str, current_id: str | None = None, *, source: str = "PAYLOAD_KEYS"
    ) -> KeyRing:
        """Parse ``id:base64key`` entries separated by commas or newlines.

        ``current_id`` may be omitted when exactly one key is configured.

        Raises:
            ConfigError: one line naming the problem (never the key material).
        """
        keys: dict[str, bytes] = {}
        for raw_entry in re.split(r"[,\n]", spec):
            entry = raw_entry.strip()
            if not entry or entry.startswith("#"):
                continue
            key_id, sep, material = entry.partition(":")
            key_id = key_id.strip()
            if not sep or not _KEY_ID.match(key_id):
                raise ConfigError(
                    f"{source}: each entry must be KEY_ID:BASE64KEY with a key id of letters, "
                    "digits, '.', '_' or '-'"
                )
            if key_id in keys:
                raise ConfigError(f"{source}: key id {key_id!r} is configured twice")
            keys[key_id] = _decode_key(material.strip(), key_id, source)
        if not keys:
            raise ConfigError(f"{source} is set but holds no keys")
        if current_id is None:
            if len(keys) > 1:
                raise ConfigError(
                    f"{source} holds {len(keys)} keys; set PAYLOAD_KEY_ID to the one that "
                    "encrypts new payloads"
                )
            current_id = next(iter(keys))
        return cls(keys=keys, current_id=current_id)


def _decode_key(material: str, key_id: str, source: str) -> bytes:
    try:
        key = base64.b64decode(material, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{source}: key {key_id!r} is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ConfigError(
            f"{source}: key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES} "
            "(generate one with `aiorch keys payload`)"
        )
    return key


def keyring_from_settings(settings: Settings) -> KeyRing | None:
    """The configured key ring, or None when encryption is off (no keys configured).

    ``PAYLOAD_KEYS_FILE`` is resolved into ``payload_keys`` by ``aiorch_runtime.config``.

    Raises:
        ConfigError: keys are configured but unusable.
    """
    spec = settings.payload_keys.get_secret_value() if settings.payload_keys else ""
    if spec.strip():
        return KeyRing.parse(spec, settings.payload_key_id)
    if settings.payload_key_id is not None:
        raise ConfigError("PAYLOAD_KEY_ID is set but no keys are (PAYLOAD_KEYS/PAYLOAD_KEYS_FILE)")
    return None


def new_key() -> str:
    """A fresh random key, base64-encoded, for ``PAYLOAD_KEYS``."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


class EncryptionCodec(PayloadCodec, WithSerializationContext):
    """AES-256-GCM over whole serialized payloads, labelled with the key id and bound to a run.

    Args:
        keyring: the configured keys.
        require_encryption: ``decode`` refuses (marks) payloads that are not encrypted.
        binding: the run this codec encodes for and accepts payloads of; None (no context):
            encode for no run, accept any run's payloads. The SDK sets it via ``with_context``.
    """

    def __init__(
        self,
        keyring: KeyRing,
        *,
        require_encryption: bool = False,
        binding: Binding | None = None,
    ) -> None:
        self._keyring = keyring
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keyring.keys.items()}
        self._require_encryption = require_encryption
        self._binding = binding

    @property
    def current_key_id(self) -> str:
        return self._keyring.current_id

    @property
    def binding(self) -> Binding | None:
        return self._binding

    @property
    def require_encryption(self) -> bool:
        return self._require_encryption

    def with_context(self, context: SerializationContext) -> Self:
        """A copy bound to the context's namespace and workflow id (the SDK calls this for
        every operation; the keys and ciphers are shared, not copied)."""
        return self.bound(Binding.of(context))

    def bound(self, binding: Binding | None) -> Self:
        """A copy bound to ``binding`` (None: no context)."""
        if binding == self._binding:
            return self
        clone = copy.copy(self)
        clone._binding = binding
        return clone

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload opened, or a marker in its place: never raises (see the module doc)."""
        return [self.open(payload) for payload in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        """The payload encrypted with the current key, for this codec's run (or none)."""
        key_id = self._keyring.current_id
        binding = self._binding or Binding()
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(
            nonce, payload.SerializeToString(), binding.associated_data(key_id)
        )
        return Payload(
            metadata={
                METADATA_ENCODING: ENCODING,
                METADATA_KEY_ID: key_id.encode(),
                METADATA_NAMESPACE: binding.namespace.encode(),
                METADATA_WORKFLOW_ID: binding.workflow_id.encode(),
            },
            data=nonce + sealed,
        )

    def open(self, payload: Payload) -> Payload:
        """The original payload, or a marker (``binary/undecodable`` with the reason) when it
        cannot be opened or, with ``require_encryption``, is not encrypted. Never raises."""
        if not is_encrypted(payload):
            return undecodable(NOT_ENCRYPTED) if self._require_encryption else payload
        try:
            return self.decrypt(payload)
        except PayloadDecryptionError as err:
            return undecodable(str(err))
        except Exception:  # whatever else a crafted payload provokes: refused, never raised
            return undecodable("malformed encrypted payload")

    def decrypt(self, payload: Payload) -> Payload:
        """The original payload (strict); one that is not encrypted is returned as it is.

        Raises:
            PayloadDecryptionError: encrypted with a key that is not configured, the data does
                not authenticate, or it is bound to another run than this codec's.
        """
        if not is_encrypted(payload):
            return payload
        raw_id = payload.metadata.get(METADATA_KEY_ID, b"")
        key_id = raw_id.decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            shown = repr(key_id) if _KEY_ID.match(key_id) else "(not a valid key id)"
            configured = ", ".join(sorted(self._ciphers))
            raise PayloadDecryptionError(
                f"payload is encrypted with key id {shown}, which is not configured "
                f"(configured: {configured}); add it to PAYLOAD_KEYS to read older data"
            )
        try:
            recorded = payload_binding(payload)
            data = payload.data
            plain = cipher.decrypt(
                data[:NONCE_BYTES], data[NONCE_BYTES:], recorded.associated_data(key_id)
            )
        except (InvalidTag, ValueError):  # ValueError: a short nonce, non-UTF-8 metadata
            raise PayloadDecryptionError(
                f"payload does not decrypt with key {key_id!r}: wrong key material or tampered "
                "data (its key id, namespace or workflow id changed)"
            ) from None
        mine = self._binding
        if mine is not None and recorded != mine:
            if not recorded.workflow_id:
                # Made without a run's context: the codec server's /encode (the Web UI's or the
                # temporal CLI's input), or an SDK path without context.
                raise PayloadDecryptionError(
                    "payload is encrypted for no run (made outside one, e.g. by the codec "
                    "server's /encode): send it with the project's client (starter.py)"
                )
            other = "namespace" if recorded.namespace != mine.namespace else "workflow id"
            raise PayloadDecryptionError(
                f"payload is encrypted for another {other} than this run's: an encrypted "
                "payload cannot be moved between runs or namespaces"
            )
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded


def is_encrypted(payload: Payload) -> bool:
    """True when the payload says it is encrypted (``binary/encrypted``)."""
    return payload.metadata.get(METADATA_ENCODING) == ENCODING


def payload_binding(payload: Payload) -> Binding:
    """The run an encrypted payload says it is bound to (authenticated only by decrypting it).

    Raises:
        ValueError: the namespace or workflow id in its metadata is not UTF-8.
    """
    return Binding(
        payload.metadata.get(METADATA_NAMESPACE, b"").decode(),
        payload.metadata.get(METADATA_WORKFLOW_ID, b"").decode(),
    )


def undecodable(reason: str) -> Payload:
    """The marker ``decode`` leaves for a payload it refuses: the reason, no content."""
    return Payload(
        metadata={METADATA_ENCODING: UNDECODABLE, METADATA_REASON: reason.encode()},
    )
