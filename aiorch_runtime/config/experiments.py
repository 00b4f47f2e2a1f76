"""Rollout experiments: each pipeline's (and tenant's) variants and stop rule
(docs/rollouts.md)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.experiments import Experiment, check_experiments, read_experiments


class ExperimentSettings(SettingsSection):
    """The experiments runs are planned under (`Section.EXPERIMENTS`)."""

    SECTION: ClassVar[Section] = Section.EXPERIMENTS

    experiments: Annotated[
        dict[str, Experiment],
        NoDecode,
        SettingDoc(
            Section.EXPERIMENTS,
            default="unset (no experiments: every run as configured)",
            example='{"llm": {"id": "prompt-v2", "variants": [{"name": "A", "weight": 90}, '
            '{"name": "B", "weight": 10, "model": "gpt-4o-mini"}]}}',
        ),
    ] = Field(
        default_factory=dict,
        description="Experiments per pipeline (`llm`, a pipeline file's name) or per pipeline "
        "and tenant (`llm@acme`), JSON or the path of a JSON file: an id, variants with "
        "weights (the first is the control and changes nothing; the others may set `model`, "
        "`temperature`, `system_prompt`, `user_prompt`), a stop rule (`signal`, `margin`, "
        "`min_judged`) and optionally a judge (`name`, `rule`, `sample`) that `experiments "
        "watch` applies to a sample of completed runs. Needs `CAPACITY_STORE_URL`, where "
        "halts are kept. Each run keeps the variant it was planned with.",
    )

    _read_experiments = field_validator("experiments", mode="before")(read_experiments)

    @field_validator("experiments")
    @classmethod
    def _distinct(cls, value: dict[str, Experiment]) -> dict[str, Experiment]:
        check_experiments(value)
        return value
