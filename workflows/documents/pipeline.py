"""The document pipeline (workflow type ``DocumentPipeline``): extract a document's text, have
the model extract its fields as JSON against an extraction schema, validate them (the schema,
then the schema's business rules), route them to a reviewer when validation finds problems or
the plan's review level says always, store them in the SQL store, complete.

A reviewer sees the document's preview, the fields and the problems, and approves, rejects,
asks for a re-analysis with feedback (reedit), or approves with corrected fields, which are
validated again (and go back to a reviewer if they still break a rule).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import json

from temporalio.exceptions import ActivityError, ApplicationError

import workflows.documents.steps as steps
import workflows.engine.reviews as reviews
import workflows.steps.documents as document_steps
import workflows.steps.llm_call as llm_call
from workflows.documents.contract import PIPELINE_DOCUMENTS
from workflows.documents.graph import GRAPH, DocEvent, DocState
from workflows.documents.payloads import (
    DocumentRequest,
    DocumentResult,
    DocumentState,
)
from workflows.documents.schemas import SCHEMAS, schema_named
from workflows.engine.graph import Event
from workflows.engine.pipeline import Context, Pipeline, RequestShape, ReviewSubject
from workflows.payloads import FactValue, FinalState, LlmCallResult, ReviewContent, ReviewSection
from workflows.steps.document_payloads import StoreDocumentInput

Run = Context[DocumentRequest, DocumentState]


def validates_in_task(ctx: Run) -> bool:
    """Validation runs inside the task that got the fields: nothing to show meanwhile."""
    return ctx.run.state == DocState.VALIDATE


async def extract_text(ctx: Run) -> None:
    """Plan the run (once), then extract the document's text: its size, pages and hash, and a
    preview for the reviewer; the text itself stays out of history."""
    run, request = ctx.run, ctx.request
    try:
        if run.plan is None:
            run.plan = await steps.plan(request)
        run.extracted = await document_steps.extract(
            request.request_id, request.document, reference=request.is_reference
        )
    except (ActivityError, ApplicationError) as err:
        # A local activity's failure arrives as the ApplicationError itself, not wrapped.
        await ctx.failed(err)
        return
    if request.is_reference:
        run.plan = run.plan.model_copy(update={"input_sha256": run.extracted.sha256})
    extracted = run.extracted
    ctx.move(
        DocEvent.EXTRACTED,
        detail=f"{extracted.kind}, {extracted.pages} page(s), {extracted.characters} characters",
    )


def analyzed(ctx: Context[DocumentRequest, DocumentState], reply: LlmCallResult) -> None:
    """The model's fields, on to validation."""
    ctx.run.analysis = reply.data
    ctx.move(
        DocEvent.ANALYZED,
        detail=f"fields extracted by {reply.model}",
        answer=reply,
        prompt=ctx.plan.user_prompt,
    )


async def analyze(ctx: Run) -> None:
    """``invoke_llm``: one attempt at the model, asked for the schema's JSON object."""
    schema = schema_named(ctx.request.extraction_schema)
    await llm_call.invoke(ctx, analyzed, output_schema=schema.json_schema())


async def validate(ctx: Run) -> None:
    """Check the model's fields, or the reviewer's corrections, against the schema and its
    rules: valid fields are stored; problems (or, for the model's fields, a plan that always
    asks) go to a reviewer; problems with review turned off fail the run. Valid corrections
    are stored whatever the plan: a reviewer made them."""
    run, plan = ctx.run, ctx.plan
    corrected = run.corrected
    if corrected is not None:
        run.was_corrected, run.corrected = True, None
    report = schema_named(ctx.request.extraction_schema).check(
        corrected if corrected is not None else run.analysis
    )
    run.fields = report.fields if report.fields is not None else (corrected or run.analysis)
    run.problems = list(report.problems)
    found = f"{len(report.problems)} problem(s)" if report.problems else "no problems"
    if report.valid and (plan.review != "always" or corrected is not None):
        ctx.move(DocEvent.VALID, detail=found)
    elif plan.review == "never":
        ctx.move(DocEvent.INVALID, detail=ctx.set_error(f"InvalidDocument: {found}"))
    else:
        reviews.enter(ctx, DocEvent.NEEDS_REVIEW, detail=found)


async def store(ctx: Run) -> None:
    """``store_document``: the fields into the SQL store, keyed by the request id and owned by
    this run chain (a row another chain wrote stays as it was, and the run fails)."""
    run, request = ctx.run, ctx.request
    assert run.fields is not None and run.extracted is not None
    approval = next(
        (e.reviewer for e in reversed(run.history) if e.event in (Event.APPROVE, Event.CORRECT)),
        None,
    )
    run.reviewed_by = approval
    try:
        run.stored = await document_steps.store(
            StoreDocumentInput(
                request_id=request.request_id,
                schema_name=request.extraction_schema,
                fields=run.fields,
                content_sha256=run.extracted.sha256,
                problems=run.problems,
                reviewed_by=approval,
                corrected=run.was_corrected,
            ),
            ctx.plan,
        )
    except ActivityError as err:
        await ctx.failed(err)
        return
    ctx.move(DocEvent.STORED, detail=f"stored in {run.stored.table} ({run.stored.dialect})")


def result(ctx: Run) -> DocumentResult:
    """The run's result once it ended (the engine checks the state is a final one)."""
    run = ctx.run
    state: FinalState = run.state  # type: ignore[assignment]
    return DocumentResult(
        request_id=ctx.request.request_id,
        state=state,
        history=list(run.history),
        extraction_schema=ctx.request.extraction_schema,
        fields=run.fields,
        problems=run.problems,
        reviewed_by=run.reviewed_by,
        corrected=run.was_corrected,
        stored_at=run.stored.stored_at if run.stored else None,
    )


def review_view(ctx: Run) -> ReviewContent:
    """The document's preview, the fields (which a reviewer may correct) and the problems."""
    run, request = ctx.run, ctx.request
    extracted = run.extracted
    sections = []
    if extracted is not None:
        cut = " (start)" if extracted.preview_truncated else ""
        title = f"Document{cut}: {extracted.kind}, {extracted.pages} page(s)"
        sections.append(ReviewSection(title=title, text=extracted.preview, key="document"))
    fields = json.dumps(run.fields, indent=2, sort_keys=True, ensure_ascii=False)
    sections.append(ReviewSection(title="Extracted fields", text=fields, key="fields"))
    problems = [f"{problem.field}: {problem.message}" for problem in run.problems]
    headline = f"{len(problems)} problem(s): {problems[0]}" if problems else "no problems found"
    return ReviewContent(
        title=f"{request.extraction_schema}: {request.document[:160]}",
        headline=headline,
        sections=sections,
        fields=run.fields,
        problems=problems,
        corrections=True,
    )


def subject(ctx: Run) -> ReviewSubject:
    """The fields under review, and what auto-approve rules may read of them: how many problems
    validation found, and each top-level field that holds one value (``fields.total``, a
    decimal string that compares as a number)."""
    run = ctx.run
    facts: dict[str, FactValue] = {"problems": len(run.problems)}
    for name, value in (run.fields or {}).items():
        if value is None or isinstance(value, str | int | float | bool):
            facts[f"fields.{name}"] = value
    return ReviewSubject(fields=run.fields, facts=facts)


PIPELINE = Pipeline(
    name=PIPELINE_DOCUMENTS,
    graph=GRAPH,
    request=DocumentRequest,
    state=DocumentState,
    handlers={
        DocState.EXTRACT_TEXT: extract_text,
        DocState.ANALYZE: analyze,
        DocState.VALIDATE: validate,
        DocState.STORE: store,
    },
    result_model=DocumentResult,
    result=result,
    review_view=review_view,
    in_task=validates_in_task,
    subject=subject,
    facts=("problems", "fields.*"),
    shape=RequestShape(
        message_field="document",
        stores_files=True,
        schema_field="extraction_schema",
        schemas=SCHEMAS,
    ),
    activities="activities.wiring:document_activities",
)
