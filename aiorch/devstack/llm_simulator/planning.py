"""What faults and shape a call gets (its ``Plan``): the global faults of ``/_sim/faults``
first, then the directives in its text, each counted per (run key, directive text) so that
``times=N`` applies to a run's first N calls; a rate directive fires for the share of run keys
it names, chosen by a hash of the key (the same run always gets the same answer)."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Any

from aiorch.devstack.llm_simulator.faults import (
    SHAPES,
    Directive,
    EndpointPath,
    FaultSpec,
    GlobalFault,
    Plan,
)


def in_share(run_key: str, rate: float) -> bool:
    """Whether a hash of ``run_key`` falls below ``rate`` (0 to 1): the same key always gets
    the same verdict, and keys in a share of 0.05 are also in a share of 0.6."""
    digest = hashlib.sha256(f"rate:{run_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


class CallPlanner:
    """The global faults and the directive counters a simulator keeps."""

    def __init__(self) -> None:
        self.faults: list[GlobalFault] = []
        self._counts: Counter[tuple[str, str]] = Counter()

    def reset(self) -> None:
        """Forget every count: directives and global faults apply again from their first call."""
        self._counts.clear()
        for fault in self.faults:
            fault.hits = 0

    async def plan(
        self,
        run_key: str,
        path: EndpointPath,
        model: str,
        directives: list[Directive],
        entry: dict[str, Any],
    ) -> Plan:
        """The plan of one call (sleeping any delay it asks for), its faults noted in its log
        ``entry``."""
        plan = Plan()
        for fault in self.faults:
            if not fault.spec.matches(path, model):
                continue
            fault.hits += 1
            if fault.spec.times is not None and fault.hits > fault.spec.times:
                continue
            if fault.spec.delay_ms is not None:
                plan.fired.append("global_delay")
                entry["fault"] = "+".join(plan.fired)
                await asyncio.sleep(fault.spec.delay_ms / 1000)
            if fault.spec.status is not None:
                plan.fired.append("global_status")
                entry["fault"] = "+".join(plan.fired)
                plan.error = fault.spec
                return plan
        for directive in directives:
            if not directive.spec.matches(path, model):
                continue
            if directive.name in SHAPES and plan.shape is not None:
                continue
            if directive.rate is not None and not in_share(run_key, directive.rate):
                continue
            if not self._count(run_key, directive):
                continue
            plan.fired.append(directive.name)
            entry["fault"] = "+".join(plan.fired)
            if isinstance(directive.spec, FaultSpec):
                if directive.spec.delay_ms is not None:
                    await asyncio.sleep(directive.spec.delay_ms / 1000)
                plan.error = directive.spec
                return plan
            if directive.sleep_s is not None:
                await asyncio.sleep(directive.sleep_s)
            elif directive.name == "review":
                plan.review = True
            elif directive.name == "wrong_total":
                plan.wrong_total = True
            else:
                plan.shape = directive.name
        return plan

    def _count(self, run_key: str, directive: Directive) -> bool:
        """Count a call against ``directive``; return whether it still applies."""
        key = (run_key, directive.text)
        self._counts[key] += 1
        return directive.spec.times is None or self._counts[key] <= directive.spec.times
