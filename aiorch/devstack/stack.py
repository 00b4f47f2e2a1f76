"""The embedded local stack: Temporal's dev server, SQS (moto), the LLM simulator, a worker
and, with payload encryption on, the codec server, started and stopped together.

- the worker's only ``file://`` input root (``INPUT_FILE_ROOTS``) is ``<data_dir>/inputs``
  (``StackAddresses.input_dir``); with ``keep_documents`` (``up`` unless ``--ephemeral``) it is
  also ``CLAIM_CHECK_DIR`` for the worker and the shell lines, so the CLI stores documents there
  and a run waiting for review finds its document after a restart. Otherwise the CLI stores them
  in the stack's S3, and moto keeps S3 and SQS (the dead letters) in memory only: moto 5 has no
  state persistence for its server, only a request recorder whose replay cannot reproduce SQS
  state (receipt handles and message ids are drawn anew)
- with ``with_ledger`` (``up`` unless ``--no-ledger``), ``aiorch ledger follow`` keeps the run
  ledger ``<data_dir>/ledger.db`` (``LEDGER_URL``, ``StackAddresses.ledger_url``) filled from
  the runs' histories, reading encrypted runs with the worker's keys
- the document pipeline stores its rows in the SQLite file ``<data_dir>/documents.db``
  (``DOCUMENT_STORE_URL``, ``StackAddresses.document_store_url``), next to the embedded vector
  store: whatever the worker's working directory, a stack keeps its data in its own folder
- the codec server starts only when payload encryption is on (``PAYLOAD_KEYS`` or
  ``PAYLOAD_KEYS_FILE`` in the environment or ``worker_env``); the Web UI is started with
  ``--ui-codec-endpoint`` pointing at it, and its token is written to ``<data_dir>/codec-token``
  (mode 0600), never printed
- with encryption on, the worker refuses plaintext payloads (``REQUIRE_ENCRYPTION=true``), and
  the shell lines `up` prints (`LocalStack.shell_env`) carry the keys as ``PAYLOAD_KEYS_FILE``:
  the file given, or ``<data_dir>/payload-keys`` (mode 0600) holding ``PAYLOAD_KEYS``, so a
  shell that pastes them starts encrypted runs
- the review inbox starts only with ``with_inbox``, with its own signing key
  (``<data_dir>/inbox-key``; its ``inbox:KEY:*`` entry joins the workers' ``REVIEW_PUBLIC_KEYS``)
  and a login token per name in ``inbox_reviewers``, hashed in ``<data_dir>/inbox-tokens`` and
  readable in ``<data_dir>/inbox-logins`` (mode 0600)

The launcher stops the children last-started first (`aiorch.devstack.processes`). For a demo::

    python -m aiorch.devstack up [--data-dir .data] [--temporal-port 7233] [--ui-port 8233]
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from aiorch.devstack.addresses import StackAddresses, StackPorts
from aiorch.devstack.processes import LocalStackError, ManagedProcess
from aiorch.devstack.servers import (
    PROJECT_ROOT,
    start_capacity_store,
    start_codec_server,
    start_inbox,
    start_ledger_follower,
    start_llm_simulator,
    start_sqs_server,
    start_temporal_dev_server,
    start_worker,
)
from aiorch.devstack.stack_keys import (
    CODEC_TOKEN_VARIABLES,
    PayloadKeys,
    stack_reviewer_key,
    write_secret,
)
from aiorch.ops.inbox.auth import new_token

# What the worker logs about its metrics (aiorch_runtime.telemetry.worker_runtime) and health
# endpoints (aiorch.worker.health.start_health): served, or not started and why; `up`'s flag.
_ENDPOINT_LINES = {
    "metrics": (
        re.compile(r"Prometheus metrics on (http://\S+/metrics)"),
        re.compile(r"metrics endpoint \S*:(\d+) not started \((.*?)\); set METRICS_PORT"),
        "--metrics-port",
    ),
    "health": (
        re.compile(r"health endpoints on (http://\S+/healthz) and /readyz"),
        re.compile(r"health endpoints on port (\d+) not started \((.*?)\); set HEALTH_PORT"),
        "--health-port",
    ),
}
# The reverse is the stop order: the worker goes before the servers it uses.
_START_ORDER = ("codec", "temporal", "sqs", "llm", "capacity", "worker", "ledger", "inbox")

LEDGER_INTERVAL = "2s"

__all__ = ["LocalStack", "LocalStackError", "StackAddresses"]


class LocalStack:
    """Temporal dev server, SQS (moto) and the LLM simulator, plus optionally a worker.

    Ports left as None are picked free; ``ui_port=None`` runs headless. ``persist`` keeps
    Temporal state in ``data_dir/temporal.sqlite`` across restarts; ``keep_documents`` keeps
    the documents the CLI stores, in ``data_dir/inputs`` (else in moto's S3, in memory). Use as
    a context manager or call `start`/`stop`: every process is stopped on exit, exceptions and
    Ctrl-C included. ``worker_env`` is laid over `StackAddresses.env` for the worker.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        temporal_port: int | None = None,
        ui_port: int | None = None,
        sqs_port: int | None = None,
        llm_port: int | None = None,
        persist: bool = True,
        keep_documents: bool = False,
        with_worker: bool = False,
        worker_cwd: Path = PROJECT_ROOT,
        worker_env: Mapping[str, str] | None = None,
        codec_port: int | None = None,
        with_inbox: bool = False,
        inbox_port: int | None = None,
        inbox_reviewers: Sequence[str] = ("reviewer",),
        with_capacity_store: bool = False,
        capacity_port: int | None = None,
        with_ledger: bool = False,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.log_dir = self.data_dir / "logs"
        self.db_file = self.data_dir / "temporal.sqlite" if persist else None
        self.keep_documents = keep_documents
        self.with_worker, self.worker_cwd = with_worker, worker_cwd
        self.with_ledger = with_ledger
        self.worker_env = dict(worker_env or {})
        self.payload_keys = PayloadKeys.configured(self.worker_env, self.data_dir)
        self.codec_token_file = self.data_dir / "codec-token"
        self.reviewer_key = stack_reviewer_key(self.data_dir / "reviewer-key")
        self.with_inbox, self.inbox_reviewers = with_inbox, tuple(inbox_reviewers)
        self.inbox_key = stack_reviewer_key(self.data_dir / "inbox-key", "inbox")
        public_keys = [self.reviewer_key.public_entry()]
        if with_inbox:
            public_keys.append(self.inbox_key.public_entry(None))
        given = StackPorts(
            temporal_port, ui_port, sqs_port, llm_port, codec_port, inbox_port, capacity_port
        )
        ports = given.chosen(codec=self.encrypted, inbox=with_inbox, capacity=with_capacity_store)
        assert ports.temporal and ports.sqs and ports.llm  # chosen: always picked
        self.temporal_port, self.ui_port = ports.temporal, ports.ui
        self.sqs_port, self.llm_port = ports.sqs, ports.llm
        self.addresses = StackAddresses.local(
            self.data_dir,
            ports,
            review_public_keys=",".join(public_keys),
            keep_documents=keep_documents,
        )
        self._procs: dict[str, ManagedProcess] = {}

    @property
    def encrypted(self) -> bool:
        """Whether payload encryption is on (keys configured for the worker or in this
        environment)."""
        return self.payload_keys.on

    @property
    def payload_keys_file(self) -> Path:
        """The file that holds the payload keys (encryption on only)."""
        return self.payload_keys.file

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        """A copy of the running processes by name: temporal, sqs, llm, worker, ledger..."""
        return dict(self._procs)

    def start(self) -> StackAddresses:
        """Start the three servers, then the worker if asked; return their addresses."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.addresses.input_dir.mkdir(exist_ok=True)
        write_secret(self.addresses.reviewer_key_file, self.reviewer_key.private_entry())
        if self.encrypted and self.payload_keys.keys:
            write_secret(self.payload_keys_file, self.payload_keys.keys)
        try:
            # Temporal first: its port (7233) is the one most likely taken, and checking it
            # before launching anything gives the one-line error at once. The other two boot
            # side by side.
            token = self._write_codec_token() if self.encrypted else None
            self._procs["temporal"] = self._start_temporal()
            if token is not None:  # the UI only needs the codec server's URL to start
                self._procs["codec"] = self._start_codec(token)
            log_dir = self.log_dir
            self._procs["sqs"] = start_sqs_server(port=self.sqs_port, log_dir=log_dir, wait=False)
            self._procs["llm"] = start_llm_simulator(
                port=self.llm_port, log_dir=log_dir, wait=False
            )
            for name in ("sqs", "llm"):
                self._procs[name].wait_ready()
            if self.addresses.capacity_store_url is not None:
                self.start_capacity_store()
            if self.with_worker:
                self.start_worker()
            if self.with_ledger:
                self.start_ledger()
            if self.with_inbox:
                self._procs["inbox"] = self._start_inbox()
        except BaseException:
            self.stop()
            raise
        self._write_state()
        return self.addresses

    def stop(self) -> None:
        """Stop every process, the last started first; safe to call more than once."""
        for name in reversed(_START_ORDER):
            if name in self._procs:
                self._procs.pop(name).stop()
        (self.data_dir / "stack.json").unlink(missing_ok=True)

    def restart_temporal(self, *, crash: bool = False) -> None:
        """Stop (with ``crash``: SIGKILL) the dev server, then start it on the same port and db."""
        old = self._procs.pop("temporal")
        if crash:
            old.kill()
        else:
            old.stop()
        self._procs["temporal"] = self._start_temporal()
        self._write_state()

    def stop_sqs(self) -> None:
        """Stop SQS, so the dead-letter queue is unreachable until `start_sqs`."""
        self._procs.pop("sqs").stop()
        self._write_state()

    def start_sqs(self) -> None:
        """Start SQS again on the same port (moto keeps no state: queues are gone)."""
        self._procs["sqs"] = start_sqs_server(port=self.sqs_port, log_dir=self.log_dir)
        self._write_state()

    def start_capacity_store(self) -> None:
        """Start the capacity store (Redis, in memory) on its port."""
        url = self.addresses.capacity_store_url
        assert url is not None
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        self._procs["capacity"] = start_capacity_store(port=port, log_dir=self.log_dir)
        self._write_state()

    def stop_capacity_store(self) -> None:
        """Stop the capacity store, so workers meet it down until `start_capacity_store`."""
        self._procs.pop("capacity").stop()
        self._write_state()

    def stop_worker(self) -> None:
        """Stop the worker gracefully (SIGTERM: in-flight tasks finish), e.g. to reconfigure it."""
        self._procs.pop("worker").stop()
        self._write_state()

    def kill_worker(self) -> None:
        """SIGKILL the worker, as a crash would."""
        self._procs.pop("worker").kill()
        self._write_state()

    def start_worker(self) -> None:
        """Start a worker against this stack and wait until it polls; with encryption on it
        refuses plaintext payloads unless ``worker_env`` says otherwise."""
        required = {"REQUIRE_ENCRYPTION": "true"} if self.encrypted else {}
        env = {**self.addresses.env(), **required, **self.worker_env}
        self._procs["worker"] = start_worker(env=env, log_dir=self.log_dir, cwd=self.worker_cwd)
        self._write_state()

    def start_ledger(self) -> None:
        """Start ``aiorch ledger follow`` into ``LEDGER_URL``, with the worker's environment
        (its payload keys and pipeline folder: the follower reads every run the worker runs),
        syncing every ``LEDGER_INTERVAL``: a run shows in the ledger seconds after it moves."""
        env = {**self.addresses.env(), **self.worker_env}
        self._procs["ledger"] = start_ledger_follower(
            env=env, log_dir=self.log_dir, cwd=self.worker_cwd, interval=LEDGER_INTERVAL
        )
        self._write_state()

    def shell_env(self) -> dict[str, str]:
        """What a shell needs to use this stack (`up` prints it): the addresses, the worker's
        ``PIPELINES_DIR`` (absolute) when it has one, so the CLI knows the same pipelines, and
        with encryption on the keys (as a file), their current id and ``REQUIRE_ENCRYPTION``."""
        env = self.addresses.env()
        if pipelines_dir := {**os.environ, **self.worker_env}.get("PIPELINES_DIR"):
            env["PIPELINES_DIR"] = str((self.worker_cwd / pipelines_dir).resolve())
        if self.encrypted:
            env["PAYLOAD_KEYS_FILE"] = str(self.payload_keys_file)
            if self.payload_keys.key_id:
                env["PAYLOAD_KEY_ID"] = self.payload_keys.key_id
            env["REQUIRE_ENCRYPTION"] = "true"
        return env

    def worker_endpoints(self) -> dict[str, str]:
        """Where the worker serves its metrics and health probes, as it logged them: a URL,
        ``off``, or ``NOT STARTED: <why>`` (a port another process holds, say)."""
        log = self._procs["worker"].log_text() if "worker" in self._procs else ""
        found: dict[str, str] = {}
        for name, (serving, failed, flag) in _ENDPOINT_LINES.items():
            if match := serving.search(log):
                found[name] = match[1]
            elif match := failed.search(log):
                found[name] = f"NOT STARTED: port {match[1]}: {match[2]} (choose another: {flag})"
            else:
                found[name] = "off"
        return found

    def codec_token(self) -> str:
        """The codec server's bearer token (encryption on only)."""
        return self.codec_token_file.read_text(encoding="utf-8").strip()

    def _write_codec_token(self) -> str:
        # The operator's token if configured, else a fresh one kept in a 0600 file, never printed.
        env = {**os.environ, **self.worker_env}
        token = env.get("CODEC_SERVER_TOKEN") or ""
        if not token and env.get("CODEC_SERVER_TOKEN_FILE"):
            token = Path(env["CODEC_SERVER_TOKEN_FILE"]).read_text(encoding="utf-8").strip()
        token = token or secrets.token_urlsafe(32)
        write_secret(self.codec_token_file, token)
        return token

    def _start_codec(self, token: str) -> ManagedProcess:
        url = self.addresses.codec_server_url
        assert url is not None
        codec_env = {
            **self.addresses.env(),
            **{k: v for k, v in self.worker_env.items() if k not in CODEC_TOKEN_VARIABLES},
            "CODEC_SERVER_TOKEN": token,
            "CODEC_SERVER_TOKEN_FILE": "",  # the token above wins over one from this environment
            "TEMPORAL_UI_URL": self.addresses.ui_url or "http://127.0.0.1:8233",
        }
        return start_codec_server(
            port=int(url.rsplit(":", 1)[1]), env=codec_env, log_dir=self.log_dir
        )

    def inbox_token(self, reviewer: str) -> str:
        """The inbox login token of one of ``inbox_reviewers`` (with_inbox only)."""
        logins = (self.data_dir / "inbox-logins").read_text(encoding="utf-8").splitlines()
        return next(line.split(" ", 1)[1] for line in logins if line.split(" ", 1)[0] == reviewer)

    def _start_inbox(self) -> ManagedProcess:
        url = self.addresses.inbox_url
        assert url is not None
        write_secret(self.data_dir / "inbox-key", self.inbox_key.private_entry())
        tokens = {name: new_token(name) for name in self.inbox_reviewers}
        write_secret(
            self.data_dir / "inbox-logins", "\n".join(f"{n} {t}" for n, (t, _) in tokens.items())
        )
        (self.data_dir / "inbox-tokens").write_text(
            "".join(f"{line}\n" for _, line in tokens.values()), encoding="utf-8"
        )
        inbox_env = {
            **self.addresses.env(),
            **self.worker_env,
            "INBOX_SIGNING_KEY_FILE": str(self.data_dir / "inbox-key"),
            "INBOX_TOKENS_FILE": str(self.data_dir / "inbox-tokens"),
            "INBOX_URL": url,
        }
        return start_inbox(port=int(url.rsplit(":", 1)[1]), env=inbox_env, log_dir=self.log_dir)

    def _ui_codec_endpoint(self) -> str | None:
        # The Web UI cannot send a bearer header, so it gets the token as a path segment; the
        # UI is local (127.0.0.1) and its settings are served to local browsers only.
        if self.addresses.codec_server_url is None or self.ui_port is None:
            return None
        return f"{self.addresses.codec_server_url}/{self.codec_token()}"

    def _start_temporal(self) -> ManagedProcess:
        return start_temporal_dev_server(
            port=self.temporal_port,
            ui_port=self.ui_port,
            ui_codec_endpoint=self._ui_codec_endpoint(),
            db_file=self.db_file,
            log_dir=self.log_dir,
        )

    def _write_state(self) -> None:
        processes = {n: {"pid": p.pid, "log": str(p.log_path)} for n, p in self._procs.items()}
        state = {"addresses": self.addresses.env(), "processes": processes}
        (self.data_dir / "stack.json").write_text(json.dumps(state, indent=2) + "\n")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
