"""The inbox's correction form: built from the run's extraction schema (an input per value of
its type, line items as table rows, values with problems marked and first), read back on the
server into the schema's types (a value that does not parse shows the form again and sends
nothing), previewed as what changes, and sent only once confirmed. Also the list's summary of
what each run works on."""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from aiorch.ops import pipelines
from aiorch.ops.inbox.correction_form import Columns, Input, Scalar, build, entries
from aiorch.ops.inbox.correction_reading import FormErrors, changes, read
from aiorch.ops.inbox.run_requests import fields_schema, summary
from aiorch.ops.inbox.runs import WaitingRun
from tests.support.builders import new_request_id
from tests.unit.test_inbox_pages import (
    SINCE,
    VIEW,
    WORKFLOW_ID,
    csrf,
    hidden_fields,
    log_in,
    make_client,
)
from workflows.data.payloads import DataRequest
from workflows.documents import SCHEMAS
from workflows.documents.payloads import DocumentRequest
from workflows.engine.pipeline import RequestShape
from workflows.payloads import PipelineRequest

INVOICE_SCHEMA = SCHEMAS["invoice"].json_schema()
RUN_PAGE = f"/runs/{WORKFLOW_ID}"
REVIEW = f"/runs/{WORKFLOW_ID}/review"
GLOBEX: dict[str, Any] = {
    "vendor": "Globex",
    "invoice_number": "INV-7",
    "issue_date": "2026-03-01",
    "due_date": None,
    "currency": "EUR",
    "line_items": [
        {"description": "Consulting", "quantity": "3", "unit_price": "450.00", "amount": "1350.00"},
        {"description": "Licence", "quantity": "1", "unit_price": "388.50", "amount": "388.50"},
    ],
    "tax": "330.29",
    "total": "2100.00",
}
PROBLEM = "total: is 2100.00, but the line amounts (1738.50) plus tax (330.29) make 2068.79"
# A schema with an enum and a boolean, as a pipeline file's step output might have.
TRIAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["refund", "shipping", "other"]},
        "urgent": {"type": "boolean"},
        "score": {"type": "integer"},
    },
}


def as_form(fields: dict[str, Any], **changed: str) -> dict[str, str]:
    """The invoice form as a browser posts it unchanged (the blank new row included), with
    ``changed`` inputs (by name without the ``f.`` prefix) typed over."""
    typed = {
        f"f.{name}": "" if value is None else str(value)
        for name, value in fields.items()
        if name != "line_items"
    }
    items = fields["line_items"]
    typed["f.line_items.rows"] = str(len(items) + 1)
    for index, item in enumerate(items):
        typed.update({f"f.line_items.{index}.{k}": str(v) for k, v in item.items()})
    typed.update({f"f.{name}": text for name, text in changed.items()})
    return typed


def test_the_form_follows_the_extraction_schema() -> None:
    """The invoice schema gives one input per scalar of its type (a date, a nullable date, a
    decimal string) and its line items as columns of a table."""
    found = {entry.path: entry.node for entry in entries(INVOICE_SCHEMA, GLOBEX)}
    assert found[("total",)] == Scalar("decimal", description=found[("total",)].description)
    assert isinstance(issue := found[("issue_date",)], Scalar) and issue.kind == "date"
    assert isinstance(due := found[("due_date",)], Scalar) and (due.kind, due.nullable) == (
        "date",
        True,
    )
    lines = found[("line_items",)]
    assert isinstance(lines, Columns)
    assert [column for column, _ in lines.columns] == [
        "description",
        "quantity",
        "unit_price",
        "amount",
    ]


def test_an_unchanged_form_reads_back_as_the_same_fields() -> None:
    """Every value read back to its schema type (decimal strings stay strings, an empty
    nullable date is null): an untouched form gives the run's fields and no change."""
    assert read(INVOICE_SCHEMA, GLOBEX, as_form(GLOBEX)) == GLOBEX
    assert changes(GLOBEX, read(INVOICE_SCHEMA, GLOBEX, as_form(GLOBEX))) == []


def test_a_value_that_does_not_parse_gives_no_fields() -> None:
    """A total that is no number and a date that is no date are errors for those inputs (what
    to write), and the form gives no fields at all."""
    with pytest.raises(FormErrors) as refused:
        read(INVOICE_SCHEMA, GLOBEX, as_form(GLOBEX, total="2,068.79", issue_date="March 1st"))
    assert refused.value.errors == {
        "f.total": "2,068.79 is not a number: write it like 2068.79",
        "f.issue_date": "March 1st is not a date: write it like 2026-03-31",
    }


def test_line_items_are_edited_removed_and_added_as_rows() -> None:
    """A cell changes its item's value; a row marked "remove" is dropped; the blank row, filled
    in, is a new item; each shows in the changes by its path."""
    form = as_form(GLOBEX)
    form["f.line_items.0.amount"] = "1350.50"
    form["f.line_items.1.remove"] = "yes"
    form.update(
        {
            "f.line_items.2.description": "Support",
            "f.line_items.2.quantity": "2",
            "f.line_items.2.unit_price": "10",
            "f.line_items.2.amount": "20",
        }
    )
    corrected = read(INVOICE_SCHEMA, GLOBEX, form)
    assert corrected["line_items"] == [
        {**GLOBEX["line_items"][0], "amount": "1350.50"},
        {"description": "Support", "quantity": "2", "unit_price": "10", "amount": "20"},
    ]
    assert [(c.label, c.before, c.after) for c in changes(GLOBEX, corrected)] == [
        ("line_items[0].amount", "1350.00", "1350.50"),
        ("line_items[1].description", "Licence", "Support"),
        ("line_items[1].quantity", "1", "2"),
        ("line_items[1].unit_price", "388.50", "10"),
        ("line_items[1].amount", "388.50", "20"),
    ]


def test_an_enum_is_a_select_and_reads_back_as_one_of_its_values() -> None:
    """An enum is a select of its values, a boolean a yes/no select, an integer a number: each
    read back to its type, and a value outside the enum is an error."""
    fields = {"category": "refund", "urgent": False, "score": 3}
    form = build(TRIAGE_SCHEMA, fields)
    kinds = {item.label: item.scalar.kind for item in form.items if isinstance(item, Input)}
    assert kinds == {"category": "enum", "urgent": "boolean", "score": "integer"}
    typed = {"f.category": "shipping", "f.urgent": "true", "f.score": "4"}
    assert read(TRIAGE_SCHEMA, fields, typed) == {
        "category": "shipping",
        "urgent": True,
        "score": 4,
    }
    with pytest.raises(FormErrors) as refused:
        read(TRIAGE_SCHEMA, fields, {**typed, "f.category": "refunds"})
    assert refused.value.errors == {"f.category": "refunds is not one of the choices"}


def test_without_a_schema_the_form_follows_the_values() -> None:
    """A run whose pipeline names no schema gets inputs of its values' own types."""
    fields = {"category": "refund", "confidence": 0.9, "items": [{"sku": "A1", "n": 2}]}
    found = {entry.path: entry.node for entry in entries(None, fields)}
    assert found[("category",)] == Scalar("text")
    assert found[("confidence",)] == Scalar("number")
    assert found[("items",)] == Columns((("sku", Scalar("text")), ("n", Scalar("integer"))))


def test_a_nested_object_is_edited_by_path_and_an_absent_one_stays_absent() -> None:
    """A nested object's values are inputs named by their path; left empty where the run has
    no such object (or a null one), the fields stay as they were."""
    schema = {
        "type": "object",
        "properties": {
            "buyer": {"anyOf": [{"$ref": "#/$defs/Party"}, {"type": "null"}]},
            "note": {"type": ["string", "null"]},
        },
        "$defs": {"Party": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    assert [entry.path for entry in entries(schema, {})] == [("buyer", "name"), ("note",)]
    for fields in ({}, {"buyer": None, "note": None}):
        assert read(schema, fields, {"f.buyer.name": "", "f.note": ""}) == fields
    corrected = read(schema, {"buyer": None}, {"f.buyer.name": "Initech", "f.note": "paid"})
    assert corrected == {"buyer": {"name": "Initech"}, "note": "paid"}
    assert [(c.label, c.before, c.after) for c in changes({"buyer": None}, corrected)] == [
        ("buyer", "(none)", '{"name": "Initech"}'),
        ("note", "(none)", "paid"),
    ]


def test_the_list_summary_comes_from_the_request_shape() -> None:
    """A stored document shows as its file name, an LLM run as its message, a run of a
    pipeline that takes no message as its input's first string; only the document pipeline's
    request names an extraction schema."""
    documents, llm = pipelines.named("documents"), pipelines.named("llm")
    stored = DocumentRequest(
        request_id=new_request_id(), document="s3://bucket/inputs/x/March%20invoice.pdf"
    )
    assert summary(documents, stored) == "March invoice.pdf"
    assert fields_schema(documents, stored) == INVOICE_SCHEMA
    asked = PipelineRequest(
        request_id=new_request_id(), user_message="  Summarise our refund policy "
    )
    assert summary(llm, asked) == "Summarise our refund policy"
    assert fields_schema(llm, asked) is None
    data = DataRequest(
        request_id=new_request_id(), input={"n": 1, "body": {"text": "Where is my parcel?"}}
    )
    assert summary(replace(llm, shape=RequestShape()), data) == "Where is my parcel?"


# --- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture
def invoice_inbox(tmp_path: Path) -> Any:
    """The inbox logged in as alice, its one run an invoice with a wrong total."""
    client, tokens, runs, decisions = make_client(tmp_path)
    runs.view_fields, runs.schema, runs.problems = GLOBEX, INVOICE_SCHEMA, [PROBLEM]
    with client:
        log_in(client, tokens["alice"])
        yield client, runs, decisions


def post_form(client: TestClient, **changed: str) -> Any:
    page = client.get(RUN_PAGE).text
    form = {**hidden_fields(page), **as_form(GLOBEX, **changed), "decision": "correct"}
    return client.post(REVIEW, data=form)


def test_the_run_page_marks_the_problem_first_and_every_label_has_its_control(
    invoice_inbox: Any,
) -> None:
    """The total, which has the problem, comes first, marked aria-invalid with the problem
    beside it; every id on the page is unique and every label points at a control."""
    client, _, _ = invoice_inbox
    page = client.get(RUN_PAGE).text
    fieldset = page[page.index('id="correction"') :]
    first = re.search(r'<(?:input|select|textarea)[^>]* id="(field-[^"]+)"', fieldset)
    assert first is not None and first.group(1) == "field-total"
    total = re.search(r'<input [^>]*id="field-total"[^>]*>', page)
    assert total is not None and 'aria-invalid="true"' in total.group(0)
    assert 'aria-describedby="field-total-note"' in total.group(0)
    assert html.escape(PROBLEM.partition(": ")[2], quote=True) in page
    vendor = re.search(r'<input [^>]*id="field-vendor"[^>]*>', page)
    assert vendor is not None and "aria-invalid" not in vendor.group(0)
    ids = re.findall(r' id="([^"]+)"', page)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    controls = set(re.findall(r'<(?:input|select|textarea)[^>]* id="([^"]+)"', page))
    labels = re.findall(r'<label[^>]* for="([^"]+)"', page)
    assert labels and set(labels) <= controls


def test_a_bad_number_shows_the_form_again_and_sends_nothing(invoice_inbox: Any) -> None:
    """A total that is no number: the run's page again (400) with the error beside the total,
    what was typed kept, and no decision sent."""
    client, _, decisions = invoice_inbox
    response = post_form(client, total="20x8", vendor="Globex Ltd")
    assert response.status_code == 400
    assert "1 value(s) do not parse (marked below): nothing was sent." in response.text
    assert "20x8 is not a number: write it like 2068.79" in response.text
    assert re.search(r'id="field-total"[^>]*value="20x8"', response.text)
    assert re.search(r'id="field-vendor"[^>]*value="Globex Ltd"', response.text)
    assert decisions.sent == []


def test_a_correction_is_previewed_then_sent_once_confirmed(invoice_inbox: Any) -> None:
    """Changing the total previews only that change ("total: 2100.00 → 2068.79") and sends
    nothing; the preview's confirmation sends the approval with the corrected fields."""
    client, _, decisions = invoice_inbox
    preview = post_form(client, total="2068.79")
    assert preview.status_code == 200 and decisions.sent == []
    changed = re.findall(
        r"<li><code>(.*?)</code>: <del>(.*?)</del> → <ins>(.*?)</ins></li>", preview.text
    )
    assert changed == [("total", "2100.00", "2068.79")]
    confirm = {**hidden_fields(preview.text), "decision": "correct"}
    assert confirm["confirm"] == "yes" and confirm["review_round"] == "2"
    client.post(REVIEW, data=confirm)
    [(_, decision)] = decisions.sent
    assert decision.decision == "approve"
    assert decision.fields == {**GLOBEX, "total": "2068.79"}


def test_an_unchanged_form_previews_no_change(invoice_inbox: Any) -> None:
    """Submitting the form as it came previews "no change", whose button sends a plain
    approval (no fields)."""
    client, _, decisions = invoice_inbox
    preview = post_form(client)
    assert 'id="no-change"' in preview.text and 'id="changes"' not in preview.text
    client.post(REVIEW, data={**hidden_fields(preview.text), "decision": "approve"})
    [(_, decision)] = decisions.sent
    assert (decision.decision, decision.fields) == ("approve", None)


def test_back_from_the_preview_keeps_the_corrected_values(invoice_inbox: Any) -> None:
    """Going back from the preview shows the run's page with the corrected total filled in,
    in the form and in the advanced JSON box."""
    client, _, decisions = invoice_inbox
    post_form(client, total="2068.79")
    page = client.get(RUN_PAGE).text
    assert re.search(r'id="field-total"[^>]*value="2068.79"', page)
    assert "&#34;total&#34;: &#34;2068.79&#34;" in page
    assert decisions.sent == []


def test_the_advanced_json_box_is_previewed_too(invoice_inbox: Any) -> None:
    """The JSON box (inside "Advanced") previews its fields' changes like the form."""
    client, _, decisions = invoice_inbox
    page = client.get(RUN_PAGE).text
    fields = '{"vendor": "Globex", "total": "2068.79"}'
    preview = client.post(
        REVIEW, data={**hidden_fields(page), "decision": "correct-json", "fields": fields}
    )
    assert "<code>total</code>: <del>2100.00</del> → <ins>2068.79</ins>" in preview.text
    assert "<code>line_items</code>: <del>" in preview.text  # the rows it leaves out
    assert "<ins>(removed)</ins>" in preview.text
    assert decisions.sent == []


def test_the_list_shows_each_runs_summary(tmp_path: Path) -> None:
    """The list's request column shows the run's summary (a document's file name) where there
    is one, else its title."""
    client, tokens, runs, _ = make_client(tmp_path)

    async def waiting(reviewer: str) -> list[WaitingRun]:
        row = WaitingRun(WORKFLOW_ID, "run-1", "await_review", SINCE, 2, VIEW, summary="a.pdf")
        return [row]

    runs.waiting = waiting  # type: ignore[method-assign]
    with client:
        log_in(client, tokens["alice"])
        page = client.get("/").text
    assert '<td class="excerpt request">a.pdf</td>' in page
    assert csrf(page)


def test_a_correction_posted_after_logout_is_kept_as_typed(tmp_path: Path) -> None:
    """A correction form posted after its session ended sends nothing; once alice logs in
    again, the run's page shows the values she typed in the form's inputs."""
    client, tokens, runs, decisions = make_client(tmp_path)
    runs.view_fields, runs.schema, runs.problems = GLOBEX, INVOICE_SCHEMA, [PROBLEM]
    with client:
        log_in(client, tokens["alice"])
        page = client.get(RUN_PAGE).text
        form = {**hidden_fields(page), **as_form(GLOBEX, total="2068.79"), "decision": "correct"}
        client.post("/logout", data={"csrf_token": form["csrf_token"]})
        refused = client.post(REVIEW, data=form)
        assert refused.status_code == 401
        log_in(client, tokens["alice"])
        again = client.get(RUN_PAGE).text
    assert re.search(r'id="field-total"[^>]*value="2068.79"', again)
    assert decisions.sent == []
