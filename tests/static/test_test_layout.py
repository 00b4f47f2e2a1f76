"""The test library stays a library: what tests share lives in modules (``tests/support``, or
beside the one package that uses it), conftest files hold only pytest fixtures and the hooks
pytest calls, and no module imports from a conftest, whose names pytest alone should load."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

from tests.support import ROOT

# pytest's own set-up calls, which a conftest may make at import time.
SETUP_CALLS = frozenset({"pytest.register_assert_rewrite"})


def python_files(root: Path) -> Iterator[Path]:
    """Every Python file of the checkout, leaving out hidden folders (venvs, caches, .git)."""
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        yield from (Path(folder) / name for name in sorted(files) if name.endswith(".py"))


def conftest_imports(tree: ast.Module) -> list[str]:
    """The imports in ``tree`` that load a conftest module, in any spelling."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if "conftest" in alias.name.split(".")]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [alias.name for alias in node.names]
            if "conftest" in module.split(".") or "conftest" in names:
                found.append(f"from {module} import {', '.join(names)}")
    return found


def is_fixture(decorator: ast.expr) -> bool:
    """``@pytest.fixture``, ``@pytest_asyncio.fixture`` or ``@fixture``, called or not."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target).split(".")[-1] == "fixture"


def not_fixtures_or_hooks(tree: ast.Module) -> list[str]:
    """The top-level statements of a conftest that are none of: its docstring, an import, a
    fixture, a ``pytest_*`` hook, ``pytest_plugins``, or one of pytest's set-up calls."""
    found = []
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            node.name.startswith("pytest_") or any(map(is_fixture, node.decorator_list))
        ):
            continue
        if isinstance(node, ast.Expr):
            value = node.value
            if index == 0 and isinstance(value, ast.Constant) and isinstance(value.value, str):
                continue
            if isinstance(value, ast.Call) and ast.unparse(value.func) in SETUP_CALLS:
                continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
            "pytest_plugins"
        ]:
            continue
        found.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


def test_no_module_imports_from_a_conftest() -> None:
    """No Python file in the checkout imports a conftest module: what tests share lives in
    tests/support (or beside the one package that uses it), imported under one name."""
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in python_files(ROOT)
        if (found := conftest_imports(ast.parse(path.read_bytes())))
    }
    assert offenders == {}


def test_conftest_files_hold_only_fixtures_and_hooks() -> None:
    """Every conftest.py under tests/ holds fixtures and pytest hooks, nothing a test could
    want to import."""
    conftests = sorted((ROOT / "tests").rglob("conftest.py"))
    assert conftests, "no conftest.py found: the check would pass vacuously"
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in conftests
        if (found := not_fixtures_or_hooks(ast.parse(path.read_bytes())))
    }
    assert offenders == {}


def test_the_checks_see_what_they_forbid() -> None:
    """Each spelling of a conftest import is noticed and other imports are not; a function, a
    class or a constant in a conftest is noticed, and fixtures, hooks and set-up are not."""
    forbidden = [
        "from tests.workflows.conftest import Orchestration",
        "from .conftest import request",
        "from tests.e2e import conftest",
        "import tests.deploy.conftest",
        "def f():\n    from tests.e2e.conftest import start\n",
    ]
    for source in forbidden:
        assert conftest_imports(ast.parse(source)), source
    allowed = "from tests.support.orchestration import Orchestration\nimport conftests_of_mine\n"
    assert conftest_imports(ast.parse(allowed)) == []

    clean = (
        '"""Fixtures."""\n'
        "import pytest\n"
        "import pytest_asyncio\n"
        "from pytest_asyncio import fixture\n"
        'pytest.register_assert_rewrite("tests.support")\n'
        'pytest_plugins = ["x"]\n'
        "@pytest.fixture\ndef a(): ...\n"
        '@pytest.fixture(scope="session")\ndef b(): ...\n'
        "@pytest_asyncio.fixture\nasync def c(): ...\n"
        "@fixture\nasync def d(): ...\n"
        "def pytest_configure(config): ...\n"
    )
    assert not_fixtures_or_hooks(ast.parse(clean)) == []
    for extra in (
        "def new_id(): ...\n",
        "async def start(client): ...\n",
        "class Simulator: ...\n",
        "WORKER_ENV = {}\n",
        "TIMEOUT: float = 1.0\n",
        "print('set-up')\n",
        '"""Docstring."""\n"""A second string."""\n',
    ):
        assert not_fixtures_or_hooks(ast.parse(clean + extra)), extra
