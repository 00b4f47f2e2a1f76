"""The document store on SQLite (the embedded default): the idempotent upsert, the table
created when missing, errors mapped to retryable or permanent types without the URL's password;
and the URLs ``DOCUMENT_STORE_URL`` may hold. (The same cases against a real PostgreSQL server:
``test_document_store_postgres.py``.)"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Engine

from activities.documents.store import create_store_engine
from aiorch.devstack.processes import free_port
from aiorch_runtime.config import DEFAULT_DOCUMENT_STORE_URL, ConfigError, Settings
from tests.activities import store_cases
from tests.activities.store_cases import assert_unavailable, document, opened, refusal

PASSWORD = "hunter2-not-for-logs"


@pytest.fixture
def url(tmp_path: Path) -> str:
    """An SQLite file in a folder that does not exist yet (the store creates it)."""
    return f"sqlite:///{tmp_path / 'store' / 'documents.db'}"


async def test_storing_twice_leaves_one_row_with_the_last_fields(url: str) -> None:
    """Storing a request again (a retried activity, a redriven run) replaces its row: one row,
    the last fields, problems and reviewer, the last time."""
    await store_cases.storing_twice_leaves_one_row_with_the_last_fields(url, "sqlite")


async def test_concurrent_stores_of_one_request_leave_one_row(url: str) -> None:
    """Two engines on one new SQLite file create the table at once and race eight writes of one
    request id: one row is left (writers wait for the lock instead of failing)."""
    await store_cases.concurrent_stores_of_one_request_leave_one_row(url)


def first_journal_modes(url: str, workers: int) -> list[object]:
    """The journal mode each of ``workers`` engines sees, their first connections to ``url``
    opened at the same moment."""
    engines = [create_store_engine(url) for _ in range(workers)]
    together = threading.Barrier(workers)

    def journal_mode(engine: Engine) -> object:
        together.wait()
        with engine.connect() as connection:
            return connection.exec_driver_sql("PRAGMA journal_mode").scalar()

    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(journal_mode, engines))
    finally:
        for engine in engines:
            engine.dispose()


def test_workers_opening_a_new_file_at_once_all_get_write_ahead_logging(tmp_path: Path) -> None:
    """Four workers whose first connections to one new SQLite file open at the same moment all
    switch it to write-ahead logging, on each of 100 new files. (SQLite refuses that switch at
    once, without waiting out the busy timeout, to a connection that finds another switching;
    before the store retried it, a worker failed on a few files in a hundred.)"""
    for n in range(100):
        assert first_journal_modes(f"sqlite:///{tmp_path / f'{n}.db'}", 4) == ["wal"] * 4


async def test_documents_are_kept_apart_by_request_id(url: str) -> None:
    """Each request id has its own row; an unknown one has none."""
    await store_cases.documents_are_kept_apart_by_request_id(url)


async def test_any_text_in_the_fields_is_stored(url: str) -> None:
    """NUL characters, quotes, emoji and other scripts in the fields are stored as they are."""
    await store_cases.any_text_in_the_fields_is_stored(url)


async def test_another_chain_never_replaces_a_row(url: str) -> None:
    """A write under a stored request id from another run chain (a reused id, another pipeline,
    another tenant) is refused for good as DocumentStoreConflict; the row is unchanged."""
    await store_cases.another_chain_never_replaces_a_row(url)


async def test_the_owning_chain_writes_its_row_again(url: str) -> None:
    """The chain that owns a row (its retry, continuation or re-edit) replaces its fields."""
    await store_cases.the_owning_chain_writes_its_row_again(url)


async def test_racing_chains_leave_one_owner(url: str) -> None:
    """Chains racing to store one request id: one wins, every other write is a conflict."""
    await store_cases.racing_chains_leave_one_owner(url)


async def test_a_table_from_before_owners_is_migrated(url: str) -> None:
    """A SQLite table of the previous release gets the owner columns; its rows are kept and
    never replaced."""
    await store_cases.a_table_from_before_owners_is_migrated(url)


async def test_a_table_of_another_shape_is_refused_for_good(url: str) -> None:
    """An existing documents table without our columns fails for good, naming them."""
    await store_cases.a_table_of_another_shape_is_refused_for_good(url)


async def test_an_sqlite_file_that_cannot_be_opened_is_retried(tmp_path: Path) -> None:
    """A database path an operator must fix (here: a folder) is retryable, not permanent."""
    (tmp_path / "documents.db").mkdir()
    async with opened(f"sqlite:///{tmp_path / 'documents.db'}") as activities:
        error = await refusal(activities, document())
    assert_unavailable(error)
    assert "sqlite file" in error.message


async def test_an_unreachable_postgres_is_retried_without_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A PostgreSQL URL whose server does not answer gives a retryable error naming the host,
    and neither the error nor the worker's log holds the password."""
    port = free_port()
    url = f"postgresql://aiorch:{PASSWORD}@127.0.0.1:{port}/documents"
    with caplog.at_level(logging.INFO):
        async with opened(url) as activities:
            error = await refusal(activities, document())
    assert_unavailable(error, PASSWORD)
    assert f"postgresql at 127.0.0.1:{port}/documents" in error.message
    assert PASSWORD not in caplog.text
    assert "Connection refused" in caplog.text  # the operator still learns why


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (f"mysql://root:{PASSWORD}@db/documents", "'mysql' database is not supported"),
        (f"postgresql+asyncpg://root:{PASSWORD}@db/documents", "is not supported"),
        ("sqlite://", "names no SQLite file"),
        ("sqlite:///:memory:", "names no SQLite file"),
        (f"not a url {PASSWORD}", "is not a database URL"),
    ],
)
def test_a_bad_url_is_a_config_error_without_its_password(url: str, words: str) -> None:
    """An unusable URL stops the worker at start with one line that never quotes the URL."""
    with pytest.raises(ConfigError) as info:
        create_store_engine(url)
    assert words in str(info.value)
    assert PASSWORD not in str(info.value)
    assert "DOCUMENT_STORE_URL" in str(info.value)


def test_the_default_is_an_sqlite_file_under_the_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing set, the store is ``.data/documents.db`` (the folder is created)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCUMENT_STORE_URL", raising=False)
    settings = Settings()
    assert settings.document_store_url.get_secret_value() == DEFAULT_DOCUMENT_STORE_URL
    engine = create_store_engine(settings.document_store_url.get_secret_value())
    try:
        assert engine.dialect.name == "sqlite"
        assert (tmp_path / ".data").is_dir()
    finally:
        engine.dispose()


def test_postgres_urls_use_psycopg() -> None:
    """``postgresql://`` and ``postgres://`` URLs are served by psycopg 3 (no other driver is
    installed), and the engine's description hides the password."""
    for scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        engine = create_store_engine(f"{scheme}://aiorch:{PASSWORD}@db:5432/documents")
        try:
            assert engine.url.drivername == "postgresql+psycopg"
            assert PASSWORD not in repr(engine)
        finally:
            engine.dispose()
