"""The LLM simulator of a running stack, seen from a test: its request log (what the worker
asked, per run) and its fault switches, over its HTTP control endpoints (``/_sim/...``)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


class Simulator:
    """Reads the LLM simulator's request log over HTTP."""

    def __init__(self, base_url: str) -> None:
        self.root = base_url.removesuffix("/v1")

    def requests(self, run_id: str | None = None) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.root}/_sim/requests", timeout=10) as response:
            log: list[dict[str, Any]] = json.load(response)
        return [r for r in log if run_id is None or r.get("run_id") == run_id]

    def chat_requests(self, run_id: str) -> list[dict[str, Any]]:
        return [r for r in self.requests(run_id) if r["path"] == "chat"]

    def batches(self) -> dict[str, Any]:
        """The batch API's state: its settings, ``submissions`` and every batch."""
        with urllib.request.urlopen(f"{self.root}/_sim/batches", timeout=10) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def set_batches(self, **settings: Any) -> None:
        """The settings of the batches created from now on (completion_s, expire_after,
        create_delay_ms)."""
        self.send("PUT", "/_sim/batches", settings)

    def set_fault(self, fault: dict[str, Any]) -> None:
        self.send("POST", "/_sim/faults", fault)

    def clear_faults(self) -> None:
        self.send("DELETE", "/_sim/faults", None)

    def send(self, method: str, path: str, body: dict[str, Any] | None) -> None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.root}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
