"""The choices command options offer, checked as they are parsed: any pipeline's name, any
state of any pipeline, any review state (pipeline files' too, read from ``PIPELINES_DIR``
when an option is checked)."""

from __future__ import annotations

from collections.abc import Callable, Collection

import typer

from aiorch.ops import pipelines
from workflows.errors import OrchestratorError


def _one_of(names: Callable[[], Collection[str]], what: str) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        if value is None:
            return value
        try:
            known = names()
        except OrchestratorError as err:  # PIPELINES_DIR unreadable, or a file with a problem
            raise typer.BadParameter(str(err)) from None
        if value not in known:
            raise typer.BadParameter(f"{value!r} is no {what}; one of: {', '.join(known)}")
        return value

    return check


def shown(names: Callable[[], Collection[str]]) -> str:
    """``names`` for a help text: the pipelines written in Python alone when the pipeline
    files cannot be read (the option's check then says why)."""
    try:
        return ", ".join(names())
    except OrchestratorError:
        return "see `aiorch pipeline list`"


state = _one_of(pipelines.all_states, "state")
review_state = _one_of(lambda: sorted(pipelines.review_states()), "review state")
pipeline = _one_of(pipelines.names, "pipeline")
STATE_HELP = "only runs in this state (any pipeline's: " + shown(pipelines.all_states) + ")"
PIPELINE_HELP = "only this pipeline's runs (" + shown(pipelines.names) + ")"
