"""How one run is shown (``status``, ``history``): as JSON for scripts, or for a terminal of
any width, where nothing is cut: a state, an event, an id or a link is shown whole or wrapped,
never ended with an ellipsis.

``status`` is one line per field, which the terminal wraps (a wrapped link still copies whole);
``history`` is a table where every state and event fits whole, else aligned lines
(`aiorch.cli.output.print_table`).
"""

from __future__ import annotations

import json
from typing import Any

from aiorch.cli.output import out, plain, print_json, print_table
from workflows.payloads import ReviewProgress, RunStatus

# What `status` shows, in this order (the fields of RunStatus, and what the CLI adds).
STATUS_FIELDS = (
    "pipeline",
    "pipeline_version",
    "state",
    "status",
    "progress",
    "attempts",
    "review_round",
    "review",
    "model",
    "variant",
    "last_error",
    "error_details",
    "reviews_refused",
    "budget_decisions_refused",
    "last_refusal",
    "tenant",
    "cost_usd",
    "batch_id",
    "web_ui",
)
HISTORY_COLUMNS = ("at (UTC)", "from", "to", "event", "attempt", "detail")


def status_document(
    workflow_id: str, status: RunStatus, *, error_details: list[Any], web_ui: str
) -> dict[str, Any]:
    """What ``status --json`` prints: the run's ``status`` query, the details of its last
    failed activity (a model's refusal: its text) and its Web UI link."""
    return {
        "workflow_id": workflow_id,
        **status.model_dump(mode="json"),
        "error_details": error_details,
        "web_ui": web_ui,
    }


def review_line(progress: ReviewProgress) -> str:
    """Where a waiting round stands: ``policy two-of-finance, stage 1 of 2 (group finance): 1
    of 2 approvals: alice``, or the tally alone without a policy."""
    if progress.policy is None:
        return progress.describe()
    group = f" (group {progress.group})" if progress.group else ""
    return (
        f"policy {progress.policy}, stage {progress.stage + 1} of {progress.stages}{group}: "
        f"{progress.describe()}"
    )


def _shown(key: str, value: Any) -> str:
    if value is None or value == []:
        return "-"
    if key == "review":
        return review_line(ReviewProgress.model_validate(value))
    if key == "progress":
        return f"{value}%"
    if key == "cost_usd":
        return f"${value:.4f}"
    if key == "error_details":
        return "\n".join(item if isinstance(item, str) else json.dumps(item) for item in value)
    return str(value)


def print_status(document: dict[str, Any], *, as_json: bool) -> None:
    """``status``'s answer: JSON, or one ``field  value`` line per field."""
    if as_json:
        print_json(json.dumps(document))
        return
    width = max(len(key) for key in STATUS_FIELDS) + 2
    for key in STATUS_FIELDS:
        out.print(plain(f"{key:<{width}}{_shown(key, document[key])}"))


def print_history(workflow_id: str, status: RunStatus, *, as_json: bool) -> None:
    """``history``'s answer: JSON, or the entries as `print_table` shows rows."""
    if as_json:
        document = {
            "workflow_id": workflow_id,
            "state": status.state,
            "history_dropped": status.history_dropped,
            "history": [entry.model_dump(mode="json") for entry in status.history],
        }
        print_json(json.dumps(document))
        return
    print_table(
        HISTORY_COLUMNS,
        [
            (
                entry.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                plain(entry.from_state),
                plain(entry.to_state),
                plain(entry.event),
                str(entry.attempt),
                plain(entry.detail or ""),
            )
            for entry in status.history
        ],
        title=plain(f"{workflow_id}: {status.state}"),
        wrap=("detail",),
    )
