"""Where each worker's Python time goes: py-spy attached to one batch of each side.

The load phase says how much CPU a run costs each worker; this says on what. py-spy
(``pip install -e '.[bench]'``) samples the thread holding the GIL (``--gil``) of the baseline's
worker during one batch of the baseline, then of ours during one batch of ours, and every
sample is put in the first component below whose frames it contains. A component's figure is
its samples over the sampling rate, per run: milliseconds of GIL-held time per run. What runs
without the GIL (the SDK's native core, protobuf, SQLite waiting for its fsyncs) is not in it.

The profiler pauses the worker to read each sample, so a profiled batch is slower than the load
phase's: its throughput is not used for any ratio.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RATE_HZ = 100
STOP_TIMEOUT_S = 30.0
ATTACH_S = 0.5  # py-spy refuses a process it may not trace within this


@dataclass(frozen=True)
class Component:
    """Samples whose stack has one of the frame texts in ``any_of`` and every one in ``all_of``."""

    label: str
    any_of: tuple[str, ...]
    all_of: tuple[str, ...] = ()

    def matches(self, stack: str) -> bool:
        return any(text in stack for text in self.any_of) and all(
            text in stack for text in self.all_of
        )


# First match wins, so the specific parts come before the SDK's layers that call them.
COMPONENTS: tuple[Component, ...] = (
    Component("openai client (HTTP to the LLM)", ("openai/",)),
    Component("vector store client", ("qdrant_client/",)),
    Component(
        "SDK sandbox: payload contexts",
        ("get_serialization_context", "get_external_store_context"),
    ),
    Component("SDK sandbox: building a run", ("_create_instance",)),
    Component(
        "workflow code",
        ("(workflows/", "(bench/baseline.py"),
        all_of=("_Instance.activate",),
    ),
    Component("SDK sandbox: activations", ("_Instance.activate",)),
    Component("SDK payload visitors", ("decode_activation", "encode_completion")),
    Component("activity code", ("(activities/", "(bench/baseline.py")),
    Component("SDK activity worker", ("temporalio/worker/_activity.py",)),
    Component("SDK workflow worker", ("temporalio/worker/_workflow.py",)),
    Component("SDK bridge to its core", ("temporalio/bridge/",)),
    Component("event loop", ("asyncio/",)),
)
OTHER = "other"
ORDER = (*(c.label for c in COMPONENTS), OTHER)


def py_spy() -> Path | None:
    """py-spy on PATH or next to this interpreter (the bench extra installs it there)."""
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    return Path(found) if found else None


def component_of(stack: str) -> str:
    """The label of the first component the stack (py-spy's ``frame;frame;...``) matches."""
    return next((c.label for c in COMPONENTS if c.matches(stack)), OTHER)


def samples_by_component(raw_lines: Iterable[str]) -> Counter[str]:
    """Sample counts per component from py-spy's raw output (``stack count`` per line)."""
    counts: Counter[str] = Counter()
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            counts[component_of(stack)] += int(count)
    return counts


def ms_per_run(counts: Counter[str], runs: int, rate_hz: int = RATE_HZ) -> dict[str, float]:
    """Milliseconds of GIL-held time per run, per component, in ``COMPONENTS`` order."""
    return {label: counts[label] * 1000 / rate_hz / runs for label in ORDER if counts[label]}


class ProfilerFailed(Exception):
    """py-spy could not sample the worker (the message is py-spy's error line)."""


@contextmanager
def sampling(executable: Path, pid: int, output: Path) -> Iterator[None]:
    """py-spy records ``pid`` for the duration of the block, its raw stacks in ``output``.

    Raises:
        ProfilerFailed: py-spy exited with an error or wrote nothing (not allowed to trace the
            process, for instance: it needs ptrace rights over the worker).
    """
    command = [str(executable), "record", "--gil", "--rate", str(RATE_HZ), "--format", "raw"]
    command += ["--output", str(output), "--pid", str(pid)]
    spy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(ATTACH_S)
    if spy.poll() is not None:  # refused at once: no batch is run for nothing
        _, err = spy.communicate()
        raise ProfilerFailed(_why(err, spy.returncode))
    try:
        yield
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            _, err = spy.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            spy.kill()
            _, err = spy.communicate()
    if not output.exists() or output.stat().st_size == 0:
        raise ProfilerFailed(_why(err, spy.returncode))


def _why(err: str | None, returncode: int | None) -> str:
    """py-spy's ``Error: ...`` line (a backtrace follows it), else its first line."""
    lines = [line.strip() for line in (err or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors or lines or [f"py-spy exited with {returncode}"])[0]


def report_json(runs: int, by_side: dict[str, Counter[str]]) -> dict[str, Any]:
    """The phase's JSON: per side (``baseline``, ``ours``) the samples and ms per run by
    component, and ours' excess."""
    sides = {name: ms_per_run(counts, runs) for name, counts in by_side.items()}
    labels = [label for label in ORDER if any(label in figures for figures in sides.values())]
    return {
        "n": runs,
        "rate_hz": RATE_HZ,
        "samples": {name: sum(counts.values()) for name, counts in by_side.items()},
        "gil_ms_per_run": sides,
        "ours_minus_baseline_ms_per_run": {
            label: sides["ours"].get(label, 0.0) - sides["baseline"].get(label, 0.0)
            for label in labels
        },
    }
