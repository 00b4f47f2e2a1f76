"""The local stack's keys and tokens: payload encryption's keys (on when the worker's
environment configures them), the reviewer keys a stack keeps across restarts, and the 0600
files that hold them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aiorch.ops.signing import SigningKey

# Variables that switch payload encryption on (see aiorch_runtime.codec) and configure the
# codec server.
ENCRYPTION_VARIABLES = ("PAYLOAD_KEYS", "PAYLOAD_KEYS_FILE")
CODEC_TOKEN_VARIABLES = ("CODEC_SERVER_TOKEN", "CODEC_SERVER_TOKEN_FILE")


@dataclass(frozen=True)
class PayloadKeys:
    """Payload encryption as the worker's environment configures it: ``on`` when keys are
    given; they are in ``file`` (the one given, or ``<data_dir>/payload-keys`` written from
    ``keys``), with ``key_id`` the current one if named."""

    on: bool
    file: Path
    key_id: str | None
    keys: str | None

    @classmethod
    def configured(cls, worker_env: Mapping[str, str], data_dir: Path) -> PayloadKeys:
        """The keys ``worker_env``, laid over this process's environment, configures."""
        env = {**os.environ, **worker_env}
        given_file = env.get("PAYLOAD_KEYS_FILE")
        return cls(
            on=any(env.get(name) for name in ENCRYPTION_VARIABLES),
            file=Path(given_file).resolve() if given_file else data_dir / "payload-keys",
            key_id=env.get("PAYLOAD_KEY_ID"),
            keys=None if given_file else env.get("PAYLOAD_KEYS"),
        )


def write_secret(path: Path, value: str) -> None:
    """Write ``value`` to a file only its owner can read (created 0600, never world-readable)."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(value + "\n", encoding="utf-8")


def stack_reviewer_key(path: Path, key_id: str = "localstack") -> SigningKey:
    """The reviewer key kept in ``path``, or a new one named ``key_id``."""
    # A persisted stack keeps its key, so runs that wait for review across restarts (their plan
    # holds the public key) can still be reviewed.
    if path.is_file():
        return SigningKey.parse(path.read_text(encoding="utf-8"), source=str(path))
    return SigningKey.generate(key_id)
