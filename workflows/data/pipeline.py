"""A compiled pipeline file as the engine runs it: a ``Pipeline`` whose handlers run each
step's type, whose reviewers see the input and the outputs, and whose result carries every
step's output.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import json
from typing import Any

import workflows.steps.vectors as vectors
from workflows.data.catalog import Compiled, CompiledStep, Run, StepRun, lookup
from workflows.data.payloads import DataPlan, DataRequest, DataResult, DataState
from workflows.engine.pipeline import Handler, Pipeline
from workflows.payloads import FinalState, ReviewContent, ReviewSection, printable

MAX_SHOWN_CHARS = 16 * 1024


def as_pipeline(
    compiled: Compiled, plan: DataPlan | None = None, *, version: str | None = None
) -> Pipeline[DataRequest, DataState]:
    """The engine's pipeline for ``compiled``; ``plan``: the run's plan, settled at its start
    (installed by the first step that runs; a continued run carries its own). ``version``:
    the version it shows without a plan (the operator's tools: a file as it is now)."""
    spec = compiled.spec
    handlers: dict[str, Handler[DataRequest, DataState]] = {
        step_id: _handler(compiled, step, plan)
        for step_id, step in compiled.steps.items()
        if step.type.kind != "review"
    }
    in_task = compiled.in_task
    if plan is not None:
        version = plan.pipeline.label
    return Pipeline(
        name=spec.name,
        graph=compiled.graph,
        request=DataRequest,
        state=DataState,
        handlers=handlers,
        result_model=DataResult,
        result=lambda ctx: result(ctx),
        review_view=lambda ctx: review_view(compiled, ctx),
        compensate=compensate,
        in_task=lambda ctx: ctx.run.state in in_task,
        version=version,
    )


def _handler(
    compiled: Compiled, step: CompiledStep, plan: DataPlan | None
) -> Handler[DataRequest, DataState]:
    run_step = step.type.run
    assert run_step is not None

    async def handle(ctx: Run) -> None:
        if ctx.run.plan is None:
            ctx.run.plan = plan
        await run_step(StepRun(ctx, step, compiled), step.settings)

    return handle


def result(ctx: Run) -> DataResult:
    """The run's result once it ended (the engine checks the state is a final one)."""
    run = ctx.run
    state: FinalState = run.state  # type: ignore[assignment]
    plan = run.plan
    return DataResult(
        request_id=ctx.request.request_id,
        state=state,
        history=list(run.history),
        pipeline=ctx.graph.name,
        version=plan.pipeline.label if plan is not None else "",
        outputs=dict(run.outputs),
        problems=list(run.problems),
        reviewed_by=run.reviewed_by,
        corrected=run.was_corrected,
        stored_at=run.stored.stored_at if run.stored else None,
        embedding_id=run.embedding_id,
    )


async def compensate(ctx: Run) -> str:
    """Undo the run's side effects before it ends cancelled: the vector an embed step wrote.
    (A stored row stays: it is the record of a completed write, as the document pipeline's.)"""
    if ctx.run.embedding_id:
        deleted = await vectors.delete_embedding()
        return f"compensation: deleted {deleted} vector(s)"
    return "no side effects to undo"


def _text(value: Any) -> str:
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    )
    return printable(text, MAX_SHOWN_CHARS)


def review_view(compiled: Compiled, ctx: Run) -> ReviewContent:
    """What a reviewer sees: the paths the review step shows (default: the input and every
    output so far), the fields they may correct (the output the step names), the problems the
    last validation found."""
    run, request = ctx.run, ctx.request
    review_id = compiled.review_states.get(run.state)
    review = compiled.steps[review_id] if review_id is not None else None
    settings = review.settings if review is not None else None
    values = {"input": request.input, "steps": run.outputs}
    sections: list[ReviewSection] = []
    shown = list(getattr(settings, "show", []) or [])
    if shown:
        for path in shown:
            sections.append(
                ReviewSection(
                    title=path, text=_text(lookup(values, tuple(path.split(".")))), key=path
                )
            )
    else:
        sections.append(ReviewSection(title="Input", text=_text(request.input), key="input"))
        for step_id, output in run.outputs.items():
            sections.append(ReviewSection(title=f"Step {step_id}", text=_text(output), key=step_id))
    fields_of = _fields_step(compiled, review) if review is not None else None
    fields = run.outputs.get(fields_of) if fields_of is not None else None
    corrections = review is not None and getattr(settings, "corrections", None) is not None
    problems = [f"{problem.field}: {problem.message}" for problem in run.problems]
    latest = next(reversed(run.outputs.values()), None) if run.outputs else None
    headline = f"{len(problems)} problem(s): {problems[0]}" if problems else _text(latest)[:200]
    plan = run.plan
    version = f" v{plan.pipeline.version}" if plan is not None else ""
    return ReviewContent(
        title=f"{compiled.spec.name}{version}: {request.describe()[:160]}",
        headline=headline,
        sections=sections,
        fields=fields if isinstance(fields, dict) else None,
        problems=problems,
        corrections=corrections and isinstance(fields, dict),
    )


def _fields_step(compiled: Compiled, review: CompiledStep) -> str | None:
    """Whose output a review shows as its fields: the step it names, else the step its
    corrections validate, else the step before it."""
    settings = review.settings
    named = getattr(settings, "fields", None)
    if named is not None:
        return str(named)
    corrections = getattr(settings, "corrections", None)
    target = compiled.steps.get(corrections) if corrections else None
    if target is not None:
        checked = getattr(target.settings, "of", None)
        if checked:
            return str(checked)
        earlier = [s.spec.id for s in compiled.steps.values() if s.index < target.index]
        return earlier[-1] if earlier else None
    earlier = [s.spec.id for s in compiled.steps.values() if s.index < review.index]
    return earlier[-1] if earlier else None
