"""Continue-as-new for long reedit loops: when, what is carried, and how it stays bounded.

Temporal warns at 10,240 events or 10 MB of history and terminates a run at 51,200 events or
50 MB. A reedit loop adds about a dozen events and two history entries per round, and every
update result repeats the run's status (so late rounds weigh more than early ones). A long loop
therefore moves to a fresh run (same workflow id) before its history grows large: after
``PromptPlan.reedit_rounds_per_run`` rounds, once the run's history passes ``CONTINUE_AT_BYTES``
or ``CONTINUE_AT_EVENTS``, or as soon as the server suggests it. It happens at one safe point
only, right after a reedit decision, before the next LLM call; the new run starts in
``invoke_llm`` with the carried state and never repeats ``fetch_prompt``.

What is carried must itself stay far below the 256 KB payload warning, so the oldest history
entries and the oldest reviewer feedback are dropped past fixed budgets. ``RunStatus`` says how
many entries were dropped (``history_dropped``); at the default budget that is only after
several hundred review rounds. Pure functions: deterministic and unit-testable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workflows.payloads import CarriedState, ContinuedRun, HistoryEntry

# Budgets for what a continued run carries (JSON bytes); together well below 256 KB.
CARRIED_HISTORY_MAX_BYTES = 128 * 1024
FEEDBACK_WINDOW_BYTES = 32 * 1024
PATCH_ID = "continue-as-new-reedit-loop"
# Far below Temporal's warnings (10 MB, 10,240 events), checked after every reedit.
CONTINUE_AT_BYTES = 2 * 1024 * 1024
CONTINUE_AT_EVENTS = 2_000


def split_input(raw: Any) -> tuple[Any, CarriedState | None]:
    """The raw request and the carried state, if ``raw`` is a continued run's input.

    Raises:
        pydantic.ValidationError: the input looks like a continued run but is not one.
    """
    if isinstance(raw, dict) and "carried" in raw:
        continued = ContinuedRun.model_validate(raw)
        return continued.request.model_dump(mode="json"), continued.carried
    return raw, None


def is_due(
    *,
    rounds_this_run: int,
    rounds_per_run: int,
    suggested: bool,
    history_bytes: int = 0,
    history_events: int = 0,
) -> bool:
    """True when a reedit loop should move to a fresh run now."""
    return (
        rounds_this_run >= rounds_per_run
        or suggested
        or history_bytes >= CONTINUE_AT_BYTES
        or history_events >= CONTINUE_AT_EVENTS
    )


def bounded_history(
    entries: Sequence[HistoryEntry], max_bytes: int = CARRIED_HISTORY_MAX_BYTES
) -> tuple[list[HistoryEntry], int]:
    """The newest entries that fit ``max_bytes`` of JSON, and how many older ones were dropped."""
    kept: list[HistoryEntry] = []
    used = 0
    for entry in reversed(entries):
        size = len(entry.model_dump_json()) + 1
        if used + size > max_bytes:
            break
        kept.append(entry)
        used += size
    kept.reverse()
    return kept, len(entries) - len(kept)


def bounded_feedback(feedback: Sequence[str], max_bytes: int = FEEDBACK_WINDOW_BYTES) -> list[str]:
    """The newest feedback that fits ``max_bytes`` (UTF-8); older feedback is dropped first.

    The LLM sees every kept item on each call, so this also bounds each call's prompt and
    each ``invoke_llm`` input in history.
    """
    kept: list[str] = []
    used = 0
    for item in reversed(feedback):
        size = len(item.encode("utf-8"))
        if used + size > max_bytes:
            break
        kept.append(item)
        used += size
    kept.reverse()
    return kept
