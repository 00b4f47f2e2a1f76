"""The run ledger's database (docs/ledger.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, SecretStr, field_validator

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc

DEFAULT_LEDGER_URL = "sqlite:///.data/ledger.db"


class LedgerSettings(SettingsSection):
    """Where the ledger is kept (`Section.LEDGER`)."""

    SECTION: ClassVar[Section] = Section.LEDGER

    ledger_url: Annotated[SecretStr, SettingDoc(Section.LEDGER)] = Field(
        default=SecretStr(DEFAULT_LEDGER_URL),
        description="The ledger's database: `sqlite:///PATH` (relative to the working "
        "directory) or `postgresql://USER:PASSWORD@HOST:PORT/DATABASE` (psycopg 3). The URL "
        "may hold a password.",
    )
    ledger_url_file: Path | None = None

    @field_validator("ledger_url")
    @classmethod
    def _known_database(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        if not url.startswith(("sqlite:///", "postgresql://", "postgresql+psycopg://")):
            raise ValueError("must be sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DATABASE")
        return value
