"""The test tiers stay honest: every test file that starts servers in processes of its own
carries the ``e2e`` marker, so ``make test-fast`` (``-m "not e2e"``) starts none."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Every file here runs the real dev server, the local stack or worker processes.
E2E_FOLDERS = ("e2e", "security")
# Importing these means starting servers in processes of their own.
SERVER_STARTERS = ("aiorch.devstack.servers", "aiorch.devstack.stack")


def marked_e2e(tree: ast.Module) -> bool:
    """Whether the module sets ``pytestmark`` to (or to a list holding) ``pytest.mark.e2e``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            return "pytest.mark.e2e" in ast.unparse(node.value)
    return False


def starts_servers(tree: ast.Module) -> bool:
    """Whether the module imports what starts the local servers."""
    return any(
        isinstance(node, ast.ImportFrom) and (node.module or "").startswith(SERVER_STARTERS)
        for node in ast.walk(tree)
    )


def test_every_file_that_starts_servers_is_marked_e2e() -> None:
    """Each test file in tests/e2e and tests/security, and each elsewhere that starts the
    local servers, is marked e2e; the fast tier starts no server of its own."""
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = path.relative_to(TESTS)
        must = relative.parts[0] in E2E_FOLDERS or starts_servers(tree)
        if must and not marked_e2e(tree):
            unmarked.append(str(relative))
    assert unmarked == []


def test_the_check_sees_a_missing_marker() -> None:
    """A module that starts the stack without the marker is noticed; with it, it is not."""
    source = "from aiorch.devstack.stack import LocalStack\n"
    assert starts_servers(ast.parse(source))
    assert not marked_e2e(ast.parse(source))
    assert marked_e2e(ast.parse(source + "import pytest\npytestmark = pytest.mark.e2e\n"))
    assert marked_e2e(ast.parse("import pytest\npytestmark = [pytest.mark.e2e]\n"))


def marked_long(tree: ast.Module) -> bool:
    """Whether the module's ``pytestmark`` holds ``pytest.mark.long``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            return "pytest.mark.long" in ast.unparse(node.value)
    return False


def test_the_docs_name_every_long_file_and_say_why() -> None:
    """docs/testing.md's table of long files names exactly the files marked ``long``, each with
    a reason: a file that becomes long is explained, and one that is no longer long leaves."""
    marked = {
        f"tests/{path.relative_to(TESTS)}"
        for path in sorted(TESTS.rglob("test_*.py"))
        if marked_long(ast.parse(path.read_text(encoding="utf-8")))
    }
    table = (TESTS.parent / "docs" / "testing.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(tests/[\w/]+\.py)` \| (.+) \|$", table, re.MULTILINE)
    assert marked, "no file is marked long"
    assert {path for path, _ in rows} == marked
    assert all(len(why.split()) >= 8 for _, why in rows), rows
