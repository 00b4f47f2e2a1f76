"""The canary phase (issue 42): a variant seeded worse is halted by the watcher on its own.

The document pipeline with ``REVIEW_MIN`` and ``DOCUMENT_REVIEW_MIN`` at ``never`` and runs
that ask for no review (a run whose fields break a rule fails, and is judged, instead of
waiting for a reviewer) and one experiment: control ``A`` (the pipeline's model, ``sim-large``)
at weight 90, ``B`` (model ``sim-small``) at 10, a judge ``problems == 0`` on a 20 % sample,
and the stop rule on ``score_fail`` (margin 0.2, 20 judged runs). Every invoice carries
`SEEDS`: the simulator answers a wrong total (a validation problem) in 60 % of B's runs and
5 % of A's.

Each repetition, on a dev server of its own with one worker of ours, a fresh SQLite ledger and
a fresh experiment id: ``ledger follow`` and ``experiments watch`` run as processes beside
runs started at `RATE` a second until the ledger shows B halted, then `TAIL_S` seconds more
(at most ``--canary-n`` runs); once every run ended and reached the ledger, it reads the
halt's row, B's judged runs at the halt, the runs of B started after it, the worker's
``aiorch_experiment_halted`` gauge and ``experiments status``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from datetime import UTC
from typing import Any, Final

from temporalio.client import Client

from aiorch.cli.experiments import WATCH_READY_LINE
from aiorch.devstack.processes import ManagedProcess, free_port, python_env
from aiorch.devstack.servers import start_ledger_follower, start_temporal_dev_server
from aiorch.ops import ledger, pipelines
from aiorch.ops.visibility import start_run
from aiorch_runtime.temporal import AiOrchestratorPlugin
from bench import canary_readings as readings
from bench.report import Check
from bench.stack import PROJECT_ROOT, start_ours
from bench.stats import Figure
from bench.tally import Bench, Tally
from workflows import contract
from workflows.documents.payloads import DocumentRequest

RATE: Final = 8.0
TAIL_S: Final = 20.0
FOLLOW_INTERVAL: Final = "1s"
WATCH_INTERVAL: Final = "2s"
POLL_S: Final = 0.5
A_MODEL: Final = "sim-large"
B_MODEL: Final = "sim-small"
SEEDS: Final = f"[sim:wrong_total=0.6:model={B_MODEL}][sim:wrong_total=0.05:model={A_MODEL}]"
SAMPLE: Final = 0.2
# Issue 42's target.
MAX_JUDGED_AT_HALT: Final = 50


def experiments(experiment_id: str) -> dict[str, Any]:
    """``EXPERIMENTS`` for one repetition (see the module doc)."""
    return {
        "documents": {
            "id": experiment_id,
            "variants": [
                {"name": "A", "weight": 90},
                {"name": "B", "weight": 10, "model": B_MODEL},
            ],
            "judge": {"name": "valid", "rule": "problems == 0", "sample": SAMPLE},
            "stop": {"signal": "score_fail", "margin": 0.2, "min_judged": 20},
        }
    }


def invoice(n: int) -> str:
    """Invoice ``n``, as a document the simulator reads fields off, seeded with `SEEDS`."""
    quantity = n % 9 + 1
    amount = quantity * 250
    return "\n".join(
        [
            f"INVOICE CAN-{n}",
            "Vendor: Canary Supplies Ltd",
            f"Invoice number: CAN-{n}",
            "Issue date: 2026-03-02",
            "Currency: EUR",
            f"Line: Widgets | {quantity} | 2.50 | {amount / 100:.2f}",
            "Tax: 0",
            f"Total: {amount / 100:.2f}",
            SEEDS,
        ]
    )


def _watcher(env: dict[str, str], log_dir: Any) -> ManagedProcess:
    args = [sys.executable, "starter.py", "experiments", "watch", "--interval", WATCH_INTERVAL]
    proc = ManagedProcess("watch", args, log_dir=log_dir, env=python_env(env), cwd=PROJECT_ROOT)
    try:
        proc.wait_for_log_line(re.escape(WATCH_READY_LINE))
    except BaseException:
        proc.stop()
        raise
    return proc


async def _start_runs(
    client: Client, engine: Any, experiment_id: str, limit: int
) -> tuple[dict[str, float], float | None]:
    """Start runs at `RATE` a second, each on the clock, until `TAIL_S` after the ledger
    shows B halted (or ``limit`` runs); returns each run's start (wall clock) and the moment
    the halt was seen."""
    documents = pipelines.named("documents")
    started: dict[str, float] = {}
    tasks: list[asyncio.Task[str]] = []
    seen: float | None = None
    began = last_poll = time.monotonic()
    for n in range(limit):
        request = DocumentRequest(
            request_id=uuid.uuid4().hex[:24], document=invoice(n), review="never"
        )
        started[request.request_id] = time.time()
        tasks.append(
            asyncio.create_task(
                start_run(
                    client, request, task_queue=contract.DEFAULT_TASK_QUEUE, pipeline=documents
                )
            )
        )
        now = time.monotonic()
        if seen is None and now - last_poll >= POLL_S:
            last_poll = now
            halt = await asyncio.to_thread(readings.halt_row, engine, experiment_id, "B")
            if halt is not None:
                seen = time.time()
        if seen is not None and time.time() - seen >= TAIL_S:
            break
        await asyncio.sleep(max(0.0, began + (n + 1) / RATE - time.monotonic()))
    await asyncio.gather(*tasks)
    return started, seen


async def _until_ended(engine: Any, workflow_ids: set[str], timeout_s: float) -> int:
    """Wait until the ledger holds every run ended (``ledger follow`` keeps it); how many
    did not reach it in ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    ended = 0
    while time.monotonic() < deadline:
        ended = await asyncio.to_thread(readings.ended_runs, engine, workflow_ids)
        if ended == len(workflow_ids):
            break
        await asyncio.sleep(1)
    # The watcher's last checks: judging the last runs and its rule after them.
    await asyncio.sleep(5)
    return len(workflow_ids) - ended


async def _repetition(bench: Bench, rep: int) -> dict[str, Any]:
    base = bench.data_dir / "canary" / f"rep-{rep}"
    base.mkdir(parents=True, exist_ok=True)
    experiment_id = f"canary-{rep}-{uuid.uuid4().hex[:6]}"
    config = json.dumps(experiments(experiment_id))
    port = free_port()
    address = f"127.0.0.1:{port}"
    local = bench.stack.local
    metrics_port = free_port()
    url = f"sqlite:///{base / 'ledger.db'}"
    env = {
        **os.environ,
        **local.addresses.env(),
        "TEMPORAL_ADDRESS": address,
        "EXPERIMENTS": config,
        "LEDGER_URL": url,
    }
    server = start_temporal_dev_server(
        port=port, ui_port=None, db_file=base / "temporal.sqlite", log_dir=base / "server"
    )
    processes = [server]
    engine = ledger.open_ledger(url)
    try:
        worker_env = {
            "EXPERIMENTS": config,
            "REVIEW_MIN": "never",
            "DOCUMENT_REVIEW_MIN": "never",
            "DOCUMENT_STORE_URL": f"sqlite:///{base / 'documents.db'}",
            "LLM_MODEL": A_MODEL,
            "LLM_FALLBACK_MODEL": "",
            "METRICS_PORT": str(metrics_port),
        }
        processes.append(start_ours(local, address, f"worker-canary-{rep}", worker_env))
        processes.append(
            start_ledger_follower(env=env, log_dir=base, cwd=PROJECT_ROOT, interval=FOLLOW_INTERVAL)
        )
        processes.append(_watcher(env, base))
        client = await Client.connect(address, plugins=[AiOrchestratorPlugin(bench.settings)])
        began = time.monotonic()
        started, seen = await _start_runs(client, engine, experiment_id, bench.options.canary_n)
        start_s = time.monotonic() - began
        missing = await _until_ended(engine, set(started), bench.options.timeout_s)
        gauge = readings.halted_gauge(f"http://127.0.0.1:{metrics_port}/metrics", experiment_id)
        status = await asyncio.to_thread(readings.experiments_status, env, experiment_id)
        return _figures(engine, experiment_id, started, seen, start_s, missing, gauge, status)
    finally:
        engine.dispose()
        for proc in reversed(processes):
            proc.stop()


def _figures(
    engine: Any,
    experiment_id: str,
    started: dict[str, float],
    seen: float | None,
    start_s: float,
    missing: int,
    gauge: dict[str, float],
    status: list[dict[str, Any]],
) -> dict[str, Any]:
    halt = readings.halt_row(engine, experiment_id, "B")
    shown = {row.get("variant"): row for row in status}
    figures: dict[str, Any] = {
        "experiment": experiment_id,
        "runs": len(started),
        "start_rate": len(started) / start_s if start_s else None,
        "not_in_ledger": missing,
        "runs_by_variant": readings.runs_by_variant(engine, experiment_id),
        "halted": halt is not None,
        "metric_halted": gauge,
        "status": {
            name: {k: row.get(k) for k in ("state", "runs", "scored", "pass_rate")}
            for name, row in shown.items()
        },
    }
    if halt is None:
        return figures
    # The ledger keeps naive UTC.
    halted_at = halt.halted_at.replace(tzinfo=UTC).timestamp()
    b_judged, b_failed = readings.judged_by(engine, experiment_id, "B", halt.halted_at)
    a_judged, a_failed = readings.judged_by(engine, experiment_id, "A", halt.halted_at)
    after = readings.runs_by_variant(engine, experiment_id, after=halt.halted_at)
    figures |= {
        "halt": {
            "halted_at": halt.halted_at.isoformat(),
            "halted_by": halt.halted_by,
            "reason": halt.reason,
        },
        "judged_at_halt": {
            "B": b_judged,
            "B_failed": b_failed,
            "A": a_judged,
            "A_failed": a_failed,
        },
        "runs_after_halt": after,
        "halt_seen_after_s": None if seen is None else seen - halted_at,
    }
    return figures


async def run_canary(bench: Bench) -> dict[str, Any]:
    """The whole phase (see the module doc); plain data for the report."""
    reps: list[dict[str, Any]] = []
    for rep in range(bench.options.reps):
        reps.append(await _repetition(bench, rep))
        bench.log(f"canary {rep + 1}/{bench.options.reps}: {_line(reps[-1])}")
    return {"rate": RATE, "sample": SAMPLE, "seeds": SEEDS, "reps": reps}


def _line(rep: dict[str, Any]) -> str:
    if not rep["halted"]:
        return f"B not halted in {rep['runs']} runs ({rep['runs_by_variant']})"
    judged, after = rep["judged_at_halt"], rep["runs_after_halt"]
    return (
        f"B halted at {judged['B']} judged runs of B ({judged['B_failed']} failed; A "
        f"{judged['A_failed']}/{judged['A']}); after the halt {after.get('B', 0)} runs of B, "
        f"{after.get('A', 0)} of A; {rep['runs']} runs at {rep['start_rate']:.1f}/s"
    )


def _range(figure: Figure) -> str:
    return f"{figure.median:g} [{figure.min:g}-{figure.max:g}]"


def check_canary(bench: Bench, measured: dict[str, Any], tally: Tally) -> None:
    """Record the phase's figures (medians and ranges over the repetitions) and judge them
    against issue 42's acceptance: B halted within 50 judged runs of B, no run of B started
    after the halt, and the halt in the ledger, the metric and ``experiments status``."""
    tally.report["canary"] = measured
    reps = measured["reps"]
    halted = [rep for rep in reps if rep["halted"]]
    tally.lost += sum(rep["not_in_ledger"] for rep in reps)
    judged = Figure.of([rep["judged_at_halt"]["B"] for rep in halted] or [float("nan")])
    after_b = Figure.of([rep["runs_after_halt"].get("B", 0) for rep in halted] or [float("nan")])
    runs = Figure.of([rep["runs"] for rep in reps])
    measured["figures"] = {
        "judged_b_at_halt": judged.as_dict(),
        "b_runs_after_halt": after_b.as_dict(),
        "runs": runs.as_dict(),
    }
    shown = all(
        rep["halt"]["halted_by"] == "watcher"
        and rep["metric_halted"].get("B") == 1
        and rep["metric_halted"].get("A") == 0
        and rep["status"].get("B", {}).get("state") == "halted"
        for rep in halted
    )
    tally.extra.append(
        (
            f"canary, 10% B seeded 60% wrong vs 5%, {SAMPLE:.0%} judged",
            f"halted {len(halted)}/{len(reps)}",
            f"judged B at halt {_range(judged)}",
            f"B after halt {_range(after_b)}, runs {_range(runs)}",
        )
    )
    tally.checks += [
        Check(
            "canary: B halted, judged runs of B at the halt",
            f"{len(halted)}/{len(reps)}, {_range(judged)}",
            f"all, <= {MAX_JUDGED_AT_HALT}",
            len(halted) == len(reps) and judged.max <= MAX_JUDGED_AT_HALT,
        ),
        Check(
            "canary: runs of B started after the halt",
            _range(after_b),
            "0",
            len(halted) == len(reps) and after_b.max == 0,
        ),
        Check(
            "canary: the halt in the ledger, the metric and experiments status",
            "yes" if shown and halted else "no",
            "yes",
            bool(halted) and shown,
        ),
    ]
