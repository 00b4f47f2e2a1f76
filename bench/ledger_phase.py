"""The ledger phase (issue 41): ``ledger sync`` over a mixed fleet, then ``ledger follow``
behind a steady stream of runs.

On a dev server of its own (so the sync lists this phase's runs only) with a worker of ours
that also runs the support-triage pipeline file:

1. ``--ledger-n`` runs of the mix in `bench.ledger_fleet.KINDS`, driven until all have closed;
2. one ``sync`` into a fresh SQLite ledger: every run the server lists is a row once, and its
   model calls are as many as its history schedules; then a second ``sync``, which must read
   no history and change no row (the tables' digest before and after);
3. ``starter.py ledger follow --interval 1s`` as a process of its own, while runs start at
   `RATE` per second for ``--ledger-stream-s`` seconds: each run's lag is the moment the
   ledger first holds it closed less the moment it closed; the follower keeps up when every
   run arrives and the lag does not grow (the last tenth's median within a few intervals).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import Engine, func, select
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aiorch.devstack.processes import free_port
from aiorch.devstack.servers import start_ledger_follower, start_temporal_dev_server
from aiorch.ops import ledger, pipelines
from aiorch.ops.ledger import _schema as schema
from aiorch.ops.visibility import runs_query
from aiorch_runtime.temporal import AiOrchestratorPlugin
from bench.ledger_fleet import drive, pipeline_folder, start_fleet, stream
from bench.procstat import cpu_seconds
from bench.report import Check
from bench.stack import PROJECT_ROOT, start_ours
from bench.tally import Bench, Tally
from workflows import contract

RATE: Final = 20.0
FOLLOW_INTERVAL: Final = "1s"
POLL_S: Final = 0.25
# Keeping up: the lag of the stream's last runs stays within a few intervals (a follower that
# falls behind ends with a lag that grew through the whole stream).
MAX_TAIL_LAG_S: Final = 5.0
MODEL_ACTIVITIES: Final = {contract.ACTIVITY_INVOKE_LLM, contract.ACTIVITY_AWAIT_BATCH}


async def _history_counts(client: Client) -> tuple[dict[str, int], int]:
    """Every run the server lists, with the model calls its history schedules; and the sum."""
    calls: dict[str, int] = {}
    gate = asyncio.Semaphore(16)

    async def one(workflow_id: str, run_id: str) -> None:
        async with gate:
            handle = client.get_workflow_handle(workflow_id, run_id=run_id)
            events = (await handle.fetch_history()).events
        calls[run_id] = sum(
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name
            in MODEL_ACTIVITIES
            for event in events
        )

    listed = [(e.id, e.run_id) async for e in client.list_workflows(runs_query())]
    await asyncio.gather(*(one(workflow_id, run_id) for workflow_id, run_id in listed))
    return calls, sum(calls.values())


def _ledger_calls(engine: Engine) -> dict[str, int]:
    calls = schema.model_calls
    with engine.connect() as connection:
        rows = connection.execute(select(calls.c.run_id, func.count()).group_by(calls.c.run_id))
        return {run_id: n for run_id, n in rows}


def _ledger_run_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(select(schema.runs.c.run_id)).scalars())


async def _sync_fleet(bench: Bench, client: Client, url: str) -> dict[str, Any]:
    """Steps 1 and 2 of the module doc."""
    n, log = bench.options.ledger_n, bench.log
    fleet = await start_fleet(client, n)
    signer = bench.stack.local.reviewer_key.signer()
    driven_s = await drive(client, fleet, signer, bench.options.timeout_s)
    log(f"ledger: {n} mixed runs closed in {driven_s:.0f}s ({fleet.kinds()})")
    await asyncio.sleep(2)  # visibility shows a close a moment after it
    engine = ledger.open_ledger(url)
    began = time.monotonic()
    first = await ledger.sync(client, engine)
    first_s = time.monotonic() - began
    counts, digest = ledger.contents(engine)
    began = time.monotonic()
    second = await ledger.sync(client, engine)
    second_s = time.monotonic() - began
    counts_after, digest_after = ledger.contents(engine)
    history_calls, total_calls = await _history_counts(client)
    ledger_calls = _ledger_calls(engine)
    runs_once = _ledger_run_ids(engine) == set(history_calls)
    calls_match = all(ledger_calls.get(r, 0) == c for r, c in history_calls.items())
    log(
        f"ledger: sync {first.describe()} in {first_s:.1f}s; "
        f"again {second.describe()} in {second_s:.2f}s"
    )
    engine.dispose()
    return {
        "n": n,
        "kinds": fleet.kinds(),
        "drive_s": driven_s,
        "first_sync": {"s": first_s, "listed": first.listed, "projected": first.projected},
        "second_sync": {"s": second_s, "listed": second.listed, "projected": second.projected},
        "rows": counts,
        "runs_listed": len(history_calls),
        "workflow_ids": sorted(fleet.every),
        "runs_once": runs_once,
        "model_calls_in_histories": total_calls,
        "model_calls_match": calls_match,
        "unreadable": len(first.failed) + len(second.failed),
        "second_sync_unchanged": digest == digest_after and counts == counts_after,
    }


def _closed_in_ledger(engine: Engine, known: set[str]) -> dict[str, datetime]:
    """The close time of every closed run in the ledger but those of ``known``."""
    runs = schema.runs
    with engine.connect() as connection:
        rows = connection.execute(
            select(runs.c.workflow_id, runs.c.ended_at).where(runs.c.status != "running")
        )
        return {w: ended for w, ended in rows if w not in known and ended is not None}


async def _watch_lag(
    engine: Engine,
    known: set[str],
    expected: int,
    lags: dict[str, float],
    ends: dict[str, datetime],
    deadline: float,
) -> None:
    """Note each new run's lag (and close) the first time the ledger holds it closed, until
    ``expected`` runs have one or ``deadline`` (monotonic) passes."""
    while len(lags) < expected and time.monotonic() < deadline:
        try:
            closed = await asyncio.to_thread(_closed_in_ledger, engine, known)
        except Exception:  # busy writing: look again
            closed = {}
        now = datetime.now(UTC).replace(tzinfo=None)
        for workflow_id, ended in closed.items():
            if workflow_id not in lags:
                lags[workflow_id] = (now - ended).total_seconds()
                ends[workflow_id] = ended
        await asyncio.sleep(POLL_S)


async def _follow_stream(
    bench: Bench, client: Client, env: dict[str, str], known: set[str]
) -> dict[str, Any]:
    """Step 3 of the module doc."""
    seconds, log = bench.options.ledger_stream_s, bench.log
    follower = start_ledger_follower(
        env=env, log_dir=bench.data_dir / "ledger", cwd=PROJECT_ROOT, interval=FOLLOW_INTERVAL
    )
    engine = ledger.engine_for(env["LEDGER_URL"])
    try:
        await asyncio.sleep(3)  # its first sync (the fleet above, unchanged) is behind it
        cpu_before, began = cpu_seconds(follower.pid), time.monotonic()
        lags: dict[str, float] = {}
        ends: dict[str, datetime] = {}
        expected = int(RATE * seconds)
        deadline = time.monotonic() + seconds + bench.options.timeout_s
        (started_ids, kinds, started_s), _ = await asyncio.gather(
            stream(client, RATE, seconds), _watch_lag(engine, known, expected, lags, ends, deadline)
        )
        cpu = cpu_seconds(follower.pid) - cpu_before
        wall = time.monotonic() - began
    finally:
        follower.stop(timeout=60)
        engine.dispose()
    values = sorted(lags.values())
    tail = [lags[w] for w in started_ids[-max(1, len(started_ids) // 10) :] if w in lags]
    lag = {
        "median": statistics.median(values) if values else None,
        "min": values[0] if values else None,
        "max": values[-1] if values else None,
        "last_tenth_median": statistics.median(tail) if tail else None,
    }
    span = (max(ends.values()) - min(ends.values())).total_seconds() if len(ends) > 1 else 0.0
    # How fast the worker closed them (the follower can record a run only once it closed).
    closed_per_s = len(ends) / span if span > 0 else None
    figures: dict[str, Any] = {
        "rate": RATE,
        "seconds": seconds,
        "started": len(started_ids),
        "start_rate": len(started_ids) / started_s,
        "kinds": dict(kinds),
        "arrived": len(lags),
        "closed_per_s": closed_per_s,
        "lag_s": lag,
        "follower_cpu_share": cpu / wall,
        "follower_exit": follower.returncode,
        "interval": FOLLOW_INTERVAL,
    }
    log(
        f"ledger follow at {figures['start_rate']:.1f} runs/s: {len(lags)}/{expected} arrived, "
        f"lag median {_seconds(lag['median'])}s [{_seconds(lag['min'])}..{_seconds(lag['max'])}], "
        f"follower CPU {figures['follower_cpu_share']:.0%}; "
        f"worker closed {_seconds(closed_per_s)}/s"
    )
    return figures


async def run_ledger(bench: Bench) -> dict[str, Any]:
    """The whole phase (see the module doc); plain data for the report."""
    base = bench.data_dir / "ledger"
    base.mkdir(parents=True, exist_ok=True)
    folder = pipeline_folder(base)
    before = os.environ.get("PIPELINES_DIR")
    os.environ["PIPELINES_DIR"] = str(folder)  # so this process knows the pipeline file too
    pipelines.reload()
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = start_temporal_dev_server(
        port=port, ui_port=None, db_file=base / "temporal.sqlite", log_dir=base / "server"
    )
    local = bench.stack.local
    worker = start_ours(local, address, "worker-ledger", {"PIPELINES_DIR": str(folder)})
    url = f"sqlite:///{base / 'ledger.db'}"
    env = {
        **os.environ,
        **local.addresses.env(),
        "TEMPORAL_ADDRESS": address,
        "PIPELINES_DIR": str(folder),
        "LEDGER_URL": url,
    }
    try:
        client = await Client.connect(address, plugins=[AiOrchestratorPlugin(bench.settings)])
        synced = await _sync_fleet(bench, client, url)
        known = set(synced.pop("workflow_ids"))
        followed = await _follow_stream(bench, client, env, known)
    finally:
        worker.stop()
        server.stop()
        if before is None:
            os.environ.pop("PIPELINES_DIR", None)
        else:
            os.environ["PIPELINES_DIR"] = before
        pipelines.reload()
    return {"sync": synced, "follow": followed}


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def check_ledger(bench: Bench, measured: dict[str, Any], tally: Tally) -> None:
    """Record the phase's figures, and judge what the issue asks of the ledger: every run once,
    a second sync that changes nothing, and a follower that keeps up with 20 runs/s."""
    tally.report["ledger"] = measured
    synced, followed = measured["sync"], measured["follow"]
    lag = followed["lag_s"]
    first, second = synced["first_sync"], synced["second_sync"]
    tally.extra += [
        (
            f"ledger sync, {synced['n']} mixed runs ({synced['runs_listed']} Temporal runs)",
            f"first {first['s']:.1f}s ({first['projected']} read)",
            f"again {second['s']:.2f}s ({second['projected']} read)",
            f"rows {sum(synced['rows'].values())}",
        ),
        (
            f"ledger follow --interval {followed['interval']} at {followed['rate']:.0f} runs/s",
            f"lag median {_seconds(lag['median'])}s "
            f"[{_seconds(lag['min'])}..{_seconds(lag['max'])}]",
            f"last tenth {_seconds(lag['last_tenth_median'])}s",
            f"follower CPU {followed['follower_cpu_share']:.0%}",
        ),
    ]
    kept_up = (
        followed["arrived"] == followed["started"]
        and lag["last_tenth_median"] is not None
        and lag["last_tenth_median"] <= MAX_TAIL_LAG_S
    )
    tally.checks += [
        Check(
            "ledger: every run once, model calls as in the histories",
            f"{synced['runs_listed']} runs, {synced['model_calls_in_histories']} calls",
            "all, once",
            synced["runs_once"] and synced["model_calls_match"] and not synced["unreadable"],
        ),
        Check(
            "ledger: a second sync reads nothing and changes nothing",
            f"{second['projected']} read",
            "0, rows unchanged",
            second["projected"] == 0 and synced["second_sync_unchanged"],
        ),
        Check(
            f"ledger follow keeps up with {followed['rate']:.0f} runs/s (lag, last tenth)",
            f"{followed['arrived']}/{followed['started']}, {_seconds(lag['last_tenth_median'])}s",
            f"all, <= {MAX_TAIL_LAG_S:.0f}s",
            kept_up,
        ),
    ]
