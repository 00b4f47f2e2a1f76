"""The step types that decide inside the workflow task: ``validate`` (a step's output against
a JSON Schema and declarative rules), ``route`` (on the value at a data path) and ``review``
(the engine's review, with the step's timeouts, reviewers and escalation).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import Field, field_validator

from workflows.data.catalog import StepRun, StepType, lookup, object_schema
from workflows.data.contract import EVENT_PATTERN
from workflows.data.json_schemas import value_problems
from workflows.data.spec import DataPath, Mark, Settings, StateName
from workflows.engine.graph import FAILED
from workflows.payloads import ReviewerName
from workflows.steps.document_payloads import MAX_PROBLEMS, Problem


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


VALIDATE: Final = StepType(
    "validate",
    ValidateSettings,
    validate,
    outcomes=("valid", "problems", "invalid"),
    in_task=True,
    shown=False,
    description="checking the output and its rules",
    defaults={"problems": FAILED, "invalid": FAILED},
    output=lambda settings: object_schema("valid", "problems"),
)

ROUTE: Final = StepType(
    "route",
    RouteSettings,
    route,
    outcomes=_route_outcomes,
    in_task=True,
    shown=False,
    description="choosing the way on",
    routes=_route_targets,
    routes_on=lambda settings: settings.value,
)

REVIEW: Final = StepType(
    "review",
    ReviewSettings,
    None,
    outcomes=_review_outcomes,
    kind="review",
    description="waiting for a reviewer",
)
