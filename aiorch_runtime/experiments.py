"""Rollout experiments (docs/rollouts.md): what the operator configures (``EXPERIMENTS``) and
the choice of a run's variant.

An experiment names, for one pipeline (and optionally one tenant), its variants with their
weights: the first is the control (it changes nothing), the others each a `Variant`. A run's
variant is chosen once, when the run is planned, from a hash of the experiment id and the run's
workflow id: the same id always gets the same variant, and the shares follow the weights. A
halted variant's share goes to the control; a promoted variant gets every run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aiorch_runtime.errors import ConfigError
from workflows.payloads import (
    EXPERIMENT_ID_PATTERN,
    TENANT_PATTERN,
    VARIANT_NAME_PATTERN,
    Assignment,
    Variant,
)

# What the stop rule counts, per ended run (`StopRule`); ``score_fail`` per judged run.
Signal = Literal["problem", "correction", "rejection", "score_fail"]
# The hash's resolution: a weight share is rounded to one in this many runs.
BUCKETS: Final = 10_000


class Arm(Variant):
    """A variant, named, and its share of the experiment's runs (weights are relative)."""

    name: str = Field(pattern=VARIANT_NAME_PATTERN)
    weight: float = Field(ge=0)


class StopRule(BaseModel):
    """When the watcher halts a variant: once ``min_judged`` of its runs have ended, if the
    share of them with a ``signal`` exceeds the control's share by more than ``margin``.

    Signals (each per run, from the ledger): ``problem``, a model reply that could not be used
    or a failed run; ``correction``, a reviewer corrected a field; ``rejection``, a reviewer
    rejected or asked for a reedit; ``score_fail``, the experiment's judge failed it (then
    ``min_judged`` counts the runs the judge judged).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: Signal = "problem"
    margin: float = Field(default=0.2, ge=0, le=1)
    min_judged: int = Field(default=20, ge=1)


class Judge(BaseModel):
    """A rule (the lab's ``--score`` language over the run's own ``fields``, ``text``,
    ``problems``, ``needs_review``) that ``experiments watch`` applies, after the run, to a
    ``sample`` (0 to 1) of the experiment's completed runs; ``name`` labels its judgements."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="rule", pattern=VARIANT_NAME_PATTERN)
    rule: str = Field(min_length=1, max_length=1000)
    sample: float = Field(default=1.0, ge=0, le=1)


class Experiment(BaseModel):
    """One experiment: its id, its variants (the first is the control), its stop rule and
    its judge, if any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=EXPERIMENT_ID_PATTERN)
    variants: list[Arm] = Field(min_length=2, max_length=16)
    stop: StopRule = StopRule()
    judge: Judge | None = None

    @model_validator(mode="after")
    def _sound(self) -> Self:
        names = [arm.name for arm in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names repeat: {', '.join(names)}")
        if self.control.changes or self.control.pipeline_version is not None:
            raise ValueError(
                f"the first variant ({self.control.name}) is the control: it must change nothing"
            )
        if any(arm.pipeline_version is not None for arm in self.variants):
            raise ValueError("a rollout's variant cannot set pipeline_version yet")
        if not sum(arm.weight for arm in self.variants) > 0:
            raise ValueError("the weights add up to 0: give some variant a positive weight")
        if self.stop.signal == "score_fail" and self.judge is None:
            raise ValueError("the stop rule reads score_fail: give the experiment a judge")
        return self

    @property
    def control(self) -> Arm:
        """The first variant: the runs every other variant is compared with."""
        return self.variants[0]

    def arm(self, name: str) -> Arm | None:
        """The variant called ``name``, or None."""
        return next((arm for arm in self.variants if arm.name == name), None)

    def choose(
        self, workflow_id: str, *, halted: Collection[str] = (), promoted: str | None = None
    ) -> Assignment:
        """The variant of the run ``workflow_id``: ``promoted`` when set, else by weight from
        the hash of the experiment id and ``workflow_id``; a ``halted`` variant's runs get the
        control."""
        chosen = self.arm(promoted) if promoted is not None else None
        if chosen is None:
            chosen = self.control
            digest = hashlib.sha256(f"{self.id}\x00{workflow_id}".encode()).digest()
            point = int.from_bytes(digest[:8], "big") % BUCKETS / BUCKETS
            total, reached = sum(arm.weight for arm in self.variants), 0.0
            for arm in self.variants:
                reached += arm.weight / total
                if point < reached:
                    chosen = arm
                    break
        if chosen.name in halted:
            chosen = self.control
        return Assignment(
            experiment=self.id, variant=Variant(**chosen.model_dump(exclude={"weight"}))
        )


def experiment_for(
    experiments: Mapping[str, Experiment], pipeline: str, tenant: str
) -> Experiment | None:
    """The experiment a run of ``pipeline`` for ``tenant`` is planned under: the one keyed
    ``pipeline@tenant``, else the pipeline's, else none."""
    return experiments.get(f"{pipeline}@{tenant}") or experiments.get(pipeline)


def check_pipelines(
    experiments: Mapping[str, Experiment], code: Collection[str], files: Collection[str]
) -> None:
    """Every experiment names a pipeline the worker runs (``code``: its pipelines' short
    names, ``files``: its pipeline files' names), else it would never apply; an experiment on
    a pipeline file changes no prompt, since a file's steps write their own.

    Raises:
        ConfigError: one line naming the key and what is wrong.
    """
    for key, experiment in experiments.items():
        pipeline = key.partition("@")[0]
        if pipeline not in (*code, *files):
            known = ", ".join((*code, *files))
            raise ConfigError(f"EXPERIMENTS: {key!r} names no pipeline of this worker ({known})")
        prompted = [arm.name for arm in experiment.variants if arm.system_prompt or arm.user_prompt]
        if pipeline in files and prompted:
            raise ConfigError(
                f"EXPERIMENTS: {key}: variant {prompted[0]} sets a prompt, and the steps of "
                f"pipeline file {pipeline} write their own: vary model or temperature"
            )


def read_experiments(value: Any) -> Any:
    """``EXPERIMENTS`` as data: JSON text, or the path of a JSON file holding it.

    Raises:
        ValueError: the file cannot be read, or the text is not JSON.
    """
    if not isinstance(value, str):
        return value
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).expanduser().read_text(encoding="utf-8")
        except OSError as err:
            raise ValueError(f"is neither JSON nor a readable file ({err.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at position {err.pos})") from None


def check_experiments(experiments: Mapping[str, Experiment]) -> None:
    """Check the keys (``pipeline`` or ``pipeline@tenant``) and that no experiment id is
    used twice (its halts and its ledger rows are found by it).

    Raises:
        ValueError: a key or an id that breaks these rules.
    """
    seen: dict[str, str] = {}
    for key, experiment in experiments.items():
        pipeline, _, tenant = key.partition("@")
        if not pipeline or (tenant and re.fullmatch(TENANT_PATTERN, tenant) is None):
            raise ValueError(f"{key[:80]!r} is not a pipeline or pipeline@tenant")
        if experiment.id in seen:
            raise ValueError(f"experiment id {experiment.id!r} is used by {seen[experiment.id]}")
        seen[experiment.id] = key
