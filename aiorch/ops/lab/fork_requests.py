"""A fork's request: its original's, under the fork's id, and vouched for as a run's start is.

A start claim is bound to one request, so the original's never vouches for a fork: with
``REQUESTER_KEY`` set the lab signs each fork's request itself (as ``starter.py start`` signs a
run's), naming no requester or tenant of its own (the key's are taken; a fork spends as the
lab's tenant anyway). Workers with start authentication on refuse a fork without one
(``workflows.engine.lab``), so only a holder of a requester key can make forks spend.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiorch.ops import pipelines
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import Settings

# What the fork's request takes from the start claim's key instead of from its original.
_THE_KEYS = ("start_claim", "requested_by", "tenant")


def fork_request(
    request: dict[str, Any],
    workflow_type: str,
    fork_id: str,
    settings: Settings,
    key: SigningKey | None,
) -> dict[str, Any]:
    """The original's ``request`` (of a run of ``workflow_type``) as fork ``fork_id``'s,
    signed with ``key`` (the lab's ``REQUESTER_KEY``, `requester_key_from_settings`) if any."""
    forked = {**request, "request_id": fork_id}
    forked.pop("start_claim", None)
    pipeline = pipelines.of_type(workflow_type)
    if key is None or pipeline is None:
        return forked
    unsigned = {name: value for name, value in forked.items() if name not in _THE_KEYS}
    signed = key.sign_start(
        pipeline.request.model_validate(unsigned),
        workflow_type=workflow_type,
        namespace=settings.temporal_namespace,
        now=datetime.now(UTC),
        ttl=timedelta(seconds=settings.review_token_ttl_s),
    )
    dumped: dict[str, Any] = signed.model_dump(mode="json")
    return dumped
