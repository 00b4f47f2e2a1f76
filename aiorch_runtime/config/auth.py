"""Signed reviews and starts: the public keys a worker checks, and the CLI's signing keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, SecretStr, model_validator

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.errors import ConfigError
from workflows.engine.identity import KeySpecError, parse_requester_keys, parse_review_keys
from workflows.payloads import RequesterKey, ReviewKey


class AuthSettings(SettingsSection):
    """Who may decide a review and who may start a run (`Section.AUTHENTICATION`)."""

    SECTION: ClassVar[Section] = Section.AUTHENTICATION

    review_auth: Annotated[Literal["required", "off"], SettingDoc(Section.AUTHENTICATION)] = Field(
        default="required",
        description="`required`: a worker without `REVIEW_PUBLIC_KEYS` refuses to start. `off`: "
        "unsigned reviews are accepted, for a sandbox (the worker warns at every start, and "
        "refuses to start if keys are set too).",
    )
    review_public_keys: Annotated[
        str | None,
        SettingDoc(
            Section.AUTHENTICATION,
            default="unset (a worker then refuses to start, unless `REVIEW_AUTH=off`)",
            example="<the REVIEW_PUBLIC_KEYS line of: aiorch keys reviewer alice>",
        ),
    ] = Field(
        default=None,
        description="`key_id:base64 Ed25519 public key[:who]` entries (comma- or "
        "newline-separated): every review must carry a token signed by one of them. `who` is "
        "the reviewers that key may sign for (`alice|bob`, or `*` for an identity provider such "
        "as the review inbox); without it, only the reviewer named `key_id`. Keys that hold no "
        "key (only comments) are refused.",
    )
    review_public_keys_file: Path | None = None
    reviewer_key: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.AUTHENTICATION,
            example="<the REVIEWER_KEY line of: aiorch keys reviewer alice>",
        ),
    ] = Field(
        default=None,
        description="The CLI's key for signing reviews: `key_id:base64 Ed25519 private key` "
        "(`aiorch keys reviewer NAME` makes one).",
    )
    reviewer_key_file: Path | None = None
    review_token_ttl_s: Annotated[float, SettingDoc(Section.AUTHENTICATION)] = Field(
        default=600.0,
        gt=0,
        le=7 * 86400,
        description="How long a signed review or budget decision stays valid after it is "
        "signed (checked against workflow time).",
    )
    requester_public_keys: Annotated[
        str | None,
        SettingDoc(
            Section.AUTHENTICATION,
            default="unset (starts are not authenticated)",
            example="alice:<base64 public key>:acme",
        ),
    ] = Field(
        default=None,
        description="`requester:base64 Ed25519 public key:tenant` entries. Set, every start "
        "must carry a claim signed by one of them, and the run's requester and tenant are the "
        "key's (a request may not name others); unset, a request's `requested_by` and `tenant` "
        "are whatever it says.",
    )
    requester_public_keys_file: Path | None = None
    requester_key: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.AUTHENTICATION,
            example="<the REQUESTER_KEY line of: aiorch keys requester alice --tenant acme>",
        ),
    ] = Field(
        default=None,
        description="The CLI's key for signing starts: `requester:base64 Ed25519 private key` "
        "(`aiorch keys requester NAME --tenant T` makes one).",
    )
    requester_key_file: Path | None = None

    @model_validator(mode="after")
    def _keys_hold_keys(self) -> Self:
        self.review_keys()
        self.requester_keys()
        return self

    def review_keys(self) -> list[ReviewKey]:
        """The reviewer public keys (REVIEW_PUBLIC_KEYS); empty when none are configured.

        Raises:
            ConfigError: an entry is malformed, or the keys given hold no key at all (a file of
                comments, such as "# revoked pending rotation", is not "no authentication");
                checked when the settings are loaded.
        """
        source = "REVIEW_PUBLIC_KEYS_FILE" if self.review_public_keys_file else "REVIEW_PUBLIC_KEYS"
        if not self.review_public_keys and self.review_public_keys_file is None:
            return []  # unset, or set to nothing (= unset, as for every variable)
        try:
            keys = parse_review_keys(self.review_public_keys or "")
        except KeySpecError as err:
            raise ConfigError(f"{source}: {err}") from None
        if not keys:
            raise ConfigError(
                f"{source} holds no key (only comments or blank lines): list at least one "
                "key, or unset it"
            )
        return keys

    def requester_keys(self) -> list[RequesterKey]:
        """The requester public keys (REQUESTER_PUBLIC_KEYS); empty when start authentication
        is off.

        Raises:
            ConfigError: an entry is malformed, or the keys given hold no key at all.
        """
        source = (
            "REQUESTER_PUBLIC_KEYS_FILE"
            if self.requester_public_keys_file
            else "REQUESTER_PUBLIC_KEYS"
        )
        if not self.requester_public_keys and self.requester_public_keys_file is None:
            return []
        try:
            keys = parse_requester_keys(self.requester_public_keys or "")
        except KeySpecError as err:
            raise ConfigError(f"{source}: {err}") from None
        if not keys:
            raise ConfigError(f"{source} holds no key: list at least one key, or unset it")
        return keys
