"""The advisory checks of a pipeline file: its templates, data paths, step references and
schemas, and route cases no value can match. A run's recorded spec is compiled without them,
so a later release's stricter checks never strand a run that started on an older one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workflows.data import route_cases, templates
from workflows.data.catalog import CompiledStep, marked
from workflows.data.compilation import Compilation
from workflows.data.contract import Rule
from workflows.data.json_schemas import schema_problems
from workflows.data.spec import Mark
from workflows.payloads import printable


class AdvisoryChecks(Compilation):
    """The checks ``check`` runs and a workflow's compile leaves out."""

    def _marked(self, steps: Mapping[str, CompiledStep]) -> None:
        for step in steps.values():
            where = ("steps", step.index)
            for loc, mark, value in marked(step.settings):
                path = (*where, *loc)
                if mark == Mark.TEMPLATE:
                    for found in templates.problems(self.env, value, self.field_problem):
                        self.problem(path, found.rule, found.message, found.line)
                elif mark == Mark.PATH:
                    parts = tuple(str(value).split("."))
                    if parts[0] not in templates.ROOTS:
                        self.problem(
                            path, Rule.INVALID_VALUE, "a data path starts with input or steps"
                        )
                        continue
                    message = self.field_problem(parts)
                    if message is not None:
                        self.problem(path, Rule.UNKNOWN_TEMPLATE_FIELD, message)
                elif mark == Mark.STEP:
                    self._target(path, str(value))
                elif mark == Mark.SCHEMA:
                    for inner, message in schema_problems(value):
                        self.problem((*path, *inner), Rule.INVALID_JSON_SCHEMA, message)
            if step.type.routes_on is not None and step.type.routes is not None:
                routes = step.type.routes(step.settings)
                self._route_cases(step, step.type.routes_on(step.settings), routes)

    def _route_cases(self, step: CompiledStep, value: str, routes: Mapping[str, str]) -> None:
        """Name each case of ``step`` that no value at the data path ``value`` can match."""
        schema = self.value_schema(tuple(value.split(".")))
        cases = [case for case in routes if case != "default"]
        unmatched, allowed = route_cases.never_matched(schema, cases)
        for case in unmatched:
            path = self._event_path(("steps", step.index), step.spec, step.settings, case)
            self.problem(path, Rule.UNKNOWN_CASE, route_cases.problem(value, schema, case, allowed))

    def value_schema(self, parts: tuple[str, ...]) -> Any:
        """The JSON Schema of the value at a data path, or None when nothing says."""
        if parts[0] == "input":
            return route_cases.subschema(self.spec.input, parts[1:])
        step_type = self.types.get(parts[1]) if len(parts) > 1 else None
        if step_type is None:
            return None
        return route_cases.subschema(step_type.output(self.settings[parts[1]]), parts[2:])

    def field_problem(self, parts: tuple[str, ...]) -> str | None:
        """Why ``parts`` names nothing a run will have, or None."""
        if parts[0] == "input":
            return _schema_field(self.spec.input, parts[1:], "the input")
        if len(parts) < 2:
            return None
        step_id = parts[1]
        step_type = self.types.get(step_id)
        if step_id not in self.index:
            return f"no step {printable(step_id, 64)!r} to read (steps: {', '.join(self.ids)})"
        if step_type is None:
            return None
        schema = step_type.output(self.settings[step_id])
        if schema is None:
            return f"step {step_id!r} ({step_type.name}) records no output"
        return _schema_field(schema, parts[2:], f"step {step_id!r}'s output")


def _schema_field(schema: Any, parts: tuple[str, ...], what: str) -> str | None:
    current = schema
    walked: list[str] = []
    for part in parts:
        if not isinstance(current, dict):
            return None
        properties = current.get("properties")
        if not isinstance(properties, dict):
            items = current.get("items")
            if part.isdigit() and isinstance(items, dict):
                current = items
                walked.append(part)
                continue
            return None
        if part not in properties:
            shown = ".".join([*walked, part])
            fields = ", ".join(sorted(properties)) or "none"
            return f"{what} has no field {printable(shown, 80)!r} (fields: {fields})"
        current = properties[part]
        walked.append(part)
    return None
