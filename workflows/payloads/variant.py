"""A variant: one change to how a run calls its model (another model, prompt, system prompt,
temperature, or version of a pipeline file). The replay lab's candidate is one, and so is each
arm of a rollout's experiment: both apply it to a run's plan the same way, once, when the run
is planned, so the run's history records what it ran with."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import Field

from workflows.payloads._base import NonBlank, _Strict

__all__ = ["VARIANT_NAME_PATTERN", "Variant"]

VARIANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# The plan fields a variant may set, by the variant's field name.
_PLAN_FIELDS = {
    "model": "model",
    "system_prompt": "system_prompt",
    "user_prompt": "user_prompt",
    "temperature": "temperature",
}
PlanT = TypeVar("PlanT", bound=Any)


class Variant(_Strict):
    """What a variant changes; a field left unset keeps the run's own setting."""

    name: str = Field(default="candidate", pattern=VARIANT_NAME_PATTERN)
    model: NonBlank | None = Field(default=None, max_length=200)
    system_prompt: NonBlank | None = Field(default=None, max_length=64 * 1024)
    user_prompt: NonBlank | None = Field(default=None, max_length=64 * 1024)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    pipeline_version: NonBlank | None = Field(
        default=None, max_length=200, description="A pipeline file's version to run instead"
    )

    @property
    def changes(self) -> dict[str, Any]:
        """The plan fields this variant sets, with their values."""
        return {
            plan_field: getattr(self, name)
            for name, plan_field in _PLAN_FIELDS.items()
            if getattr(self, name) is not None
        }

    def describe(self) -> str:
        """One line naming what it changes (``model=gpt-4o-mini, temperature=0.0``)."""
        changed = [f"{key}={value!r}" for key, value in self.changes.items()]
        if self.pipeline_version is not None:
            changed.append(f"pipeline_version={self.pipeline_version!r}")
        return f"{self.name}: {', '.join(changed) or 'no change'}"

    def applied(self, plan: PlanT) -> PlanT:
        """``plan`` (a ``PromptPlan`` or one of its kind) with this variant's changes."""
        changed: PlanT = plan.model_copy(update=self.changes)
        return changed
