"""The stores: the vector store (Qdrant) and the document pipeline's SQL store."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, SecretStr, field_validator

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc

# The document pipeline's SQL store: an SQLite file next to the embedded vector store.
DEFAULT_DOCUMENT_STORE_URL = "sqlite:///.data/documents.db"


class StoreSettings(SettingsSection):
    """Where vectors and extracted fields are kept (`Section.STORES`)."""

    SECTION: ClassVar[Section] = Section.STORES

    vector_store_url: Annotated[
        str | None,
        SettingDoc(
            Section.STORES,
            default="unset (embedded, at `VECTOR_STORE_PATH`)",
            example="https://qdrant.internal:6333",
        ),
    ] = Field(default=None, description="A Qdrant server's URL (`https://` for TLS).")
    vector_store_api_key: Annotated[
        SecretStr | None, SettingDoc(Section.STORES, example="<key>")
    ] = Field(
        default=None,
        description="The Qdrant server's API key, sent with every request (use an `https://` "
        "URL); server mode only.",
    )
    vector_store_api_key_file: Path | None = None
    vector_store_ca_cert_path: Annotated[
        Path | None,
        SettingDoc(
            Section.STORES, default="unset (the system's roots)", example="/etc/aiorch/qdrant.pem"
        ),
    ] = Field(
        default=None,
        description="The CA that signed the Qdrant server's certificate (`https://` URLs only).",
    )
    vector_store_path: Annotated[str, SettingDoc(Section.STORES)] = Field(
        default=".data/vectors",
        description="The embedded store's folder; one worker process per folder (more workers "
        "need `VECTOR_STORE_URL`).",
    )
    vector_collection: Annotated[str, SettingDoc(Section.STORES)] = Field(
        default="ai-orchestrator", min_length=1, description="The Qdrant collection."
    )
    document_store_url: Annotated[SecretStr, SettingDoc(Section.STORES)] = Field(
        default=SecretStr(DEFAULT_DOCUMENT_STORE_URL),
        description="The document pipeline's SQL store of extracted fields (a `documents` "
        "table, created if missing): `sqlite:///PATH`, or PostgreSQL as "
        "`postgresql://user:password@host:port/db` (psycopg 3); empty: the default. The URL may "
        "hold a password.",
    )
    document_store_url_file: Path | None = None

    @field_validator("document_store_url")
    @classmethod
    def _document_store_url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        if not url:
            return SecretStr(DEFAULT_DOCUMENT_STORE_URL)  # set but empty = the default
        if not re.fullmatch(r"(sqlite(\+pysqlite)?:///|postgres(ql)?(\+psycopg)?://)\S+", url):
            raise ValueError("must be sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")
        return value
