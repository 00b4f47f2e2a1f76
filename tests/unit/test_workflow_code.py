"""Workflow code keeps the sandbox's rules, whether the sandbox checks it at run time or not.

Several modules of ``workflows/`` are passed through the sandbox (built once per worker, not for
every run), so a wall-clock read or a random number there would only show up as a replay
failure later. These tests read every module of ``workflows/`` and refuse what the sandbox
would: wall clock, randomness, uuids, the environment, files, sleeping threads and I/O clients.
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


def violations(source: str) -> list[str]:
    """What in ``source`` the workflow sandbox would refuse, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
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


@pytest.mark.parametrize("module", sorted(WORKFLOWS_DIR.glob("*.py")), ids=lambda path: path.name)
def test_workflow_module_keeps_the_sandbox_rules(module: Path) -> None:
    """No wall clock, randomness, environment, files or I/O clients in workflow code."""
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
