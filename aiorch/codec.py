"""Payload encryption: an AES-256-GCM ``PayloadCodec`` with key ids and key rotation.

Every payload the SDK sends to Temporal (workflow input and result, activity inputs and results,
signals, updates, queries, user metadata, and, with the failure converter that
``aiorch.temporal.data_converter`` sets, failure messages and stack traces) passes through
``EncryptionCodec.encode``: the serialized payload is encrypted with the *current* key and
wrapped in a new payload whose metadata says ``encoding: binary/encrypted`` and names the key
(``encryption-key-id``). ``decode`` picks the key by that id, so after a rotation old histories
still decode as long as the old key stays configured. Payloads that were never encrypted pass
through unchanged, so turning encryption on does not break runs started before it.

Keys come from configuration only (``PAYLOAD_KEYS`` / ``PAYLOAD_KEYS_FILE`` and
``PAYLOAD_KEY_ID``, see ``aiorch.config``): ``id:base64key`` entries separated by commas or
newlines, each key 32 random bytes. ``python -m aiorch.codec new-key`` prints a fresh one.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from aiorch.config import ConfigError, Settings

ENCODING = b"binary/encrypted"
METADATA_ENCODING = "encoding"
METADATA_KEY_ID = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
# Binds each ciphertext to its key id, so a payload relabelled with another id fails to decrypt.
_AAD_PREFIX = b"ai-orchestrator/payload/v1:"
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class PayloadDecryptionError(Exception):
    """An encrypted payload that no configured key can open (unknown key id, wrong key or
    tampered data). The message names the key id, never key material or content."""


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
            "(generate one with `python -m aiorch.codec new-key`)"
        )
    return key


def keyring_from_settings(settings: Settings) -> KeyRing | None:
    """The configured key ring, or None when encryption is off (no keys configured).

    ``PAYLOAD_KEYS_FILE`` is resolved into ``payload_keys`` by ``aiorch.config``.

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


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole serialized payloads, labelled with the key id."""

    def __init__(self, keyring: KeyRing) -> None:
        self._keyring = keyring
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keyring.keys.items()}

    @property
    def current_key_id(self) -> str:
        return self._keyring.current_id

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(payload) for payload in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        """The payload encrypted with the current key."""
        key_id = self._keyring.current_id
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(
            nonce, payload.SerializeToString(), _AAD_PREFIX + key_id.encode()
        )
        return Payload(
            metadata={METADATA_ENCODING: ENCODING, METADATA_KEY_ID: key_id.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """The original payload; one that is not encrypted is returned as it is.

        Raises:
            PayloadDecryptionError: encrypted with a key that is not configured, or the data
                does not authenticate.
        """
        if payload.metadata.get(METADATA_ENCODING) != ENCODING:
            return payload
        key_id = payload.metadata.get(METADATA_KEY_ID, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            configured = ", ".join(sorted(self._ciphers))
            raise PayloadDecryptionError(
                f"payload is encrypted with key id {key_id!r}, which is not configured "
                f"(configured: {configured}); add it to PAYLOAD_KEYS to read older data"
            )
        data = payload.data
        try:
            plain = cipher.decrypt(
                data[:NONCE_BYTES], data[NONCE_BYTES:], _AAD_PREFIX + key_id.encode()
            )
        except InvalidTag:
            raise PayloadDecryptionError(
                f"payload does not decrypt with key {key_id!r}: wrong key material or tampered data"
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiorch.codec new-key``: print a fresh base64 key."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["new-key"]:
        print("usage: python -m aiorch.codec new-key", file=sys.stderr)
        return 2
    print(new_key())
    return 0


if __name__ == "__main__":
    sys.exit(main())
