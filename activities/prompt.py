"""The LLM pipeline's plan step, ``fetch_prompt``, and the instructions ``invoke_llm`` adds
when a reply could not be used.

``fetch_prompt`` checks a message by reference (``file://``, ``s3://``: real I/O, so a regular
activity; an inline message's runs it as a local activity), then plans the run with the
engine's rule (`activities.planning.planned`) and the pipeline's prompt
(`workflows.llm.prompt`). The LLM pipeline keeps it rather than ``plan_run``: moving its
inline runs would need a ``workflow.patched`` branch, whose ``TemporalChangeVersion`` upsert
costs every run one more billable action.
"""

from __future__ import annotations

from temporalio import activity

from activities.experiments import NO_ROLLOUTS, Rollouts
from activities.input_loader import InputLoader
from activities.planning import PlanDefaults, planned
from workflows import contract
from workflows.engine.planning import with_prompt
from workflows.llm.prompt import prompt
from workflows.payloads import PromptInput, PromptPlan

CORRECTIVE_INSTRUCTION = (
    "Your previous reply could not be used: it was not a single JSON object of the form "
    '{"content": string, "needs_review": boolean}. Reply again with only that JSON object.'
)
OBJECT_CORRECTIVE_INSTRUCTION = (
    "Your previous reply could not be used: it was not a single JSON object. Reply again with "
    "only the JSON object the instructions describe: no Markdown, no code fences."
)


class PromptActivities:
    """The ``fetch_prompt`` activity, with its loader, the worker's planning defaults and its
    rollouts injected."""

    def __init__(
        self, defaults: PlanDefaults, loader: InputLoader, rollouts: Rollouts = NO_ROLLOUTS
    ) -> None:
        self._defaults = defaults
        self._loader = loader
        self._rollouts = rollouts

    @activity.defn(name=contract.ACTIVITY_FETCH_PROMPT)
    async def fetch_prompt(self, prompt_input: PromptInput) -> PromptPlan:
        """Check a referenced message, build the prompt and resolve every setting the run will
        use."""
        request = prompt_input.request
        if request.is_reference:
            # The document is prepended by invoke_llm; only the context travels in history.
            await self._loader.load(request.user_message)
        plan = await self._rollouts.assigned(
            planned(self._defaults, request, pipeline=contract.PIPELINE_LLM), contract.PIPELINE_LLM
        )
        return with_prompt(plan, PromptPlan, **prompt(request))
