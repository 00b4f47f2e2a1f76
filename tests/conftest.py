"""Set-up every test layer needs before any module of the test library is imported."""

import contextlib
import os

import pytest

from aiorch_runtime.signals import interrupt_on_stop

# Failed asserts in the test library report their operands as a test's own do: pytest rewrites
# test and conftest modules only, unless told before the import.
pytest.register_assert_rewrite("tests.support")


def pytest_configure(config: pytest.Config) -> None:
    """Each parallel process starts as a plain pytest process does: pytest-xdist's worker
    processes inherit COLUMNS=80 and LINES=24, and Rich fixes a console's width from COLUMNS
    when the console is made, so the CLI's consoles (made when a test module imports them)
    would ignore the COLUMNS a test gives an in-process CLI call.

    A SIGTERM (a cancelled CI job, a ``timeout`` run out) stops the tests as Ctrl-C does, so
    the fixtures' teardowns stop the servers they started: those run in sessions of their own
    and would otherwise outlive the tests, holding their ports."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)
    stop_handlers = contextlib.ExitStack()
    stop_handlers.enter_context(interrupt_on_stop())
    config.add_cleanup(stop_handlers.close)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``long`` first, the rest in their usual order: `make test` hands whole files
    to its parallel processes in this order, so the longest start together at the beginning
    instead of one of them finishing the run alone (docs/testing.md)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
