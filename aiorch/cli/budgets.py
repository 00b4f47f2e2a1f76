"""Spend and budgets: what each tenant spent (``spend``) and an operator's decision on a run
whose next call would cross a budget (``budget``).

Spend comes from the capacity store (``CAPACITY_STORE_URL``), where every worker adds each
call's cost (``LLM_PRICE_TABLE``) to its tenant's total for the UTC day, and the tokens each
tenant's calls used of the rate-limited models (``LLM_RATE_LIMITS``): its share of them, next
to the share its weight (``TENANT_WEIGHTS``) gives it among the tenants that used them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Annotated

import typer
from pydantic import ValidationError
from temporalio.client import Client, WorkflowUpdateFailedError

from aiorch.cli.output import CliError, one_line_errors, out, plain, print_table
from aiorch.cli.session import about_run, run_async
from aiorch.ops.retries import retrying
from aiorch.ops.reviews import current_target, refusal_reason
from aiorch.ops.signing import signing_key_from_settings
from aiorch_runtime.capacity import CapacityStore, CapacityStoreError
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import Settings, load_settings
from workflows import contract
from workflows.payloads import BudgetDecision, BudgetVerdict, RunStatus, describe_validation_error


def parse_day(day: str | None) -> date:
    """``YYYY-MM-DD`` as a date (today, UTC, when None).

    Raises:
        CliError: not a date.
    """
    if day is None:
        return datetime.now(UTC).date()
    try:
        return date.fromisoformat(day)
    except ValueError:
        raise CliError(f"--day {day!r} is not a date (YYYY-MM-DD)") from None


async def spend_report(
    store: CapacityStore, settings: Settings, day: date, tenant: str | None
) -> list[dict[str, object]]:
    """One row per tenant that spent or used a rate-limited model on ``day`` (or just
    ``tenant``): spend, budget, left; weight, the share of the tokens it was due while the
    tenants that used them all waited (``weighted_share``) and the share it used
    (``token_share``), both None when no rate-limited model was used that day."""
    if tenant is not None:
        spent = {tenant: await store.spend(tenant, day)}
    else:
        spent = await store.spend_by_tenant(day)
    tokens = await tokens_by_tenant(store, settings, day)
    weights = {name: settings.tenant_weight(name) for name in tokens}
    names = spent.keys() | (tokens.keys() if tenant is None else set())
    rows: list[dict[str, object]] = []
    for name in sorted(names):
        usd = spent.get(name, 0.0)
        budget = settings.tenant_budget(name)
        rows.append(
            {
                "tenant": name,
                "day": day.isoformat(),
                "spent_usd": round(usd, 6),
                "budget_usd": budget,
                "left_usd": None if budget is None else round(budget - usd, 6),
                "weight": settings.tenant_weight(name),
                "tokens": tokens.get(name, 0),
                "weighted_share": _share(weights, name),
                "token_share": _share(tokens, name),
            }
        )
    return rows


async def tokens_by_tenant(store: CapacityStore, settings: Settings, day: date) -> dict[str, int]:
    """The tokens each tenant's calls used of the rate-limited models on ``day``."""
    used: dict[str, int] = {}
    for model in settings.llm_rate_limits:
        scope = scope_name(settings.openai_base_url, model)
        for name, tokens in (await store.usage(scope, day)).items():
            used[name] = used.get(name, 0) + tokens
    return used


def _share(values: Mapping[str, float], name: str) -> float | None:
    total = sum(values.values())
    return round(values.get(name, 0) / total, 4) if total else None


def _percent(share: object) -> str:
    return "-" if share is None else f"{share:.0%}"


@one_line_errors
def spend(
    tenant: Annotated[str | None, typer.Option(help="only this tenant")] = None,
    day: Annotated[str | None, typer.Option(help="YYYY-MM-DD (UTC); default today")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table")] = False,
) -> None:
    """What each tenant spent on a day (UTC), against its daily budget, and its share of the
    rate-limited models' tokens against the share its weight is due."""
    settings = load_settings()
    when = parse_day(day)
    store = CapacityStore.from_settings(settings)
    if store is None:
        raise CliError("spend is kept in the capacity store: set CAPACITY_STORE_URL")

    async def report() -> list[dict[str, object]]:
        try:
            return await spend_report(store, settings, when, tenant)
        except CapacityStoreError as error:
            raise CliError(str(error)) from None
        finally:
            await store.close()

    rows = asyncio.run(report())
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    if not rows:
        out.print(f"no spend recorded on {when.isoformat()}")
        return
    print_table(
        ("tenant", "spent (USD)", "budget (USD)", "left (USD)", "weight", "share due", "used"),
        [
            (
                plain(row["tenant"]),
                f"{row['spent_usd']:.4f}",
                "-" if row["budget_usd"] is None else f"{row['budget_usd']:.2f}",
                "-" if row["left_usd"] is None else f"{row['left_usd']:.4f}",
                f"{row['weight']:g}",
                _percent(row["weighted_share"]),
                _percent(row["token_share"]),
            )
            for row in rows
        ],
        title=when.isoformat(),
    )


@one_line_errors
def budget(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    decision: Annotated[BudgetVerdict, typer.Argument()],
    operator: Annotated[str, typer.Option(help="who decides (recorded in the run's history)")],
    reason: Annotated[str | None, typer.Option(help="why (recorded)")] = None,
    print_only: Annotated[
        bool,
        typer.Option(
            "--print",
            help="print the signed decision as JSON, for the Temporal CLI or the Web UI to send "
            "(the decide_budget update, or the budget_decision signal), instead of sending it",
        ),
    ] = False,
) -> None:
    """Approve the overspend of a run waiting in await_budget (it goes on), or reject it (it
    fails with BudgetExceeded). With REVIEWER_KEY (or REVIEWER_KEY_FILE) the decision is signed
    for the run: runs planned with reviewer authentication on refuse an unsigned one."""
    try:
        payload = BudgetDecision(decision=decision, operator=operator, reason=reason)
    except ValidationError as error:
        raise CliError(f"invalid decision: {describe_validation_error(error)}") from None

    async def send(client: Client, settings: Settings) -> None:
        with about_run(workflow_id):
            target = await current_target(client, workflow_id)
        signed = payload
        key = signing_key_from_settings(settings)
        if key is not None and target.chain_id is not None:
            signed = key.sign_budget(
                payload,
                workflow_id=workflow_id,
                run_id=target.chain_id,
                now=datetime.now(UTC),
                ttl=timedelta(seconds=settings.review_token_ttl_s),
            )
        if print_only:
            if signed.token is None:
                raise CliError("--print prints a signed decision: set REVIEWER_KEY (or _FILE)")
            typer.echo(signed.model_dump_json(exclude_none=True))
            return
        handle = client.get_workflow_handle(workflow_id, run_id=target.run_id)
        try:
            with about_run(workflow_id):
                status = await retrying(
                    lambda: handle.execute_update(
                        contract.UPDATE_DECIDE_BUDGET,
                        signed,
                        id=f"budget:{workflow_id}:{operator}:{decision}",
                        result_type=RunStatus,
                    )
                )
        except WorkflowUpdateFailedError as error:
            raise CliError(f"decision refused for {workflow_id}: {refusal_reason(error)}") from None
        out.print(plain(f"{workflow_id}: {decision} recorded; the run is in {status.state}"))

    run_async(send)


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    app.command()(spend)
    app.command()(budget)
