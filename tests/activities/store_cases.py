"""The document store's behaviour, written once and run against each database: SQLite in
``test_document_store.py``, a real PostgreSQL server in ``test_document_store_postgres.py``.
Each case takes the URL of an empty database and runs ``store_document`` in Temporal's activity
environment, as the worker would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import func, select, text
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.documents.store import StoreActivities, create_store_engine
from activities.documents.table import DOCUMENTS
from workflows.steps.contract import (
    DOCUMENT_STORE_CONFLICT,
    DOCUMENT_STORE_REJECTED,
    DOCUMENT_STORE_UNAVAILABLE,
)
from workflows.steps.document_payloads import Problem, StoreDocumentInput, StoreReceipt

REQUEST_ID = "0123456789abcdef01234567"
FIRST = {"vendor": "ACME", "total": "175.66", "currency": "EUR"}
SECOND = {"vendor": "ACME Supplies Ltd", "total": "175.67", "currency": "EUR"}


def owned(chain: str, *, tenant: str = "acme", **changes: Any) -> StoreDocumentInput:
    """A document written by the run chain ``chain`` of workflow ``REQUEST_ID``."""
    return document(
        workflow_id=REQUEST_ID,
        chain_id=chain,
        tenant=tenant,
        requested_by=f"{tenant}-clerk",
        **changes,
    )


def document(request_id: str = REQUEST_ID, **changes: Any) -> StoreDocumentInput:
    fields: dict[str, Any] = {
        "request_id": request_id,
        "schema_name": "invoice",
        "fields": FIRST,
        "content_sha256": "ab" * 32,
    }
    return StoreDocumentInput.model_validate(fields | changes)


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[StoreActivities]:
    """The activities over a new engine for ``url``, closed afterwards."""
    activities = StoreActivities(create_store_engine(url))
    try:
        yield activities
    finally:
        activities.close()


async def store(activities: StoreActivities, stored: StoreDocumentInput) -> StoreReceipt:
    return await ActivityEnvironment().run(activities.store_document, stored)


def row_count(url: str) -> int:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(DOCUMENTS)).scalar_one())
    finally:
        engine.dispose()


async def refusal(activities: StoreActivities, stored: StoreDocumentInput) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await store(activities, stored)
    return info.value


# ------------------------------------------------------------------------------------ cases


async def storing_twice_leaves_one_row_with_the_last_fields(url: str, dialect: str) -> None:
    async with opened(url) as activities:
        first = await store(activities, document(fields=FIRST))
        problems = [Problem(field="total", message="is 175.66, but ... make 175.67")]
        second = await store(
            activities,
            document(fields=SECOND, problems=problems, reviewed_by="alice", corrected=True),
        )
        row = await activities.fetch(REQUEST_ID)
    assert (first.table, first.dialect, first.request_id) == ("documents", dialect, REQUEST_ID)
    assert second.stored_at > first.stored_at
    assert row_count(url) == 1
    assert row is not None
    assert row.fields == SECOND
    assert row.problems == problems
    assert (row.reviewed_by, row.corrected) == ("alice", True)
    assert (row.pipeline, row.schema_name) == ("DocumentPipeline", "invoice")
    assert row.content_sha256 == "ab" * 32
    assert row.stored_at == second.stored_at


async def concurrent_stores_of_one_request_leave_one_row(url: str) -> None:
    """Two workers (two engines) on a fresh database: both create the table at once, and eight
    writes of one request id race; one row is left, holding one of the written versions."""
    versions = [document(fields={"total": f"{n}.00"}) for n in range(8)]
    async with opened(url) as one, opened(url) as two:
        receipts = await asyncio.gather(
            *(store(one if n % 2 else two, version) for n, version in enumerate(versions))
        )
        row = await one.fetch(REQUEST_ID)
    assert len(receipts) == 8
    assert row_count(url) == 1
    assert row is not None
    assert row.fields in [version.fields for version in versions]


async def documents_are_kept_apart_by_request_id(url: str) -> None:
    async with opened(url) as activities:
        for n in range(5):
            await store(activities, document(request_id=f"{n:024x}", fields={"n": str(n)}))
        rows = [await activities.fetch(f"{n:024x}") for n in range(5)]
        missing = await activities.fetch("f" * 24)
    assert row_count(url) == 5
    assert [row.fields["n"] for row in rows if row] == ["0", "1", "2", "3", "4"]
    assert missing is None


async def any_text_in_the_fields_is_stored(url: str) -> None:
    """Fields hold what a document held: NUL characters, quotes, emoji, other scripts; the
    same on every database."""
    fields = {"vendor": "A\u0000B", "note": 'say "hi" \\ 🧾', "name": "Müller 株式会社"}
    async with opened(url) as activities:
        await store(activities, document(fields=fields))
        row = await activities.fetch(REQUEST_ID)
    assert row is not None
    assert row.fields == fields


async def a_table_of_another_shape_is_refused_for_good(url: str) -> None:
    """A ``documents`` table without our columns is a permanent refusal naming the missing
    columns, not a retry loop."""
    engine = create_store_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE documents (request_id TEXT PRIMARY KEY, body TEXT)"))
    engine.dispose()
    async with opened(url) as activities:
        error = await refusal(activities, document())
    assert error.type == DOCUMENT_STORE_REJECTED
    assert error.non_retryable
    assert "lacks the columns content_sha256, corrected, fields" in error.message
    assert "\n" not in error.message


async def another_chain_never_replaces_a_row(url: str) -> None:
    """Writes under the stored request id from another chain of the same workflow id (a reused
    id), from another pipeline and from another tenant each fail for good with one line naming
    DocumentStoreConflict; the row keeps its fields, owner, tenant and time."""
    async with opened(url) as activities:
        await store(activities, owned("chain-a", fields=FIRST))
        before = await activities.fetch(REQUEST_ID)
        errors = [
            await refusal(activities, owned("chain-b", fields=SECOND)),
            await refusal(activities, owned("chain-c", fields=SECOND, pipeline="SupportTriage")),
            await refusal(activities, owned("chain-d", fields=SECOND, tenant="evil")),
            await refusal(activities, document(workflow_id="other", chain_id="chain-a")),
        ]
        after = await activities.fetch(REQUEST_ID)
    for error in errors:
        assert error.type == DOCUMENT_STORE_CONFLICT
        assert error.non_retryable
        assert "\n" not in error.message
        assert f"request {REQUEST_ID} is stored already" in error.message
        assert "DocumentPipeline, run chain-a" in error.message
    assert before is not None
    assert (before.workflow_id, before.chain_id) == (REQUEST_ID, "chain-a")
    assert (before.tenant, before.requested_by) == ("acme", "acme-clerk")
    assert after == before
    assert row_count(url) == 1


async def the_owning_chain_writes_its_row_again(url: str) -> None:
    """The chain that stored a row (a retry, a continuation, a re-edit) replaces its fields;
    the owner columns stay the first write's."""
    async with opened(url) as activities:
        await store(activities, owned("chain-a", fields=FIRST))
        await store(activities, owned("chain-a", fields=SECOND, reviewed_by="alice"))
        row = await activities.fetch(REQUEST_ID)
    assert row is not None
    assert (row.fields, row.reviewed_by, row.chain_id) == (SECOND, "alice", "chain-a")


async def racing_chains_leave_one_owner(url: str) -> None:
    """Eight chains race to store one request id through two engines: one wins, the row holds
    its fields, and every other write is refused as a conflict (none is lost silently)."""
    chains = [owned(f"chain-{n}", fields={"total": f"{n}.00"}) for n in range(8)]
    async with opened(url) as one, opened(url) as two:
        outcomes = await asyncio.gather(
            *(store(one if n % 2 else two, chain) for n, chain in enumerate(chains)),
            return_exceptions=True,
        )
        row = await one.fetch(REQUEST_ID)
    winners = [chains[n] for n, got in enumerate(outcomes) if isinstance(got, StoreReceipt)]
    losers = [got for got in outcomes if not isinstance(got, StoreReceipt)]
    assert len(winners) == 1
    assert all(
        isinstance(lost, ApplicationError) and lost.type == DOCUMENT_STORE_CONFLICT
        for lost in losers
    )
    assert row is not None
    assert (row.chain_id, row.fields) == (winners[0].chain_id, winners[0].fields)


async def a_table_from_before_owners_is_migrated(url: str) -> None:
    """A documents table of the previous release (no owner columns) with a row in it gets the
    owner columns added: the old row is kept, and no chain may replace it (its owner is
    unknown); a new request is stored with its owner."""
    engine = create_store_engine(url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "CREATE TABLE documents (request_id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, "
                "schema_name TEXT NOT NULL, fields JSON NOT NULL, problems JSON NOT NULL, "
                "reviewed_by TEXT, corrected BOOLEAN NOT NULL, content_sha256 TEXT NOT NULL, "
                "stored_at TIMESTAMP WITH TIME ZONE NOT NULL)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO documents VALUES ('old', 'DocumentPipeline', 'invoice', "
                "'{\"total\": \"1.00\"}', '[]', NULL, false, 'cd', '2026-01-02 03:04:05+00')"
            )
        )
    engine.dispose()
    async with opened(url) as activities:
        error = await refusal(activities, owned("chain-a", request_id="old", fields=SECOND))
        await store(activities, owned("chain-a", fields=FIRST))
        old = await activities.fetch("old")
        new = await activities.fetch(REQUEST_ID)
    assert error.type == DOCUMENT_STORE_CONFLICT
    assert "before rows named their run chain" in error.message
    assert old is not None
    assert (old.fields, old.chain_id, old.tenant) == ({"total": "1.00"}, None, None)
    assert new is not None
    assert (new.chain_id, new.tenant) == ("chain-a", "acme")


def assert_unavailable(error: ApplicationError, *secrets: str) -> None:
    """A retryable DocumentStoreUnavailable on one line that holds none of ``secrets``."""
    assert error.type == DOCUMENT_STORE_UNAVAILABLE
    assert not error.non_retryable
    assert "will be retried" in error.message
    assert "\n" not in error.message
    for secret in secrets:
        assert secret not in error.message
        assert secret not in repr(error)
