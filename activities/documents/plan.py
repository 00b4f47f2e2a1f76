"""``plan_document``: the document pipeline's own plan activity, kept registered only so runs
recorded before ``plan_run`` replay (new runs plan with ``plan_run`` and build the extraction
prompt in workflow code, ``workflows.documents.prompt``). No I/O: it runs as a local activity.
"""

from __future__ import annotations

from temporalio import activity

from activities.planning import PlanDefaults, planned
from workflows.documents.contract import ACTIVITY_PLAN_DOCUMENT, PIPELINE_DOCUMENTS
from workflows.documents.payloads import DocumentPlan, PlanDocumentInput
from workflows.documents.prompt import prompt
from workflows.engine.planning import with_prompt


class DocumentPlanActivities:
    """The ``plan_document`` activity, with the worker's planning defaults injected."""

    def __init__(self, defaults: PlanDefaults) -> None:
        self._defaults = defaults

    @activity.defn(name=ACTIVITY_PLAN_DOCUMENT)
    async def plan_document(self, plan_input: PlanDocumentInput) -> DocumentPlan:
        """The run's plan, for histories recorded before ``plan_run``: the extraction prompt
        for its schema and the worker's settings."""
        request = plan_input.request
        plan = planned(self._defaults, request, pipeline=PIPELINE_DOCUMENTS)
        return with_prompt(plan, DocumentPlan, **prompt(request))
