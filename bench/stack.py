"""The processes a bench run measures: one dev server (WAL), the LLM simulator, SQS, and a worker
for ours and one for the baseline; plus, for the SQLite phase, two fresh dev servers (WAL and
SQLite's default settings), each with its own workers.

Every process is started here, on 127.0.0.1 and free ports, and stopped by PID (its process
group) on exit, failures included.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_temporal_dev_server, start_worker
from aiorch.devstack.stack import LocalStack
from bench.baseline_worker import READY_LINE as BASELINE_READY_LINE
from bench.server_metrics import find_metrics_url

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def worker_env(stack: LocalStack, temporal_address: str, name: str) -> dict[str, str]:
    """The environment of a bench worker: the stack's addresses, a metrics port and a vector
    store of its own (embedded Qdrant allows one process per path)."""
    return {
        **stack.addresses.env(),
        "TEMPORAL_ADDRESS": temporal_address,
        "METRICS_PORT": str(free_port()),
        "VECTOR_STORE_PATH": str(stack.data_dir / f"vectors-{name}"),
        # Nothing leaves the machine, and the bench measures the pipeline, not an exporter.
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
    }


def batch_env(batch_size: int) -> dict[str, str]:
    """Ours with the batch lane allowed (runs ask for it): groups of ``batch_size``, submitted
    once full or two seconds after their first call, polled every second. A run that does not
    ask for it is unchanged (the actions phase checks it)."""
    return {
        "LLM_BATCH": "allowed",
        "LLM_BATCH_SIZE": str(batch_size),
        "LLM_BATCH_DELAY_S": "2",
        "LLM_BATCH_POLL_S": "1",
    }


def start_ours(
    stack: LocalStack, temporal_address: str, name: str, extra: dict[str, str] | None = None
) -> ManagedProcess:
    """``python worker.py`` against ``temporal_address`` (``extra`` laid over its
    environment), ready when it polls."""
    env = {**worker_env(stack, temporal_address, name), **(extra or {})}
    return start_worker(env=env, log_dir=stack.log_dir, cwd=PROJECT_ROOT)


def start_baseline(stack: LocalStack, temporal_address: str, name: str) -> ManagedProcess:
    """``python -m bench.baseline_worker`` against ``temporal_address``, ready when it polls."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **worker_env(stack, temporal_address, name)}
    proc = ManagedProcess(
        name,
        [sys.executable, "-m", "bench.baseline_worker"],
        log_dir=stack.log_dir,
        env=env,
        cwd=PROJECT_ROOT,
    )
    try:
        proc.wait_for_log_line(re.escape(BASELINE_READY_LINE))
    except BaseException:
        proc.stop()
        raise
    return proc


@dataclass
class SideServer:
    """A dev server of the SQLite phase with a worker of ours and one of the baseline."""

    name: str
    address: str
    server: ManagedProcess
    ours: ManagedProcess
    baseline: ManagedProcess

    def stop(self) -> None:
        for proc in (self.ours, self.baseline, self.server):
            proc.stop()


class BenchStack:
    """The measured processes; a context manager that stops all of them on exit."""

    def __init__(self, data_dir: Path, *, batch_size: int = 25) -> None:
        # A db file, so the WAL pragmas apply; the capacity store for the batch lane.
        self.local = LocalStack(data_dir, persist=True, with_capacity_store=True)
        self.batch_size = batch_size
        self.ours: ManagedProcess | None = None
        self.baseline: ManagedProcess | None = None
        self.side_servers: dict[str, SideServer] = {}
        self._generation = 0
        self._metrics: tuple[int, str] | None = None  # (server pid, its /metrics URL)

    @property
    def address(self) -> str:
        """The WAL dev server's address."""
        return self.local.addresses.temporal_address

    def server_pid(self) -> int:
        """PID of the WAL dev server (it changes when the server restarts)."""
        return self.local.processes["temporal"].pid

    def metrics_url(self) -> str:
        """The WAL dev server's ``/metrics`` URL (found once per server process).

        ``aiorch.devstack.servers`` starts the server without ``--metrics-port``, so start-dev
        serves its metrics on a port it picks; `bench.server_metrics.find_metrics_url` finds it.
        """
        pid = self.server_pid()
        if self._metrics is None or self._metrics[0] != pid:
            grpc_port = self.local.temporal_port
            self._metrics = (pid, find_metrics_url(pid, skip=frozenset({grpc_port})))
        return self._metrics[1]

    @property
    def simulator_url(self) -> str:
        """The LLM simulator's root URL (its OpenAI base URL without ``/v1``)."""
        return self.local.addresses.openai_base_url.removesuffix("/v1")

    def simulator_pid(self) -> int:
        """PID of the LLM simulator."""
        return self.local.processes["llm"].pid

    def start(self) -> None:
        """Start the servers, then our worker and the baseline's."""
        self.local.start()
        self.ours = start_ours(self.local, self.address, "worker", batch_env(self.batch_size))
        self.baseline = start_baseline(self.local, self.address, "baseline-worker")

    def restart_ours(self) -> ManagedProcess:
        """Replace our worker with a fresh process (stopped cleanly first)."""
        if self.ours is not None:
            self.ours.stop()
            self.ours = None
        return self.start_ours_again()

    def kill_ours(self) -> None:
        """SIGKILL our worker, as a crash would; `start_ours_again` brings a new one."""
        if self.ours is not None:
            self.ours.kill()
            self.ours = None

    def start_ours_again(self) -> ManagedProcess:
        """Start a new worker of ours (its own log and vector store)."""
        self._generation += 1
        self.ours = start_ours(
            self.local, self.address, f"worker-{self._generation}", batch_env(self.batch_size)
        )
        return self.ours

    def crash_restart_server(self) -> None:
        """SIGKILL the WAL dev server and start it again on the same port and SQLite file."""
        self.local.restart_temporal(crash=True)

    def start_side_servers(self) -> dict[str, SideServer]:
        """Two fresh dev servers, ``wal`` (the embedded default) and ``default`` (SQLite's own
        settings: rollback journal, full sync), each on a new db file with its own workers.

        Both start empty, so neither carries the main server's earlier batches (a bigger
        visibility table makes every later write and count slower)."""
        for name, fast in (("wal", True), ("default", False)):
            port = free_port()
            address = f"127.0.0.1:{port}"
            server = start_temporal_dev_server(
                port=port,
                ui_port=None,
                db_file=self.local.data_dir / f"sqlite-{name}.sqlite",
                log_dir=self.local.log_dir / f"sqlite-{name}-server",
                fast_sqlite=fast,
            )
            self.side_servers[name] = SideServer(
                name,
                address,
                server,
                ours=start_ours(self.local, address, f"worker-sqlite-{name}"),
                baseline=start_baseline(self.local, address, f"baseline-worker-sqlite-{name}"),
            )
        return dict(self.side_servers)

    def stop_side_servers(self) -> None:
        """Stop the SQLite phase's servers and their workers, if running."""
        for side in self.side_servers.values():
            side.stop()
        self.side_servers.clear()

    def stop(self) -> None:
        """Stop every process this stack started, workers first."""
        self.stop_side_servers()
        for proc in (self.ours, self.baseline):
            if proc is not None:
                proc.stop()
        self.ours = self.baseline = None
        self.local.stop()

    def __enter__(self) -> BenchStack:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
