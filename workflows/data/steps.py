"""The step types the engine provides (``CATALOG``): what each takes in a pipeline file and
what it does when a run reaches it.

==========  ===========================================================================
type        what it does (outcomes: the first leads to ``next``)
==========  ===========================================================================
fetch       loads a document (inline text or a file:// / s3:// reference) and checks it:
            ``fetched``; any failure fails the run
extract     extracts a document's text (a PDF's too): ``extracted``; a store that keeps
            failing dead-letters the run, to be redriven
llm         calls the model with a prompt template and, optionally, an output JSON Schema
            (a reply that breaks it is asked for again unless ``repair: false`` leaves it to
            a validate step), a model and a fallback:
            ``answered``, or ``needs_review`` when the reply asks for one and the file routes it
validate    checks a step's output against a JSON Schema and declarative rules: ``valid``,
            ``problems`` (route it to a review), ``invalid`` (problems with review off)
route       leads on by the value at a data path: one outcome per case, else ``default``
review      waits for a human: the engine's review, with the step's timeouts, reviewers and
            escalation; approve leads to ``next``, reedit back to a model step
embed       embeds a rendered text into the vector store: ``embedded``
store       writes the run's fields into the SQL store (the ``documents`` table): ``stored``
notify      tells the operator's webhook a step was reached (ids and the file's text only):
            ``notified``
==========  ===========================================================================

The ``llm`` type lives in ``workflows.data.model_step``, ``validate``, ``route`` and ``review``
in ``workflows.data.check_steps``; the types here start activities of their own.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Final

from pydantic import Field
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.engine.activity_policy as activity_policy
import workflows.steps.documents as document_steps
import workflows.steps.vectors as vectors
from workflows.data import calls, templates
from workflows.data.catalog import Catalog, StepRun, StepType, object_schema
from workflows.data.check_steps import REVIEW, ROUTE, VALIDATE
from workflows.data.model_step import LLM
from workflows.data.payloads import PipelineNotice
from workflows.data.spec import DataPath, Mark, Settings, Template
from workflows.engine.graph import Event
from workflows.payloads import REFERENCE_SCHEMES
from workflows.steps.document_payloads import StoreDocumentInput

# --------------------------------------------------------------------------- fetch, extract


class DocumentSettings(Settings):
    """``fetch`` and ``extract``: where the document is (a path to inline text or to a
    file:// or s3:// reference, such as ``input.document``)."""

    document: DataPath


def document_output(settings: DocumentSettings) -> dict[str, Any]:
    """What ``fetch`` and ``extract`` record: what ``extract_text`` found, and the reference."""
    return object_schema(
        "kind", "characters", "pages", "sha256", "preview", "preview_truncated", "reference"
    )


async def _document(step: StepRun, settings: DocumentSettings, *, fetch: bool) -> None:
    document = step.value_at(settings.document)
    if not isinstance(document, str) or not document.strip():
        await step.fail(f"{settings.document} holds no document (text or a reference)")
        return
    reference = document.startswith(REFERENCE_SCHEMES)
    try:
        # A fetch step tries a few times and fails; an extract step keeps trying, then the
        # run is dead-lettered.
        extracted = await document_steps.extract(
            step.request.request_id,
            document,
            reference=reference,
            retry=activity_policy.FETCH_RETRY if fetch else document_steps.EXTRACT_RETRY,
        )
    except ActivityError as err:
        await step.failed(err)
        return
    output = {**extracted.model_dump(mode="json"), "reference": document if reference else None}
    step.done(
        step.step.type.outcomes_of(settings)[0],
        output=output,
        detail=f"{extracted.kind}, {extracted.pages} page(s), {extracted.characters} characters",
    )


async def fetch(step: StepRun, settings: DocumentSettings) -> None:
    """Load the document and check it can be read."""
    await _document(step, settings, fetch=True)


async def extract(step: StepRun, settings: DocumentSettings) -> None:
    """Extract the document's text: its size, pages, hash and a preview (never the text)."""
    await _document(step, settings, fetch=False)


# ------------------------------------------------------------------------- embed, store


class EmbedSettings(Settings):
    """``embed``: the text to embed (a template)."""

    text: Template


async def embed(step: StepRun, settings: EmbedSettings) -> None:
    """Embed the text and upsert it (a retry overwrites); a cancel that comes too late to
    stop the write is undone by the run's compensation."""
    try:
        text = step.render(settings.text)
    except templates.RenderFailed as err:
        await step.fail(f"step {step.id}: a template failed: {err}")
        return
    try:
        result = await vectors.embed(step.request.request_id, text)
    except ActivityError as err:
        await step.failed(err)
        return
    step.run.embedding_id = result.embedding_id
    step.done(
        "embedded", output=result.model_dump(mode="json"), detail=f"embedding {result.embedding_id}"
    )


class StoreSettings(Settings):
    """``store``: the fields to write, each a data path (default: the input and every
    step's output)."""

    fields: Annotated[dict[str, str] | None, Mark.PATH] = None


def input_digest(value: Any) -> str:
    """The SHA-256 of ``value`` as canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def store(step: StepRun, settings: StoreSettings) -> None:
    """Write the fields into the SQL store under the request id, owned by this run chain (its
    retry overwrites; a row another chain wrote stays as it was, and the step fails)."""
    run, plan = step.run, step.plan
    if settings.fields is None:
        fields = {"input": step.request.input, "steps": dict(run.outputs)}
    else:
        fields = {name: step.value_at(path) for name, path in settings.fields.items()}
    approval = next(
        (e.reviewer for e in reversed(run.history) if e.event in (Event.APPROVE, Event.CORRECT)),
        None,
    )
    run.reviewed_by = approval
    record = plan.pipeline
    try:
        run.stored = await document_steps.store(
            StoreDocumentInput(
                request_id=step.request.request_id,
                schema_name=f"{record.name}@{record.version}",
                fields=fields,
                content_sha256=plan.input_digest or input_digest(step.request.input),
                pipeline=record.name,
                problems=run.problems,
                reviewed_by=approval,
                corrected=run.was_corrected,
            ),
            plan,
        )
    except (ActivityError, ApplicationError) as err:
        await step.failed(err)
        return
    stored = run.stored
    step.done(
        "stored",
        output={
            "table": stored.table,
            "dialect": stored.dialect,
            "stored_at": stored.stored_at.isoformat(),
        },
        detail=f"stored in {stored.table} ({stored.dialect})",
    )


# ------------------------------------------------------------------------------- notify


class NotifySettings(Settings):
    """``notify``: the text sent (the file's own words: no template, so no run content
    reaches the webhook)."""

    message: str = Field(min_length=1, max_length=500)


async def notify(step: StepRun, settings: NotifySettings) -> None:
    """Start the notification and go on (nobody waits for it); without a webhook on the
    worker that planned the run, only go on."""
    plan = step.plan
    if not plan.notify:
        step.done(
            "notified", keep_output=False, detail="no webhook configured (REVIEW_WEBHOOK_URL)"
        )
        return
    info = workflow.info()
    calls.notify(
        PipelineNotice(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            pipeline=plan.pipeline.name,
            version=plan.pipeline.label,
            step=step.id,
            message=settings.message,
        )
    )
    step.done("notified", keep_output=False, detail="webhook notified")


PERMANENT, EXHAUSTED = Event.PERMANENT_ERROR.value, Event.EXHAUSTED.value

CATALOG: Final = Catalog.of(
    StepType(
        "fetch",
        DocumentSettings,
        fetch,
        outcomes=("fetched",),
        failures=(PERMANENT,),
        description="loading the document",
        output=document_output,
    ),
    StepType(
        "extract",
        DocumentSettings,
        extract,
        outcomes=("extracted",),
        failures=(PERMANENT, EXHAUSTED),
        description="loading the document and extracting its text",
        output=document_output,
    ),
    LLM,
    VALIDATE,
    ROUTE,
    REVIEW,
    StepType(
        "embed",
        EmbedSettings,
        embed,
        outcomes=("embedded",),
        failures=(EXHAUSTED,),
        shown=False,
        description="embedding and storing the text",
        output=lambda settings: object_schema("embedding_id", "dimensions"),
    ),
    StepType(
        "store",
        StoreSettings,
        store,
        outcomes=("stored",),
        failures=(PERMANENT, EXHAUSTED),
        shown=False,
        description="storing the fields in the database",
        output=lambda settings: object_schema("table", "dialect", "stored_at"),
    ),
    StepType(
        "notify",
        NotifySettings,
        notify,
        outcomes=("notified",),
        in_task=True,
        shown=False,
        description="notifying the operator's webhook",
    ),
)
"""The engine's step types (module docstring)."""
