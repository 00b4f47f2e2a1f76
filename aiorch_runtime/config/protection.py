"""Payload encryption and the codec server. Secrets come from the variable or from a file named
by ``<NAME>_FILE``, never from inputs; `SecretStr` keeps them out of reprs and logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Self

from pydantic import Field, SecretStr, model_validator

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.errors import ConfigError

DEFAULT_CODEC_PORT = 8702


class PayloadProtectionSettings(SettingsSection):
    """The payload keys and the codec server (`Section.PAYLOAD_PROTECTION`)."""

    SECTION: ClassVar[Section] = Section.PAYLOAD_PROTECTION

    payload_keys: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.PAYLOAD_PROTECTION,
            default="unset (**no encryption**)",
            example="<the PAYLOAD_KEYS line of: aiorch keys payload>",
        ),
    ] = Field(
        default=None,
        description="The keys that encrypt payloads, `id:base64key` entries of 32-byte keys "
        "(comma- or newline-separated; `aiorch keys payload` makes one).",
    )
    payload_keys_file: Path | None = None
    payload_key_id: Annotated[
        str | None,
        SettingDoc(Section.PAYLOAD_PROTECTION, default="the only key", example="k2"),
    ] = Field(
        default=None,
        description="The key that encrypts new payloads (required with several keys; every key "
        "still decrypts).",
    )
    require_encryption: Annotated[bool, SettingDoc(Section.PAYLOAD_PROTECTION)] = Field(
        default=False,
        description="Refuse payloads that are not encrypted (a plaintext start fails); needs "
        "`PAYLOAD_KEYS`.",
    )
    codec_server_host: Annotated[str, SettingDoc(Section.PAYLOAD_PROTECTION)] = Field(
        default="127.0.0.1",
        description="The address the codec server (`aiorch codec-server`) listens on.",
    )
    codec_server_port: Annotated[int, SettingDoc(Section.PAYLOAD_PROTECTION)] = Field(
        default=DEFAULT_CODEC_PORT, ge=0, le=65535, description="The codec server's port."
    )
    codec_server_token: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.PAYLOAD_PROTECTION,
            default="unset (required to run the codec server)",
            example="<32 random characters or more>",
        ),
    ] = Field(
        default=None,
        description="The bearer token the codec server demands: at least 32 characters, 8 of "
        "them distinct.",
    )
    codec_server_token_file: Path | None = None

    @model_validator(mode="after")
    def _encryption_required_needs_keys(self) -> Self:
        if self.require_encryption and self.payload_keys is None:
            raise ConfigError("REQUIRE_ENCRYPTION=true needs PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE)")
        return self
