"""The budget rules the capacity gate (``activities.capacity``) and run planning apply without
the store: which tenants may spend at all, and whether a call fits its run's ceiling."""

from __future__ import annotations

from workflows.payloads import DEFAULT_TENANT, LlmCallInput


def unbudgeted_tenant(tenant: str, budget: float | None, budgets_on: bool) -> str | None:
    """Why a run of ``tenant`` (whose daily budget is ``budget``) may not spend, or None when it
    may: with tenant budgets on, every run spends one (a made-up name gets no budget of its own).
    """
    if budget is not None or not budgets_on:
        return None
    if tenant == DEFAULT_TENANT:
        return (
            "the run names no tenant, and runs without one have no daily budget "
            "(TENANT_BUDGET_DEFAULT_USD): name a tenant that has one (TENANT_BUDGETS_USD)"
        )
    return (
        f"tenant {tenant!r} has no daily budget (TENANT_BUDGETS_USD): with tenant budgets on, "
        "a run names a tenant that has one, or none (TENANT_BUDGET_DEFAULT_USD)"
    )


def over_run_budget(call: LlmCallInput, worst: float | None) -> str | None:
    """Why the call's worst case would cross the run's ceiling, or None when it fits (one run
    makes one call at a time, so its spend so far is exact)."""
    if worst is None or call.budget_usd is None or call.spent_usd + worst <= call.budget_usd:
        return None
    return (
        f"run budget: spent ${call.spent_usd:.4f} of ${call.budget_usd:.4f}; "
        f"the next call may cost up to ${worst:.4f}"
    )
