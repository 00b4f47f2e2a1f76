"""The dev server's own Prometheus metrics: where they are served and its ``action`` counter.

``temporal server start-dev`` always serves ``/metrics``, on ``--metrics-port`` or, when that
flag is not given (``aiorch.devstack.servers`` does not give it), on a random free port it picks
itself. So the bench finds the port: it asks each TCP port the server process listens on
(``bench.procstat.listening_ports``) for ``/metrics`` and keeps the one that answers with
Prometheus text. The gRPC ports close the connection on an HTTP/1 request, the HTTP API answers
404; only the metrics endpoint answers 200.

The ``action`` counter (labels ``action_type``, ``namespace``, ``operation``, ``service_name``)
is what Temporal Cloud bills: the frontend adds 1 per billable request or command after the call
succeeded (server source: ``common/rpc/interceptor/telemetry.go``). The server publishes its
counters every second (tally's reporting interval in ``common/metrics/config.go``), so a read
right after the last run closed may miss that run's last commands; `settled_actions` waits
until the counter has stood still for longer than that interval.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

from bench.procstat import listening_ports

ACTION_METRIC = "action"
NAMESPACE = "default"
REPORTING_INTERVAL_S = 1.0  # the server's tally scope reports every second
SETTLED_S = 1.6  # unchanged for longer than one reporting interval, plus scrape slack
POLL_S = 0.2
PROBE_TIMEOUT_S = 2.0

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Local servers only: an http(s)_proxy from the environment must not intercept 127.0.0.1.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MetricsUnavailable(Exception):
    """The server's metrics endpoint cannot be found or read; the message says why."""


def _get(url: str) -> str | None:
    """The body of ``GET url`` when it answers 200, else None (any failure: not this port)."""
    try:
        with _DIRECT.open(url, timeout=PROBE_TIMEOUT_S) as response:
            if int(response.status) != 200:
                return None
            body: bytes = response.read()
            return body.decode(errors="replace")
    except (OSError, ValueError, urllib.error.HTTPError):
        return None


def find_metrics_url(pid: int, host: str = "127.0.0.1", skip: frozenset[int] = frozenset()) -> str:
    """The ``/metrics`` URL of the dev server running as process ``pid``.

    Args:
        pid: the server process.
        host: the address it listens on.
        skip: ports known not to be it (its gRPC port), so they are not probed.

    Raises:
        MetricsUnavailable: no port of the process serves Prometheus text.
    """
    ports = [p for p in listening_ports(pid) if p not in skip]
    for port in ports:
        url = f"http://{host}:{port}/metrics"
        body = _get(url)
        if body is not None and "# TYPE " in body:
            return url
    raise MetricsUnavailable(
        f"no /metrics endpoint among the ports of the dev server (pid {pid}): {ports}"
    )


def parse_actions(text: str, namespace: str = NAMESPACE) -> dict[str, int]:
    """The ``action`` counter of ``namespace`` by ``action_type``, from Prometheus text.

    Series that differ only in other labels (``operation``, ``service_name``) are summed. The
    server's own namespace (``temporal_system``) has actions of its own and is left out.
    """
    counts: dict[str, int] = {}
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None or sample["name"] != ACTION_METRIC:
            continue
        labels = dict(_LABEL.findall(sample["labels"]))
        if labels.get("namespace") != namespace:
            continue
        kind = labels.get("action_type", "")
        # Prometheus text may print a large counter as 1.234567e+06: parse as float, then round.
        counts[kind] = counts.get(kind, 0) + round(float(sample["value"]))
    return counts


def read_actions(url: str, namespace: str = NAMESPACE) -> dict[str, int]:
    """The ``action`` counter now (blocking; see `settled_actions`)."""
    body = _get(url)
    if body is None:
        raise MetricsUnavailable(f"cannot read the dev server's metrics at {url}")
    return parse_actions(body, namespace)


async def settled_actions(url: str, namespace: str = NAMESPACE) -> dict[str, int]:
    """The ``action`` counter once it has not moved for `SETTLED_S` seconds.

    Call it when nothing that makes actions is running any more: it then returns every action
    made so far, including those the server had counted but not yet published.
    """
    last = await asyncio.to_thread(read_actions, url, namespace)
    since = time.monotonic()
    while time.monotonic() - since < SETTLED_S:
        await asyncio.sleep(POLL_S)
        now = await asyncio.to_thread(read_actions, url, namespace)
        if now != last:
            last, since = now, time.monotonic()
    return last


def difference(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What each action type counted between two reads (types that did not move are left out)."""
    moved = {kind: after[kind] - before.get(kind, 0) for kind in after}
    return {kind: n for kind, n in sorted(moved.items()) if n}
