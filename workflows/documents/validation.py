"""Validation of the fields a model extracted: first the schema, then the schema's business rules.

It runs inside the workflow on whatever JSON value the model produced, so it is deterministic
(no clock, no I/O) and never raises: each finding is a `Problem` naming its field by path
(``line_items[2].amount``), and the run sends a document with problems to review instead of
storing it. The business rules compare amounts and dates, which must exist first, so they run
only on a value the schema accepts; a value the schema refuses reports the schema's problems
alone.

A schema's rules live with its model (the invoice's: `workflows.documents.invoice`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import localcontext
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from workflows.payloads import printable
from workflows.steps.document_payloads import MAX_PROBLEMS, Problem

M = TypeVar("M", bound=BaseModel)
Rule = Callable[[M], list[Problem]]

# Enough digits that no product or sum of 18-digit amounts is ever rounded.
_PRECISION: Final = 80
# The path shown for a value that is not an object at all.
WHOLE_DOCUMENT: Final = "(document)"


class ValidationReport(BaseModel):
    """What validation found: the fields in their normal JSON form (decimals as strings, dates as
    ``YYYY-MM-DD``) when the schema accepts them, and every problem, schema problems first."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    fields: dict[str, Any] | None = None
    problems: list[Problem] = []

    @property
    def valid(self) -> bool:
        """True when the fields passed the schema and every rule."""
        return self.fields is not None and not self.problems


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a path: ``("line_items", 2, "amount")`` is
    ``line_items[2].amount``. Names the model made up are cut short."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = printable(str(part), 64)
            path += f".{name}" if path else name
    return path or WHOLE_DOCUMENT


def schema_problems(model: type[M], value: Any) -> tuple[M | None, list[Problem]]:
    """``value`` as ``model``, or None and the schema's problems. Never quotes the value."""
    try:
        return model.model_validate(value), []
    except ValidationError as err:
        return None, [
            Problem(field=field_path(item["loc"]), message=printable(item["msg"], 200))
            for item in err.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]
        ]


def validate(model: type[M], rules: Sequence[Rule[M]], value: Any) -> ValidationReport:
    """Check ``value`` against ``model``, then against each rule (only once the schema holds)."""
    fields, found = schema_problems(model, value)
    if fields is None:
        return ValidationReport(problems=found)
    with localcontext(prec=_PRECISION):
        found = [problem for rule in rules for problem in rule(fields)]
    return ValidationReport(fields=fields.model_dump(mode="json"), problems=found[:MAX_PROBLEMS])
