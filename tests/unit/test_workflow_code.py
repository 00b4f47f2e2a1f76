"""Workflow code keeps the sandbox's rules, whether the sandbox checks it at run time or not.

The worker passes the whole ``workflows`` package through the sandbox (`aiorch_runtime.sandbox`:
built once per worker, not for every run), so a wall-clock read or a random number there would only
show up as a replay failure later, and module state would be shared by every run. These tests
read every module of ``workflows/`` and refuse what the sandbox would: wall clock, randomness,
uuids, the environment, files, sleeping threads and I/O clients; and module-level state that a
run could change (the workflow and replay tests also run this code under the SDK's full sandbox).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS_DIR = Path(__file__).resolve().parents[2] / "workflows"

# Modules whose import alone means I/O, a clock or randomness outside workflow.*.
FORBIDDEN_MODULES = frozenset(
    {
        "aiohttp",
        "boto3",
        "botocore",
        "httpx",
        "openai",
        "os",
        "qdrant_client",
        "random",
        "requests",
        "secrets",
        "socket",
        "sqlite3",
        "subprocess",
        "threading",
        "time",
        "uuid",
    }
)
# Calls that read the wall clock or sleep, whatever module they come from.
FORBIDDEN_ATTRIBUTE_CALLS = frozenset({"now", "utcnow", "today", "fromtimestamp", "sleep"})
FORBIDDEN_NAME_CALLS = frozenset({"open", "input", "print"})
ALLOWED_CALLERS = frozenset({"workflow"})  # workflow.now(), workflow.sleep() are the way
# Module-level values of these kinds can be changed by one run and seen by the next.
MUTABLE_LITERALS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
MUTABLE_FACTORIES = frozenset({"list", "dict", "set", "bytearray", "defaultdict", "deque"})


def _is_mutable_value(value: ast.expr | None) -> bool:
    if isinstance(value, MUTABLE_LITERALS):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in MUTABLE_FACTORIES
    return False


def shared_state(tree: ast.Module) -> list[str]:
    """Module-level mutable values and ``global`` statements: state one run could leave for the
    next once the module is imported once per worker."""
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else None
        if _is_mutable_value(value):
            found.append(f"line {node.lineno}: mutable module-level value")
    for inner in ast.walk(tree):
        if isinstance(inner, (ast.Global, ast.Nonlocal)):
            found.append(f"line {inner.lineno}: {type(inner).__name__.lower()} statement")
    return found


def violations(source: str) -> list[str]:
    """What in ``source`` the workflow sandbox would refuse, one line each."""
    tree = ast.parse(source)
    found = shared_state(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_NAME_CALLS:
                found.append(f"line {node.lineno}: {func.id}()")
            elif isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_ATTRIBUTE_CALLS:
                owner = func.value
                if not (isinstance(owner, ast.Name) and owner.id in ALLOWED_CALLERS):
                    found.append(f"line {node.lineno}: .{func.attr}()")
    return found


@pytest.mark.parametrize(
    "module",
    [*sorted(WORKFLOWS_DIR.glob("*.py")), *sorted(WORKFLOWS_DIR.glob("data/*.py"))],
    ids=lambda path: str(path.relative_to(WORKFLOWS_DIR)),
)
def test_workflow_module_keeps_the_sandbox_rules(module: Path) -> None:
    """No wall clock, randomness, environment, files, I/O clients or mutable module state in
    workflow code."""
    assert violations(module.read_text("utf-8")) == []


@pytest.mark.parametrize(
    "snippet",
    [
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.utcnow()",
        "import random\nx = random.random()",
        "from uuid import uuid4",
        "import os\nkey = os.environ['KEY']",
        "text = open('prompt.txt').read()",
        "import asyncio\nasync def f() -> None:\n    await asyncio.sleep(1)",
        "from openai import AsyncOpenAI",
        "SEEN: list[str] = []",
        "CACHE = {}",
        "from collections import defaultdict\nCOUNTS = defaultdict(int)",
        "calls = 0\ndef count() -> None:\n    global calls\n    calls += 1",
    ],
)
def test_the_check_catches_what_the_sandbox_would(snippet: str) -> None:
    """Each kind of violation is found, so a clean result above means something."""
    assert violations(snippet)


def test_the_workflow_apis_are_allowed() -> None:
    """workflow.now(), workflow.sleep() and workflow.random() are the deterministic way."""
    source = (
        "from temporalio import workflow\n"
        "async def f() -> None:\n"
        "    at = workflow.now()\n"
        "    await workflow.sleep(1)\n"
        "    x = workflow.random().random()\n"
    )
    assert violations(source) == []
