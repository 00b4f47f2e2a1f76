"""The worker's start-up advice on tuning (``aiorch.worker.options.small_cache_warning``)."""

from __future__ import annotations

import pytest

from aiorch.worker.options import small_cache_warning
from aiorch_runtime.config import Settings


@pytest.mark.parametrize("cache", [0, 1, 99])
def test_cache_below_the_task_slots_is_warned_about(cache: int) -> None:
    """A cache smaller than the workflow task slots (0 included) gets a warning that names both
    settings and the cost: replays, and a local fetch cut off by eviction."""
    settings = Settings(worker_max_cached_workflows=cache, worker_max_concurrent_workflow_tasks=100)

    warning = small_cache_warning(settings)

    assert warning is not None
    assert f"WORKER_MAX_CACHED_WORKFLOWS={cache}" in warning
    assert "WORKER_MAX_CONCURRENT_WORKFLOW_TASKS=100" in warning
    assert "local fetch_prompt" in warning


@pytest.mark.parametrize("cache", [100, 1000])
def test_cache_covering_the_task_slots_is_fine(cache: int) -> None:
    """The default (1000 cached runs, 100 task slots) and any cache at least as large as the
    slots start without a warning."""
    settings = Settings(worker_max_cached_workflows=cache, worker_max_concurrent_workflow_tasks=100)

    assert small_cache_warning(settings) is None
