"""The correction's pages: the run's page with its correction form (`correction_form`), and
the preview of what a correction changes, which the reviewer confirms before it is sent.

A correction is two posts. The first (the form's "Preview", or the advanced JSON box's) is
read into corrected fields on the server (`correction_reading`): a value that does not parse
shows the run's page again with the error beside it, and nothing is sent; else the preview
lists each value that changes ("total: 2100.00 → 2068.79"), or says nothing changes. Its
confirm button posts the fields as JSON with ``confirm=yes``, which sends the approval; its
"back" link leads to the run's page with the corrected values filled in (a draft).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, Protocol

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.correction_form import PREFIX, CorrectionForm, build
from aiorch.ops.inbox.correction_reading import FormErrors, changes, read
from aiorch.ops.inbox.drafts import DRAFT_KEY, Draft, Drafts
from aiorch.ops.inbox.forms import (
    CORRECT,
    CORRECT_JSON,
    DECISIONS,
    REVIEW_FORM_FIELDS,
    corrected_fields,
    field_text,
    run_path,
)
from aiorch.ops.inbox.pages import Pages
from aiorch.ops.review_views import RunView
from workflows.payloads import MAX_FEEDBACK_CHARS

# What the run's page says above a form whose values do not all parse.
NOT_PARSED: Final = "{count} value(s) do not parse (marked below): nothing was sent."


class SchemaSource(Protocol):
    """Where the inbox finds the JSON Schema a run's fields follow (``runs.RunReader``)."""

    async def fields_schema(self, run: RunView) -> dict[str, Any] | None: ...


class CorrectionPages(Pages):
    """The run's page and the correction's preview, for the inbox's runs and drafts."""

    runs: SchemaSource
    drafts: Drafts
    web_ui_url: Callable[[str], str]

    def keep_draft(
        self, request: Request, form: Any, workflow_id: str, *, stale: bool = False
    ) -> None:
        """Keep what the reviewer typed in ``workflow_id``'s form for its page (``stale``: the
        form was not sent because its session had ended or changed)."""
        fields = form.get("fields")
        typed = _typed(form) if form.get("decision") == CORRECT else None
        request.session[DRAFT_KEY] = self.drafts.keep(
            workflow_id,
            decision=field_text(form, "decision"),
            feedback=field_text(form, "feedback"),
            fields=fields if isinstance(fields, str) else None,
            review_round=field_text(form, "review_round"),
            max_feedback=MAX_FEEDBACK_CHARS,
            stale=stale,
            typed=typed,
        )

    async def run_response(
        self,
        request: Request,
        reviewer: auth.Reviewer,
        run: RunView,
        draft: Draft | None,
        *,
        correction: CorrectionForm | None = None,
        status: int = 200,
    ) -> Response:
        """The run's page: what it shows, and the review form (with the correction form, built
        from the draft's corrected fields when it has them, else from the run's)."""
        view = run.view
        if correction is None and run.waiting and view.corrections and view.fields is not None:
            schema = await self.runs.fields_schema(run)
            typed = draft.typed if draft is not None else None
            fields = view.fields if typed else _draft_fields(draft) or view.fields
            correction = build(schema, fields, view.problems, typed=typed)
        progress = view.review
        return self.page(
            request,
            "run.html",
            status,
            reviewer=reviewer,
            run=run,
            web_ui_url=self.web_ui_url(run.workflow_id),
            decisions=DECISIONS,
            draft=draft,
            correction=correction,
            fields_json=_fields_json(draft, view.fields),
            voted=progress.voted(reviewer.name) if progress is not None else None,
        )

    async def preview(
        self, request: Request, form: Any, reviewer: auth.Reviewer, run: RunView
    ) -> Response:
        """Read a posted correction: the run's page again with what does not parse, or the
        preview of what it changes (nothing is sent either way)."""
        workflow_id, view = run.workflow_id, run.view
        back = RedirectResponse(run_path(workflow_id), status_code=303)
        if not view.corrections or view.fields is None:
            request.session["flash"] = {"level": "error", "text": "This run takes no fields."}
            return back
        schema = await self.runs.fields_schema(run)
        if form.get("decision") == CORRECT_JSON:
            try:
                fields = corrected_fields(form.get("fields"))
            except ValueError as err:
                self.keep_draft(request, form, workflow_id)
                request.session["flash"] = {"level": "error", "text": f"{err} Nothing was sent."}
                return back
        else:
            typed = _typed(form)
            try:
                fields = read(schema, view.fields, typed)
            except FormErrors as err:
                text = NOT_PARSED.format(count=len(err.errors))
                request.session["flash"] = {"level": "error", "text": text}
                return await self.run_response(
                    request,
                    reviewer,
                    run,
                    self._typed_draft(form, workflow_id),
                    correction=build(
                        schema, view.fields, view.problems, typed=typed, errors=err.errors
                    ),
                    status=400,
                )
        fields_json = json.dumps(fields, ensure_ascii=False, indent=2)
        self.keep_draft(request, _with_fields(form, fields_json), workflow_id)  # for "back"
        return self.page(
            request,
            "correction_preview.html",
            reviewer=reviewer,
            workflow_id=workflow_id,
            review_round=field_text(form, "review_round"),
            changes=changes(view.fields, fields),
            fields_json=fields_json,
            feedback=field_text(form, "feedback").strip(),
            hidden={name: field_text(form, name) for name in REVIEW_FORM_FIELDS},
        )

    def _typed_draft(self, form: Any, workflow_id: str) -> Draft:
        """What the reviewer typed besides the fields, to show again on the run's page."""
        return Draft(
            workflow_id=workflow_id,
            decision=field_text(form, "decision"),
            feedback=field_text(form, "feedback"),
            fields=field_text(form, "fields") or None,
            review_round=field_text(form, "review_round"),
            kept_at=self.clock(),
        )


def _typed(form: Any) -> dict[str, str]:
    """The correction form's inputs a form posted, by name."""
    return {
        name: value
        for name, value in form.multi_items()
        if name.startswith(PREFIX) and isinstance(value, str)
    }


def _with_fields(form: Any, fields_json: str) -> FormData:
    """``form`` with its corrected fields as ``fields_json`` (what a draft keeps)."""
    kept = [(name, value) for name, value in form.multi_items() if name != "fields"]
    return FormData([*kept, ("fields", fields_json)])


def _draft_fields(draft: Draft | None) -> dict[str, Any] | None:
    """The corrected fields a draft holds, when they are one JSON object."""
    if draft is None or not draft.fields:
        return None
    try:
        fields = json.loads(draft.fields)
    except json.JSONDecodeError:
        return None
    return fields if isinstance(fields, dict) else None


def _fields_json(draft: Draft | None, fields: dict[str, Any] | None) -> str:
    """The advanced JSON box's text: the draft's, else the run's fields."""
    if draft is not None and draft.fields:
        return draft.fields
    return json.dumps(fields, ensure_ascii=False, indent=2) if fields is not None else ""
