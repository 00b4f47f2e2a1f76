"""The choices command options offer, checked as they are parsed: any pipeline's name, any
state of any pipeline, any review state."""

from __future__ import annotations

from collections.abc import Callable, Collection

import typer

from aiorch.ops import pipelines


def _one_of(names: Collection[str], what: str) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        if value is not None and value not in names:
            raise typer.BadParameter(f"{value!r} is no {what}; one of: {', '.join(names)}")
        return value

    return check


STATES = pipelines.all_states()
state = _one_of(STATES, "state")
review_state = _one_of(sorted(pipelines.review_states()), "review state")
pipeline = _one_of(pipelines.names(), "pipeline")
STATE_HELP = "only runs in this state (any pipeline's: " + ", ".join(STATES) + ")"
PIPELINE_HELP = "only this pipeline's runs (" + ", ".join(pipelines.names()) + ")"
