"""No product module passes 400 lines (the house style: split where a second concern appears or
a module passes about 400 lines), so each room stays small enough to read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[2]
# The product: its packages, and the two entry points beside them.
PRODUCT: Final = ("aiorch", "aiorch_runtime", "activities", "workflows", "bench")
ENTRY_POINTS: Final = ("starter.py", "worker.py")
MAX_LINES: Final = 400


def product_modules(root: Path) -> list[Path]:
    """Every Python module of the product under ``root``."""
    modules = [root / name for name in ENTRY_POINTS if (root / name).is_file()]
    for package in PRODUCT:
        modules += sorted((root / package).rglob("*.py"))
    return modules


def oversized(root: Path) -> list[str]:
    """``path: N lines`` for each product module under ``root`` over `MAX_LINES`."""
    found = []
    for module in product_modules(root):
        name = module.relative_to(root).as_posix()
        lines = len(module.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{name}: {lines} lines")
    return found


def test_no_product_module_passes_400_lines() -> None:
    """Every module of the product has at most 400 lines; the failure names each that has more,
    with its size."""
    assert oversized(ROOT) == []


def test_the_check_names_a_module_over_the_limit_and_its_size(tmp_path: Path) -> None:
    """A module of 401 lines in any product package, or an entry point, is named with its
    size; one of exactly 400 lines, and a file outside the product, are not."""
    (tmp_path / "activities" / "deep").mkdir(parents=True)
    (tmp_path / "activities" / "deep" / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "at_limit.py").write_text("x = 1\n" * 400)
    (tmp_path / "worker.py").write_text("x = 1\n" * 402)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_long.py").write_text("x = 1\n" * 900)
    assert oversized(tmp_path) == ["worker.py: 402 lines", "activities/deep/long.py: 401 lines"]


def test_the_worker_is_built_in_one_screen() -> None:
    """``build_worker`` stays at most 60 lines: the worker loops over the registered pipelines
    and opens its clients on one exit stack, so a new pipeline adds nothing to it."""
    source = (ROOT / "aiorch" / "worker" / "app.py").read_text(encoding="utf-8")
    found = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "build_worker"
    ]
    assert len(found) == 1
    (function,) = found
    start = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    assert function.end_lineno is not None
    assert function.end_lineno - start + 1 <= 60
