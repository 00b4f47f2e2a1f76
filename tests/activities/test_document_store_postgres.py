"""The document store against a real PostgreSQL server (Debian's packages, started by the tests
in a temporary directory; ``tests/support/postgres.py``): the same cases as on SQLite through
the same code, and a wrong password, which must be retried and never shown."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

import pytest

from tests.activities import store_cases
from tests.activities.store_cases import assert_unavailable, document, opened, refusal
from tests.support.postgres import Postgres, running_postgres
from workflows.steps.contract import DOCUMENT_STORE_REJECTED

pytestmark = pytest.mark.e2e

_databases = itertools.count()


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def url(postgres: Postgres) -> str:
    """A new, empty database on the module's server for each test."""
    return postgres.create_database(f"documents_{next(_databases)}")


async def test_storing_twice_leaves_one_row_with_the_last_fields(url: str) -> None:
    """Storing a request again replaces its row: one row, the last fields, problems and
    reviewer, the last time (ON CONFLICT DO UPDATE on PostgreSQL)."""
    await store_cases.storing_twice_leaves_one_row_with_the_last_fields(url, "postgresql")


async def test_concurrent_stores_of_one_request_leave_one_row(url: str) -> None:
    """Two engines on a new database create the table at once and race eight writes of one
    request id: one row is left, no unique violation escapes."""
    await store_cases.concurrent_stores_of_one_request_leave_one_row(url)


async def test_documents_are_kept_apart_by_request_id(url: str) -> None:
    """Each request id has its own row; an unknown one has none."""
    await store_cases.documents_are_kept_apart_by_request_id(url)


async def test_any_text_in_the_fields_is_stored(url: str) -> None:
    """NUL characters (which PostgreSQL's JSONB and text refuse), quotes, emoji and other
    scripts in the fields are stored as they are, as on SQLite."""
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
    """A PostgreSQL table of the previous release gets the owner columns; its rows are kept and
    never replaced."""
    await store_cases.a_table_from_before_owners_is_migrated(url)


async def test_a_table_of_another_shape_is_refused_for_good(url: str) -> None:
    """An existing documents table without our columns fails for good, naming them."""
    await store_cases.a_table_of_another_shape_is_refused_for_good(url)


async def test_a_wrong_password_is_retried_and_never_shown(
    postgres: Postgres, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A password the server refuses is retryable (an operator fixes the secret while the
    activity waits), and neither the error nor the log holds the password tried or the real
    one."""
    wrong = "wrong-" + postgres.password[:8]
    with caplog.at_level(logging.INFO):
        async with opened(postgres.url(url.rsplit("/", 1)[1], password=wrong)) as activities:
            error = await refusal(activities, document())
    assert_unavailable(error, wrong, postgres.password)
    assert wrong not in caplog.text
    assert postgres.password not in caplog.text
    assert "password authentication failed" in caplog.text


async def test_a_row_the_database_refuses_fails_for_good(url: str) -> None:
    """A value PostgreSQL cannot hold in a text column (a NUL in the reviewer's name) is a
    permanent refusal naming the error's class, never the value."""
    async with opened(url) as activities:
        error = await refusal(activities, document(reviewed_by="alice\u0000secret"))
    assert error.type == DOCUMENT_STORE_REJECTED
    assert error.non_retryable
    assert "DataError" in error.message
    assert "secret" not in error.message
