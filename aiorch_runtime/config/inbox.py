"""The review inbox (the web page reviewers decide in) and the review notifications."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc

DEFAULT_INBOX_PORT = 8703


class InboxSettings(SettingsSection):
    """The inbox's address, logins and signing key, and the review webhook (`Section.INBOX`)."""

    SECTION: ClassVar[Section] = Section.INBOX

    inbox_url: Annotated[
        str | None, SettingDoc(Section.INBOX, example="https://review.example.com")
    ] = Field(
        default=None,
        description="Where reviewers open the review inbox (`https://...` in production): the "
        "links in notifications and in `aiorch start`'s output. Anything but `http://` on a "
        "loopback host makes the session cookie `Secure`; required when the inbox listens "
        "beyond loopback.",
    )
    inbox_host: Annotated[str, SettingDoc(Section.INBOX)] = Field(
        default="127.0.0.1", description="The address the review inbox listens on."
    )
    inbox_port: Annotated[int, SettingDoc(Section.INBOX)] = Field(
        default=DEFAULT_INBOX_PORT, ge=0, le=65535, description="The review inbox's port."
    )
    inbox_signing_key: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.INBOX,
            default="unset (required to run the inbox)",
            example="<the INBOX_SIGNING_KEY line of: aiorch inbox new-key>",
        ),
    ] = Field(
        default=None,
        description="The inbox's Ed25519 key, `inbox:base64 private key` (`aiorch inbox "
        "new-key`); its `inbox:KEY:*` entry goes into the workers' `REVIEW_PUBLIC_KEYS`.",
    )
    inbox_signing_key_file: Path | None = None
    inbox_tokens_file: Annotated[
        Path | None, SettingDoc(Section.INBOX, example="/etc/aiorch/inbox-tokens")
    ] = Field(
        default=None,
        description="Reviewers' login tokens, one `NAME:sha256:HEX` line each (`aiorch inbox "
        "new-token NAME`), re-read when it changes. The inbox needs this or "
        "`INBOX_USER_HEADER`.",
    )
    inbox_user_header: Annotated[
        str | None,
        SettingDoc(Section.INBOX, default="unset (not trusted)", example="X-Forwarded-User"),
    ] = Field(
        default=None,
        pattern=r"^[A-Za-z0-9-]{1,64}$",
        description="The header an authenticating proxy in front of the inbox puts the "
        "reviewer's name in; trusted only when set.",
    )
    inbox_session_ttl_s: Annotated[float, SettingDoc(Section.INBOX)] = Field(
        default=8 * 3600.0,
        gt=0,
        le=7 * 86400,
        description="How long an inbox login lasts, counted from the login (using it does not "
        "extend it; logging out ends it sooner).",
    )
    review_webhook_url: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.INBOX,
            default="unset (no notifications)",
            example="https://hooks.slack.com/services/...",
        ),
    ] = Field(
        default=None,
        description="A webhook called when a run starts waiting for review and when it "
        "escalates (a Slack incoming-webhook URL is a credential).",
    )
    review_webhook_url_file: Path | None = None
    review_webhook_format: Annotated[Literal["json", "slack"], SettingDoc(Section.INBOX)] = Field(
        default="json",
        description='`json`, or `slack` for Slack-compatible `{"text", "blocks"}` messages.',
    )

    @field_validator("inbox_url")
    @classmethod
    def _inbox_url(cls, value: str | None) -> str | None:
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else None

    @field_validator("review_webhook_url")
    @classmethod
    def _webhook_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # set but empty = unset
        if not re.fullmatch(r"https?://\S+", value.get_secret_value(), re.IGNORECASE):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @property
    def notifications_enabled(self) -> bool:
        """True when a review webhook is configured (``REVIEW_WEBHOOK_URL``)."""
        return self.review_webhook_url is not None
