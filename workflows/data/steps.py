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

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Final

from pydantic import Field, field_validator
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.engine.activity_policy as activity_policy
import workflows.steps.documents as document_steps
import workflows.steps.llm_call as llm_call
import workflows.steps.vectors as vectors
from workflows.data import calls, templates
from workflows.data.catalog import Catalog, StepRun, StepType, lookup
from workflows.data.compiler import value_problems
from workflows.data.contract import EVENT_PATTERN
from workflows.data.payloads import DataPlan, PipelineNotice
from workflows.data.spec import DataPath, Mark, Settings, StateName, Template
from workflows.engine.graph import FAILED, Event
from workflows.engine.pipeline import Context
from workflows.payloads import REFERENCE_SCHEMES, LlmCallResult, ReviewerName
from workflows.steps.document_payloads import MAX_PROBLEMS, Problem, StoreDocumentInput

DEFAULT_SYSTEM: Final = "You are a careful assistant inside an automated pipeline."
REPLY_INSTRUCTION: Final = (
    'Reply with ONLY a JSON object of the form {"content": string, "needs_review": boolean} '
    "and nothing else: no Markdown, no code fences. Set needs_review to true when a human "
    "should check the answer before it is used."
)
OBJECT_INSTRUCTION: Final = (
    "Reply with ONLY one JSON object that follows this JSON Schema, and nothing else: no "
    "Markdown, no code fences, no commentary.\nJSON Schema: "
)


def _object(*fields: str) -> dict[str, Any]:
    """The JSON Schema of an object with ``fields`` (a new one each call: nothing shared)."""
    return {"type": "object", "properties": {name: {} for name in fields}}


def reply_schema() -> dict[str, Any]:
    """What a call without an output schema answers: the contract's reply."""
    return {
        "type": "object",
        "properties": {"content": {"type": "string"}, "needs_review": {"type": "boolean"}},
    }


# --------------------------------------------------------------------------- fetch, extract


class DocumentSettings(Settings):
    """``fetch`` and ``extract``: where the document is (a path to inline text or to a
    file:// or s3:// reference, such as ``input.document``)."""

    document: DataPath


def document_output(settings: DocumentSettings) -> dict[str, Any]:
    """What ``fetch`` and ``extract`` record: what ``extract_text`` found, and the reference."""
    return _object(
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


# ---------------------------------------------------------------------------------- llm


class Fallback(Settings):
    """The model tried after ``after`` failed attempts in a row."""

    model: str = Field(min_length=1, max_length=200)
    after: int = Field(default=2, ge=1, le=100)


class ModelStates(Settings):
    """Names (and descriptions) of a model step's wait states, where a file gives them."""

    retry: StateName | None = None
    capacity: StateName | None = None
    budget: StateName | None = None
    batch: StateName | None = None


class LlmSettings(Settings):
    """``llm``: the prompt (a template), the system prompt (a template), the JSON Schema the
    reply must follow (none: the contract's ``{content, needs_review}``), the model (default:
    the worker's), a fallback model, the temperature, ``repair`` (true: a reply that breaks the
    schema is asked for again with a corrective instruction, within the plan's attempts; false:
    any JSON object is taken as it is, for a validate step and a reviewer to judge), and a
    ``fetch``/``extract`` step whose referenced document the model reads before the prompt."""

    prompt: Template
    system: Annotated[str, Mark.TEMPLATE, Field(max_length=32 * 1024)] = DEFAULT_SYSTEM
    output: Annotated[dict[str, Any] | None, Mark.SCHEMA] = None
    model: str | None = Field(default=None, min_length=1, max_length=200)
    fallback: Fallback | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    repair: bool = True
    document: Annotated[str | None, Mark.STEP] = None
    states: ModelStates | None = None


def _llm_output(settings: LlmSettings) -> dict[str, Any]:
    return settings.output if settings.output is not None else reply_schema()


def _llm_outcomes(settings: LlmSettings) -> tuple[str, ...]:
    return ("answered", "needs_review")


class ModelCall(Context[Any, Any]):
    """The run as the shared model call sees it for one step: the run's plan with this step's
    prompt and model (``plan``), everything else the run's own."""

    def __init__(self, ctx: Context[Any, Any], view: DataPlan) -> None:
        super().__init__(ctx.graph, ctx.request, ctx.run)
        self.view = view

    @property
    def plan(self) -> Any:
        return self.view


async def llm(step: StepRun, settings: LlmSettings) -> None:
    """One attempt at the model (``workflows.steps.llm_call``): its retries, capacity and
    budget waits are the engine's, around this step."""
    plan = step.plan
    try:
        system = step.render(settings.system)
        user = step.render(settings.prompt)
    except templates.RenderFailed as err:
        await step.fail(f"step {step.id}: a template failed: {err}")
        return
    schema = settings.output
    instruction = (
        OBJECT_INSTRUCTION + json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        if schema is not None
        else REPLY_INSTRUCTION
    )
    document = step.run.outputs.get(settings.document) if settings.document else None
    reference = document.get("reference") if isinstance(document, dict) else None
    view = plan.model_copy(
        update={
            "system_prompt": f"{system}\n\n{instruction}",
            "user_prompt": user,
            "model": settings.model or plan.model,
            "fallback_model": settings.fallback.model if settings.fallback else plan.fallback_model,
            "fallback_after": settings.fallback.after if settings.fallback else plan.fallback_after,
            "temperature": plan.temperature
            if settings.temperature is None
            else settings.temperature,
            "input_ref": reference,
            "input_sha256": document.get("sha256")
            if reference and isinstance(document, dict)
            else None,
        }
    )

    # The shared call clears the failure count on any answer; one that breaks the schema
    # counts as one more failure in a row, so the plan's attempts still bound the retries.
    failures_before = step.run.consecutive_failures

    def answered(ctx: Context[Any, Any], reply: LlmCallResult) -> None:
        _answered(step, settings, view, reply, failures_before)

    await llm_call.invoke(ModelCall(step.ctx, view), answered, output_schema=schema)


def _answered(
    step: StepRun, settings: LlmSettings, view: DataPlan, reply: LlmCallResult, failures: int
) -> None:
    run = step.run
    if settings.output is None:
        data: dict[str, Any] = {"content": reply.content, "needs_review": reply.needs_review}
    else:
        data = reply.data or {}
        found = value_problems(settings.output, data) if settings.repair else []
        if found:
            where, message = found[0]
            detail = step.ctx.set_error(
                f"LlmMalformedReply: the reply breaks the output schema ({len(found)} problem(s); "
                f"{where}: {message})"
            )
            # Asked again with a corrective instruction, as a malformed reply is.
            run.consecutive_failures = failures + 1
            run.corrective_next = True
            step.ctx.move(Event.RETRYABLE_ERROR, detail=detail)
            return
    flagged = bool(data.get("needs_review"))
    review = view.review
    outcome = "answered"
    if "needs_review" in step.step.edges and (review == "always" or (review == "auto" and flagged)):
        outcome = "needs_review"
    step.done(
        outcome,
        output=data,
        detail=f"answered by {reply.model}",
        answer=reply,
        prompt=view.user_prompt,
    )


# ----------------------------------------------------------------------------- validate


class RuleSpec(Settings):
    """A declarative rule on a field of the value checked (``field``: its dotted path): it is
    there (``required``), is one of (``in``) or none of (``not_in``) some values, is at least
    ``min`` / at most ``max``, has a length within ``min_length``/``max_length``, or matches
    ``pattern`` (a regular expression, the whole text). ``message`` replaces the default."""

    field: str = Field(min_length=1, max_length=200)
    required: bool = False
    in_: list[Any] | None = Field(default=None, alias="in")
    not_in: list[Any] | None = None
    min: float | None = None
    max: float | None = None
    min_length: int | None = Field(default=None, ge=0)
    max_length: int | None = Field(default=None, ge=0)
    pattern: str | None = Field(default=None, max_length=500)
    message: str | None = Field(default=None, max_length=300)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"not a regular expression: {err}") from None
        return pattern


class ValidateSettings(Settings):
    """``validate``: the step whose output is checked (default: the step before it), a JSON
    Schema it must follow, and declarative rules (checked once the schema holds)."""

    of: Annotated[str | None, Mark.STEP] = None
    schema_: Annotated[dict[str, Any] | None, Mark.SCHEMA] = Field(default=None, alias="schema")
    rules: list[RuleSpec] = Field(default_factory=list, max_length=100)


def rule_problems(rule: RuleSpec, value: Any) -> list[str]:
    """What ``value`` (the field ``rule`` checks; None when it is missing) breaks."""
    if value is None:
        return ["is required"] if rule.required else []
    found = []
    if rule.in_ is not None and value not in rule.in_:
        found.append(f"is not one of {', '.join(map(str, rule.in_))}")
    if rule.not_in is not None and value in rule.not_in:
        found.append("is a value it may not be")
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is not None and rule.min is not None and number < rule.min:
        found.append(f"is below {rule.min:g}")
    if number is not None and rule.max is not None and number > rule.max:
        found.append(f"is above {rule.max:g}")
    sized = value if isinstance(value, str | list | dict) else None
    if sized is not None and rule.min_length is not None and len(sized) < rule.min_length:
        found.append(f"is shorter than {rule.min_length}")
    if sized is not None and rule.max_length is not None and len(sized) > rule.max_length:
        found.append(f"is longer than {rule.max_length}")
    if rule.pattern is not None and not (
        isinstance(value, str) and re.fullmatch(rule.pattern, value)
    ):
        found.append("does not match its pattern")
    if found and rule.message:
        return [rule.message]
    return found


def check_value(settings: ValidateSettings, value: Any) -> list[Problem]:
    """Every problem of ``value``: the schema's first, then (once it holds) the rules'."""
    if settings.schema_ is not None:
        found = value_problems(settings.schema_, value)
        if found:
            return [Problem(field=where, message=message) for where, message in found]
    problems = [
        Problem(field=rule.field, message=message)
        for rule in settings.rules
        for message in rule_problems(rule, lookup(value, tuple(rule.field.split("."))))
    ]
    return problems[:MAX_PROBLEMS]


def _checked_step(step: StepRun, settings: ValidateSettings) -> str:
    if settings.of is not None:
        return settings.of
    earlier = [s.spec.id for s in step.compiled.steps.values() if s.index < step.step.index]
    return earlier[-1] if earlier else step.id


async def validate(step: StepRun, settings: ValidateSettings) -> None:
    """Check the output (or a reviewer's corrections of it): valid output goes on; problems,
    or a plan that always asks, go where ``problems`` leads (a review); problems with review
    turned off take ``invalid`` (to ``failed``, unless routed)."""
    run, plan = step.run, step.plan
    checked = _checked_step(step, settings)
    corrected = run.corrected
    if corrected is not None:
        run.was_corrected, run.corrected = True, None
        run.outputs[checked] = corrected
    problems = check_value(settings, run.outputs.get(checked))
    run.problems = problems
    found = f"{len(problems)} problem(s)" if problems else "no problems"
    output = {"valid": not problems, "problems": [p.model_dump() for p in problems]}
    to_review = step.leads_to_review("problems") if "problems" in step.step.edges else False
    if not problems and not (plan.review == "always" and to_review):
        step.done("valid", output=output, detail=found)
    elif plan.review == "never" or not to_review:
        step.ctx.set_error(f"InvalidOutput: {found} in {checked}")
        step.done("invalid" if plan.review == "never" else "problems", output=output, detail=found)
    else:
        step.done("problems", output=output, detail=found)


# -------------------------------------------------------------------------------- route


class RouteSettings(Settings):
    """``route``: the data path whose value decides, the step each value (``cases``) leads
    to, and where any other value leads (``default``; else the step's ``next``)."""

    value: DataPath
    cases: Annotated[dict[str, str], Mark.STEP] = Field(min_length=1, max_length=50)
    default: Annotated[str | None, Mark.STEP] = None

    @field_validator("cases")
    @classmethod
    def _names(cls, cases: dict[str, str]) -> dict[str, str]:
        for case in cases:
            if case == "default" or not re.fullmatch(EVENT_PATTERN, case):
                raise ValueError(f"case {case[:64]!r} is not a value a case can name")
        return cases


def _route_outcomes(settings: RouteSettings) -> tuple[str, ...]:
    return ("default", *settings.cases)


def _route_targets(settings: RouteSettings) -> dict[str, str]:
    targets = dict(settings.cases)
    if settings.default is not None:
        targets["default"] = settings.default
    return targets


async def route(step: StepRun, settings: RouteSettings) -> None:
    """Lead on by the value (compared as text)."""
    value = step.value_at(settings.value)
    shown = "" if value is None else str(value)
    outcome = shown if shown in settings.cases else "default"
    step.done(outcome, keep_output=False, detail=f"{settings.value} is {shown[:80]!r}")


# ------------------------------------------------------------------------------- review


class ReviewStates(Settings):
    """The name (and description) of a review's escalation state, where a file gives it."""

    escalation: StateName | None = None


class ReviewSettings(Settings):
    """``review``: where a request for changes leads (``reedit``, default: the last model step
    before it), where a rejection leads (default ``failed``), where corrected fields go
    (``corrections``: a validate step; without it a reviewer corrects nothing), whose output a
    reviewer sees as the fields (default: the step that corrections validate, else the one
    before), what else they see (``show``: data paths; default: the input and every output),
    the step's timeouts (default: the worker's), who may review (narrowing the worker's
    reviewers), and the escalation state's name."""

    reedit: Annotated[str | None, Mark.STEP] = None
    reject: Annotated[str | None, Mark.STEP] = None
    corrections: Annotated[str | None, Mark.STEP] = None
    fields: Annotated[str | None, Mark.STEP] = None
    show: Annotated[list[str], Mark.PATH] = Field(default_factory=list, max_length=50)
    timeout_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    escalation_timeout_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    reviewers: list[ReviewerName] | None = Field(default=None, min_length=1, max_length=100)
    states: ReviewStates | None = None


def _review_outcomes(settings: ReviewSettings) -> tuple[str, ...]:
    base = ("approve", "reedit", "reject")
    return (*base, "correct") if settings.corrections is not None else base


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
    StepType(
        "llm",
        LlmSettings,
        llm,
        outcomes=_llm_outcomes,
        failures=(PERMANENT,),
        kind="model",
        description="calling the LLM",
        output=_llm_output,
    ),
    StepType(
        "validate",
        ValidateSettings,
        validate,
        outcomes=("valid", "problems", "invalid"),
        in_task=True,
        shown=False,
        description="checking the output and its rules",
        defaults={"problems": FAILED, "invalid": FAILED},
        output=lambda settings: _object("valid", "problems"),
    ),
    StepType(
        "route",
        RouteSettings,
        route,
        outcomes=_route_outcomes,
        in_task=True,
        shown=False,
        description="choosing the way on",
        routes=_route_targets,
        routes_on=lambda settings: settings.value,
    ),
    StepType(
        "review",
        ReviewSettings,
        None,
        outcomes=_review_outcomes,
        kind="review",
        description="waiting for a reviewer",
    ),
    StepType(
        "embed",
        EmbedSettings,
        embed,
        outcomes=("embedded",),
        failures=(EXHAUSTED,),
        shown=False,
        description="embedding and storing the text",
        output=lambda settings: _object("embedding_id", "dimensions"),
    ),
    StepType(
        "store",
        StoreSettings,
        store,
        outcomes=("stored",),
        failures=(PERMANENT, EXHAUSTED),
        shown=False,
        description="storing the fields in the database",
        output=lambda settings: _object("table", "dialect", "stored_at"),
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
