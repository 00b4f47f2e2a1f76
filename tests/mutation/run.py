"""``make mutate``: run mutmut afresh over the modules ``[tool.mutmut]`` names, then print the
kill rate of each module and of all of them, and every mutant that survived, with its diff.

mutmut writes its working copy to ``mutants/`` (ignored by git); a run starts from a fresh one,
so results never carry over from code or tests that have changed since. A mutant whose tests hang
is killed by mutmut after its CPU limit, and whatever servers those tests had started (the
time-skipping test server) would outlive it: mutmut runs in a session of its own, whose orphans
(processes whose parent died) are stopped as they appear, and everything left in it once mutmut
is done. docs/mutation.md says how to read the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "mutants"
MUTMUT = Path(sys.executable).with_name("mutmut")
# What the exit code of a mutant's test run means. A mutant counts as killed when a test failed
# or the tests ran past their CPU limit (SIGXCPU: the mutant made them spin); "no tests" means
# no selected test runs the mutated function; "error" that pytest could not run the tests at
# all (a test id not found, say), which says nothing about the mutant and is not a kill (mutmut
# itself files it under "timeout").
STATUS_BY_EXIT_CODE = {
    None: "not checked",
    0: "survived",
    1: "killed",
    3: "killed",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    36: "timeout",
    255: "error",
}
KILLED = frozenset({"killed", "timeout"})
REAP_EVERY_S = 10.0


@dataclass
class Module:
    """One mutated module's mutants by status, and the names of those not killed."""

    path: str
    statuses: Counter[str] = field(default_factory=Counter)
    survivors: list[str] = field(default_factory=list)
    not_killed: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def killed(self) -> int:
        return sum(self.statuses[status] for status in KILLED)


def orphans(session: int) -> list[int]:
    """Processes of ``session`` whose parent died (adopted by init): what a killed mutant run
    left behind."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        # After the command: state, ppid, pgrp, session.
        if int(fields[1]) == 1 and int(fields[3]) == session:
            found.append(int(entry.name))
    return found


def run_mutmut(max_children: int, names: list[str] | None = None) -> int:
    """``mutmut run`` afresh (or again for ``names`` only, against the tests as they are now),
    in a session of its own: orphans are stopped as they appear, and whatever is left once
    mutmut is done."""
    if names is None:
        shutil.rmtree(MUTANTS, ignore_errors=True)
    process = subprocess.Popen(
        [str(MUTMUT), "run", "--max-children", str(max_children), *(names or [])],
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        while True:
            try:
                return process.wait(timeout=REAP_EVERY_S)
            except subprocess.TimeoutExpired:
                for pid in orphans(process.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def results() -> list[Module]:
    """Every mutated module's results, from mutmut's ``mutants/<path>.meta`` files."""
    modules = []
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        source = meta.relative_to(MUTANTS).as_posix().removesuffix(".meta")
        module = Module(source)
        for name, code in json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"].items():
            status = STATUS_BY_EXIT_CODE.get(code, f"exit code {code}")
            module.statuses[status] += 1
            if status == "survived":
                module.survivors.append(name)
            if status not in KILLED:
                module.not_killed.append(name)
        modules.append(module)
    return modules


def rate(killed: int, total: int) -> str:
    return f"{100 * killed / total:.1f}%" if total else "-"


def report(modules: list[Module], *, diffs: bool) -> str:
    """The kill rate per module and in all, then each survivor (with its diff)."""
    lines = [f"{'module':<34} {'mutants':>7} {'killed':>7} {'rate':>6}  other"]
    for module in modules:
        other = ", ".join(
            f"{count} {status}"
            for status, count in sorted(module.statuses.items())
            if status != "killed"  # timeouts count as killed, and are shown
        )
        lines.append(
            f"{module.path:<34} {module.total:>7} {module.killed:>7} "
            f"{rate(module.killed, module.total):>6}  {other}"
        )
    total = sum(module.total for module in modules)
    killed = sum(module.killed for module in modules)
    lines.append(f"{'all':<34} {total:>7} {killed:>7} {rate(killed, total):>6}")
    survivors = [(module, name) for module in modules for name in module.survivors]
    lines.append(f"\n{len(survivors)} survived (`mutmut show NAME` prints one's diff):")
    for module, name in survivors:
        lines.append(name)
        if diffs:
            diff = get_diff_for_mutant(name, path=module.path)
            lines.extend(
                f"    {line}" for line in diff.splitlines() if re.match(r"[-+](?![-+])", line)
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--report-only", action="store_true", help="report the last run's results again"
    )
    parser.add_argument(
        "--modules",
        nargs="+",
        metavar="PATH",
        help="run only these modules' mutants (paths as [tool.mutmut] lists them), keeping the "
        "other modules' last results",
    )
    parser.add_argument(
        "--again",
        action="store_true",
        help="run the last run's mutants that were not killed again, against the tests now",
    )
    args = parser.parse_args()
    if args.again:
        names = [name for module in results() for name in module.not_killed]
        status = run_mutmut(args.max_children, names)
        if status != 0:
            print(f"mutmut run exited with {status}", file=sys.stderr)
            return status
    elif args.modules:
        patterns = [f"{path.removesuffix('.py').replace('/', '.')}.*" for path in args.modules]
        status = run_mutmut(args.max_children, patterns)
        if status != 0:
            print(f"mutmut run exited with {status}", file=sys.stderr)
            return status
    elif not args.report_only:
        status = run_mutmut(args.max_children)
        if status != 0:
            print(f"mutmut run exited with {status}", file=sys.stderr)
            return status
    modules = results()
    if not modules:
        print("no results in mutants/: run `make mutate`", file=sys.stderr)
        return 1
    os.chdir(ROOT)
    print(report(modules, diffs=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
