"""The ``llm`` step type: one attempt at the model with a prompt template and, optionally, an
output JSON Schema (a reply that breaks it is asked for again unless ``repair: false`` leaves it
to a validate step), a model and a fallback. The call, its retries and waits are the shared
model call's (``workflows.steps.llm_call``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

from pydantic import Field

import workflows.steps.llm_call as llm_call
from workflows.data import templates
from workflows.data.catalog import StepRun, StepType
from workflows.data.json_schemas import value_problems
from workflows.data.payloads import DataPlan
from workflows.data.spec import Mark, Settings, StateName, Template
from workflows.engine.graph import Event
from workflows.engine.pipeline import Context
from workflows.payloads import LlmCallResult

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


def reply_schema() -> dict[str, Any]:
    """What a call without an output schema answers: the contract's reply."""
    return {
        "type": "object",
        "properties": {"content": {"type": "string"}, "needs_review": {"type": "boolean"}},
    }


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
    any JSON object is taken as it is, for a validate step and a reviewer to judge), a
    ``fetch``/``extract`` step whose referenced document the model reads before the prompt,
    and the step's priority for its calls (1 most urgent to 5; never more urgent than the
    run's: ``llm_call.step_priority``)."""

    prompt: Template
    system: Annotated[str, Mark.TEMPLATE, Field(max_length=32 * 1024)] = DEFAULT_SYSTEM
    output: Annotated[dict[str, Any] | None, Mark.SCHEMA] = None
    model: str | None = Field(default=None, min_length=1, max_length=200)
    fallback: Fallback | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    repair: bool = True
    document: Annotated[str | None, Mark.STEP] = None
    priority: int | None = Field(default=None, ge=1, le=5)
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

    await llm_call.invoke(
        ModelCall(step.ctx, view), answered, output_schema=schema, priority=settings.priority
    )


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


LLM: Final = StepType(
    "llm",
    LlmSettings,
    llm,
    outcomes=_llm_outcomes,
    failures=(Event.PERMANENT_ERROR.value,),
    kind="model",
    description="calling the LLM",
    output=_llm_output,
)
