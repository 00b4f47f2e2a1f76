"""The test tiers stay honest: every test file that starts servers in processes of its own
carries the ``e2e`` marker, so ``make test-fast`` (``-m "not e2e"``) starts none of them, with
one narrow exception: the fast tier may start the capacity store (Valkey, in memory, ready in
well under a second) through ``tests/support/valkey.py``, and nothing else, so what the store
really does (expiry, scripts, its connection pool) is tested on the real store in every tier."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

TESTS = Path(__file__).resolve().parents[1]
# Every file here runs the real dev server, the local stack or worker processes.
E2E_FOLDERS = ("e2e", "security")
# Importing from these means starting servers in processes of their own.
SERVER_STARTERS = ("aiorch.devstack.servers", "aiorch.devstack.stack")
# The one helper the fast tier may use to start a server, and the one starter it may call.
FAST_TIER_HELPER: Final = "tests.support.valkey"
FAST_TIER_STARTER: Final = "start_capacity_store"


def marked(tree: ast.Module, marker: str) -> bool:
    """Whether the module sets ``pytestmark`` to (or to a list holding) ``pytest.mark.MARKER``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            return f"pytest.mark.{marker}" in ast.unparse(node.value)
    return False


def marked_e2e(tree: ast.Module) -> bool:
    return marked(tree, "e2e")


def starter_names(tree: ast.Module) -> set[str]:
    """The names a module imports from the server starters."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(SERVER_STARTERS)
        for alias in node.names
    }


def starting_functions(tree: ast.Module) -> set[str]:
    """The module's functions that call a name it imports from the server starters."""
    names = starter_names(tree)
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(
            isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in names
            for call in ast.walk(node)
        )
    }


def support_starters() -> dict[str, set[str]]:
    """The functions of each test-library module that start servers, the fast tier's helper
    left out: importing one is starting servers, as importing the starters themselves is."""
    found = {}
    for path in sorted((TESTS / "support").glob("*.py")):
        module = f"tests.support.{path.stem}"
        functions = starting_functions(ast.parse(path.read_text(encoding="utf-8")))
        if functions and module != FAST_TIER_HELPER:
            found[module] = functions
    return found


def starts_servers(tree: ast.Module, support: dict[str, set[str]]) -> bool:
    """Whether the module imports what starts servers: the local servers' starters, or a
    function of the test library (``support``) that calls them."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if module.startswith(SERVER_STARTERS):
            return True
        if any(alias.name in support.get(module, set()) for alias in node.names):
            return True
    return False


def test_every_file_that_starts_servers_is_marked_e2e() -> None:
    """Each test file in tests/e2e and tests/security, and each elsewhere that starts servers
    (but the capacity store, through its helper), is marked e2e."""
    support = support_starters()
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = path.relative_to(TESTS)
        must = relative.parts[0] in E2E_FOLDERS or starts_servers(tree, support)
        if must and not marked_e2e(tree):
            unmarked.append(str(relative))
    assert unmarked == []


def test_the_fast_tier_s_helper_starts_the_capacity_store_and_nothing_else() -> None:
    """``tests/support/valkey.py`` imports one thing from the server starters, the capacity
    store's, so the exception cannot grow into a Temporal server, a worker or the stack."""
    helper = TESTS / "support" / f"{FAST_TIER_HELPER.rsplit('.', 1)[1]}.py"
    assert starter_names(ast.parse(helper.read_text(encoding="utf-8"))) == {FAST_TIER_STARTER}


def test_the_check_sees_a_missing_marker() -> None:
    """A module that starts the stack, directly or through the test library, without the
    marker is noticed; with it, it is not; one that only imports the capacity store's helper,
    or a test-library function that starts nothing, is not."""
    support = {"tests.support.live_stack": {"stack_with_worker"}}
    source = "from aiorch.devstack.stack import LocalStack\n"
    assert starts_servers(ast.parse(source), support)
    assert starts_servers(
        ast.parse("from tests.support.live_stack import connect, stack_with_worker\n"), support
    )
    assert not starts_servers(ast.parse("from tests.support.live_stack import connect\n"), support)
    assert not starts_servers(
        ast.parse(f"from {FAST_TIER_HELPER} import capacity_store_url\n"), support
    )
    assert not marked_e2e(ast.parse(source))
    assert marked_e2e(ast.parse(source + "import pytest\npytestmark = pytest.mark.e2e\n"))
    assert marked_e2e(ast.parse("import pytest\npytestmark = [pytest.mark.e2e]\n"))


def test_the_test_library_s_starters_are_found() -> None:
    """The helpers that start the stack or a server are known as starters, those that only
    look at one are not, and the fast tier's helper is left out."""
    support = support_starters()
    assert "stack_with_worker" in support["tests.support.live_stack"]
    assert "unreachable_store" not in support.get("tests.support.capacity_store", set())
    assert FAST_TIER_HELPER not in support


def test_the_docs_name_every_long_file_and_say_why() -> None:
    """docs/testing.md's table of long files names exactly the files marked ``long``, each with
    a reason: a file that becomes long is explained, and one that is no longer long leaves."""
    long_files = {
        f"tests/{path.relative_to(TESTS)}"
        for path in sorted(TESTS.rglob("test_*.py"))
        if marked(ast.parse(path.read_text(encoding="utf-8")), "long")
    }
    table = (TESTS.parent / "docs" / "testing.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(tests/[\w/]+\.py)` \| (.+) \|$", table, re.MULTILINE)
    assert long_files, "no file is marked long"
    assert {path for path, _ in rows} == long_files
    assert all(len(why.split()) >= 8 for _, why in rows), rows
